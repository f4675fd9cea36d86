"""The scikit-learn estimators of gpusvm.

* :mod:`gpusvm.estimators._base`: what they share (validation, labels, data
  preparation, prediction, progress bars);
* :mod:`gpusvm.estimators.pegasos`: :class:`PegasosSVC`;
* :mod:`gpusvm.estimators.sdca`: :class:`SDCASVC`;
* :mod:`gpusvm.estimators.kernel`: :class:`KernelPegasosSVC`;
* :mod:`gpusvm.estimators.linear_svc`: :class:`LinearSVC` (scikit-learn's interface, the
  solver chosen by the data).

The names importable from ``gpusvm.estimators`` before it became a package
(the estimators and the shared helpers) still are.
"""

from ._base import (_INT32_MAX, MAX_ITER, ROW_NORM_HINT, ROW_NORM_WARNING, DataScaleWarning, _as_dtype,
                    _gap_progress_bar, _LinearSVCBase, _max_squared_row_norm, _progress_bar,
                    binary_labels, check_sparse_structure, warn_if_rows_unscaled, warn_short_tail)
from .kernel import KernelPegasosSVC
from .linear_svc import LinearSVC
from .pegasos import PegasosSVC
from .sdca import SDCA_BIAS_MODES, SDCASVC

__all__ = ["DataScaleWarning", "KernelPegasosSVC", "LinearSVC", "PegasosSVC", "SDCASVC", "binary_labels",
           "check_sparse_structure", "warn_if_rows_unscaled", "warn_short_tail",
           "MAX_ITER",
           "ROW_NORM_HINT", "ROW_NORM_WARNING", "SDCA_BIAS_MODES", "_INT32_MAX", "_LinearSVCBase", "_as_dtype",
           "_gap_progress_bar", "_max_squared_row_norm", "_progress_bar"]
