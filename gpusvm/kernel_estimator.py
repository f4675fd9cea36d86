"""Former home of :class:`KernelPegasosSVC`, kept so that
``from gpusvm.kernel_estimator import KernelPegasosSVC`` keeps working; the estimator lives in
:mod:`gpusvm.estimators.kernel`."""

from .estimators.kernel import KernelPegasosSVC

__all__ = ["KernelPegasosSVC"]
