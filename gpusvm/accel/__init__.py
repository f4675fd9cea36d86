"""Accelerator mode: ``sklearn.svm.LinearSVC`` resolves to gpusvm's in unmodified code.

As scikit-learn-intelex's ``patch_sklearn()`` and cuML's ``python -m cuml.accel`` (README.md):
:func:`patch_sklearn` replaces the attribute ``LinearSVC`` of ``sklearn.svm`` and
``sklearn.svm._classes`` by :class:`~gpusvm.accel.LinearSVC` (:func:`unpatch_sklearn` undoes
it); ``python -m gpusvm.accel [-v] script.py [args ...]`` (or ``-m module``) runs a script
patched from its first line.  Parameters gpusvm cannot honour (``penalty="l1"``,
``multi_class="crammer_singer"``, ``loss="hinge"`` with ``dual=False``) fall back to
scikit-learn's own class, fit by fit, with a one-line log (logger ``gpusvm.accel``, shown
with ``-v``, ``patch_sklearn(verbose=True)`` or the estimator's ``verbose > 0``).
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections import Counter

from sklearn.base import _fit_context

from ..estimators.linear_svc import LinearSVC as _GpusvmLinearSVC

logger = logging.getLogger("gpusvm.accel")

#: scikit-learn's own warning when liblinear stops at ``max_iter`` (sklearn/svm/_base.py): a fit
#: that does not converge in accelerator mode warns with it first, so that filters on that
#: text (``warnings.filterwarnings("ignore", message="Liblinear failed to converge")``) work
SKLEARN_CONVERGENCE_MESSAGE = "Liblinear failed to converge, increase the number of iterations."

#: the attributes replaced by the patch: (module name, attribute)
PATCHED = (("sklearn.svm", "LinearSVC"), ("sklearn.svm._classes", "LinearSVC"))

_originals: dict = {}
_counts: Counter = Counter()


def _sklearn_linear_svc():
    """scikit-learn's own LinearSVC, whether or not the patch is applied."""
    if ("sklearn.svm._classes", "LinearSVC") in _originals:
        return _originals[("sklearn.svm._classes", "LinearSVC")]
    from sklearn.svm._classes import LinearSVC as original  # noqa: PLC0415
    return original


class LinearSVC(_GpusvmLinearSVC):
    """:class:`gpusvm.LinearSVC` standing in for ``sklearn.svm.LinearSVC`` (accelerator mode).

    Fits with gpusvm when it can honour the parameters, and with scikit-learn's
    ``LinearSVC`` otherwise (logged in one line); either way the fitted attributes are
    LinearSVC's (``coef_``, ``intercept_``, ``classes_``, ``n_iter_``, ...).

    Parameters
    ----------
    penalty, loss, dual, tol, C, multi_class, fit_intercept, intercept_scaling, \
class_weight, verbose, random_state, max_iter, backend, device
        As :class:`gpusvm.LinearSVC`.

    Attributes
    ----------
    fitted_by_ : {"gpusvm", "sklearn"}
        Which implementation fitted the model.

    Notes
    -----
    A fit that stops before its certificate reaches ``tol`` warns (``ConvergenceWarning``)
    with scikit-learn's text, :data:`SKLEARN_CONVERGENCE_MESSAGE`, followed by gpusvm's
    account of it (solver, iterations, duality gap).
    """

    def _convergence_message(self, inner):
        return f"{SKLEARN_CONVERGENCE_MESSAGE} {super()._convergence_message(inner)}"

    def fit(self, X, y, sample_weight=None):
        """Fit with gpusvm, or with scikit-learn's LinearSVC for parameters gpusvm lacks.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        self : LinearSVC
        """
        reason = self.unsupported()
        if reason is None:
            super().fit(X, y, sample_weight=sample_weight)
            self.fitted_by_ = "gpusvm"
            _record(self, f"LinearSVC fitted by gpusvm (solver_={self.solver_!r}, "
                          f"backend_={self.backend_!r}, n_iter_={self.n_iter_})")
            return self
        return self._fit_sklearn(X, y, sample_weight, reason)

    @_fit_context(prefer_skip_nested_validation=True)
    def _fit_sklearn(self, X, y, sample_weight, reason):
        params = {k: v for k, v in self.get_params(deep=False).items()
                  if k not in ("backend", "device", "n_jobs")}
        est = _sklearn_linear_svc()(**params).fit(X, y, sample_weight=sample_weight)
        for name in [k for k in list(self.__dict__) if k.endswith("_") and not k.startswith("_")]:
            delattr(self, name)                 # an earlier fit's attributes
        for name, value in vars(est).items():
            if name.endswith("_") and not name.startswith("_"):
                setattr(self, name, value)
        self.solver_ = "liblinear"
        self.fitted_by_ = "sklearn"
        _record(self, f"LinearSVC fitted by scikit-learn: {reason}")
        return self


def _record(est, message: str) -> None:
    """Count a fit and log its one line (shown at INFO, or always when ``est.verbose``)."""
    _counts[est.fitted_by_] += 1
    if est.verbose and not logger.isEnabledFor(logging.INFO):
        print(f"gpusvm.accel: {message}", file=sys.stderr)
    else:
        logger.info(message)


def fit_counts() -> dict:
    """How many LinearSVC fits each implementation ran since the patch was applied.

    Returns
    -------
    dict
        ``{"gpusvm": int, "sklearn": int}``.
    """
    return {"gpusvm": _counts["gpusvm"], "sklearn": _counts["sklearn"]}


def patch_sklearn(verbose: bool = False) -> None:
    """Make ``sklearn.svm.LinearSVC`` resolve to gpusvm's LinearSVC.

    Code that looks the class up after the call (``from sklearn.svm import LinearSVC``,
    ``sklearn.svm.LinearSVC(...)``) gets :class:`gpusvm.accel.LinearSVC`; a name imported
    before the call keeps scikit-learn's class, so patch first.  Calling it twice is harmless.

    Parameters
    ----------
    verbose : bool, default=False
        Log every fit (which implementation ran it) on stderr.
    """
    for module_name, attr in PATCHED:
        module = importlib.import_module(module_name)
        if (module_name, attr) not in _originals:
            _originals[(module_name, attr)] = getattr(module, attr)
        setattr(module, attr, LinearSVC)
    if verbose:
        _enable_log()


def unpatch_sklearn() -> None:
    """Put scikit-learn's own ``LinearSVC`` back (undo :func:`patch_sklearn`)."""
    for (module_name, attr), original in list(_originals.items()):
        setattr(importlib.import_module(module_name), attr, original)
        del _originals[(module_name, attr)]


def is_patched() -> bool:
    """Whether ``sklearn.svm.LinearSVC`` is gpusvm's now (bool)."""
    import sklearn.svm  # noqa: PLC0415
    return sklearn.svm.LinearSVC is LinearSVC


def _enable_log() -> None:
    if not any(getattr(h, "_gpusvm_accel", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("gpusvm.accel: %(message)s"))
        handler._gpusvm_accel = True
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)


__all__ = ["LinearSVC", "fit_counts", "is_patched", "patch_sklearn", "unpatch_sklearn"]
