"""gpusvm: large mini-batch linear and kernel SVMs on NVIDIA GPUs.

Public estimators: :class:`PegasosSVC`.
"""

from ._version import __version__
from .estimators import PegasosSVC

__all__ = ["PegasosSVC", "__version__"]
