"""gpusvm: large mini-batch linear and kernel SVMs on NVIDIA GPUs.

Public estimators: :class:`PegasosSVC` (mini-batch Pegasos), :class:`SDCASVC`
(mini-batch SDCA with duality-gap certificates), :class:`SDCASVCCV` and :class:`PegasosSVCCV` (with
``C`` chosen by cross-validation, every (C, fold) model an output of one pass) and
:class:`KernelPegasosSVC` (Pegasos with Mercer kernels).
"""

from ._version import __version__
from .estimators import KernelPegasosSVC, PegasosSVC, SDCASVC
from .estimators.cv import PegasosSVCCV, SDCASVCCV

__all__ = ["KernelPegasosSVC", "PegasosSVC", "PegasosSVCCV", "SDCASVC", "SDCASVCCV",
           "__version__"]
