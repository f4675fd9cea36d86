"""The scikit-learn estimators of gpusvm: pegasos, sdca, kernel, linear_svc and cv, one module
each, over what they share (:mod:`gpusvm.estimators._base`)."""

from .._arrays import DataScaleWarning
from .kernel import KernelPegasosSVC
from .linear_svc import LinearSVC, LinearSVCCV
from .pegasos import PegasosSVC
from .sdca import SDCASVC

__all__ = ["DataScaleWarning", "KernelPegasosSVC", "LinearSVC", "LinearSVCCV", "PegasosSVC",
           "SDCASVC"]
