"""gpusvm: large mini-batch linear and kernel SVMs on NVIDIA GPUs.

Public estimators: :class:`LinearSVC` (scikit-learn's ``LinearSVC`` interface, the solver
chosen by the data; :class:`LinearSVCCV`, ``C`` chosen by cross-validation), :class:`PegasosSVC`
(mini-batch Pegasos), :class:`SDCASVC` (mini-batch SDCA with duality-gap certificates),
:class:`SDCASVCCV` and :class:`PegasosSVCCV` (``C`` chosen by cross-validation, every (C, fold)
model an output of one pass) and :class:`KernelPegasosSVC` (Pegasos with Mercer kernels).
:func:`patch_sklearn` makes ``sklearn.svm.LinearSVC`` resolve to gpusvm's (:mod:`gpusvm.accel`;
``python -m gpusvm.accel script.py``).
"""

from ._version import __version__
from .accel import patch_sklearn, unpatch_sklearn
from .estimators import KernelPegasosSVC, LinearSVC, LinearSVCCV, PegasosSVC, SDCASVC
from .estimators.cv import PegasosSVCCV, SDCASVCCV

__all__ = ["KernelPegasosSVC", "LinearSVC", "LinearSVCCV", "PegasosSVC", "PegasosSVCCV",
           "SDCASVC", "SDCASVCCV", "__version__", "patch_sklearn", "unpatch_sklearn"]
