"""gpusvm: large mini-batch linear and kernel SVMs on NVIDIA GPUs.

Public estimators: :class:`PegasosSVC` (mini-batch Pegasos), :class:`SDCASVC`
(mini-batch SDCA with duality-gap certificates) and :class:`KernelPegasosSVC`
(Pegasos with Mercer kernels).
"""

from ._version import __version__
from .estimators import KernelPegasosSVC, PegasosSVC, SDCASVC

__all__ = ["KernelPegasosSVC", "PegasosSVC", "SDCASVC", "__version__"]
