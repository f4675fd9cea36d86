"""Former home of :class:`SDCASVC`, kept so that ``from gpusvm.estimators_sdca import SDCASVC``
keeps working; the estimator lives in :mod:`gpusvm.estimators.sdca`."""

from .estimators._base import _gap_progress_bar
from .estimators.sdca import SDCA_BIAS_MODES, SDCASVC

__all__ = ["SDCASVC", "SDCA_BIAS_MODES", "_gap_progress_bar"]
