"""Backends: the same primitives on NumPy/SciPy, on CuPy, and on the CPU kernel emulator.

``make_backend(name, X, y)`` builds one for a CSR matrix and labels in {-1, +1}.
"""

from __future__ import annotations

from .numpy_ import NumpyBackend

BACKENDS = ("auto", "numpy", "numba", "cupy", "emulated")


def cuda_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # ImportError, CUDARuntimeError, missing driver
        return False


def numba_available() -> bool:
    """True when numba imports (the optional ``fast`` extra, for the compiled CPU backend)."""
    try:
        import numba  # noqa: F401, PLC0415
        return True
    except ImportError:
        return False


def resolve_backend_name(name: str) -> str:
    """Map ``"auto"`` to ``"cupy"`` when a device exists, else ``"numba"`` when numba
    imports, else ``"numpy"``; check the name."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    if name == "auto":
        if cuda_available():
            return "cupy"
        return "numba" if numba_available() else "numpy"
    if name == "cupy" and not cuda_available():
        raise RuntimeError(
            "backend='cupy' needs CuPy and a CUDA device, and none was found; install "
            "gpusvm[cuda12] or gpusvm[cuda13] on a CUDA machine, or use backend='numpy' "
            "(run `gpusvm info` to see which backends can run here)")
    return name


def make_backend(name: str, X, y, sample_weight=None, device=None):
    """Build the backend ``name`` for CSR ``X`` and labels ``y`` in {-1, +1}.

    Parameters
    ----------
    name : {"auto", "numpy", "numba", "cupy", "emulated"}
        ``"numba"`` is the compiled CPU backend (needs the ``fast`` extra);
        ``"emulated"`` runs the device backend's orchestration with NumPy arrays
        and the CUDA kernels on the CPU kernel emulator (slow; for verification).
    X : scipy.sparse.csr_matrix (or a CuPy CSR matrix for ``"cupy"``)
    y : array of shape (n,) or (n, M)
        One column per output (ALGORITHMS.md, "Many outputs at once");
        ``backend.n_outputs`` is ``M`` (1 for 1-D ``y``).
    sample_weight : array of shape (n,) or (n, M), optional
        Example weights ``s_i >= 0``: one per row, shared by every output
        (sample_weight times class_weight[y_i]; ALGORITHMS.md, "Weights"), or one
        per row and output, ``s_ic`` (a cross-validation fold's rows have weight 0
        for the outputs that hold it out; ALGORITHMS.md, "Model selection in one
        pass").
    device : int, optional
        CUDA device id the device backend is bound to (as ``cupy.cuda.Device(id)``;
        default: the current device).  ``"emulated"`` emulates one device, id 0.
        Refused with a CPU backend (``"numpy"``, ``"numba"``, or ``"auto"`` without a GPU),
        where it would be silently ignored.

    Returns
    -------
    Backend
    """
    name = resolve_backend_name(name)
    if device is not None and name in ("numpy", "numba"):
        raise ValueError(f"device={device!r} selects a GPU, but the backend is {name!r}, which "
                         "runs on the CPU; use backend='cupy' (or leave device=None)")
    if name == "numpy":
        return NumpyBackend(X, y, sample_weight)
    if name == "numba":
        from .numba_ import NumbaBackend  # noqa: PLC0415  (optional: numba)
        return NumbaBackend(X, y, sample_weight)
    from .device import make_device_backend  # noqa: PLC0415  (optional, heavy)
    options = {} if device is None else {"device": device}
    if sample_weight is not None or getattr(y, "ndim", 1) != 1:
        options["sample_weight"] = sample_weight
    return make_device_backend(name, X, y, **options)
