"""Backend-agnostic solver loops (Pegasos, mini-batch SDCA, kernelized Pegasos)."""
