"""gpusvm: large mini-batch linear and kernel SVMs on NVIDIA GPUs.

Public estimators: :class:`PegasosSVC`.
"""

from ._version import __version__
from .estimators import PegasosSVC
from .kernel_estimator import KernelPegasosSVC

__all__ = ["KernelPegasosSVC", "PegasosSVC", "__version__"]
