"""The scikit-learn estimators of gpusvm, one module each (:mod:`~gpusvm.estimators.pegasos`,
:mod:`~gpusvm.estimators.sdca`, :mod:`~gpusvm.estimators.kernel`,
:mod:`~gpusvm.estimators.linear_svc`, :mod:`~gpusvm.estimators.cv`) over what they share
(:mod:`gpusvm.estimators._base`)."""

from .._arrays import DataScaleWarning
from .kernel import KernelPegasosSVC
from .linear_svc import LinearSVC, LinearSVCCV
from .pegasos import PegasosSVC
from .sdca import SDCASVC

__all__ = ["DataScaleWarning", "KernelPegasosSVC", "LinearSVC", "LinearSVCCV", "PegasosSVC",
           "SDCASVC"]
