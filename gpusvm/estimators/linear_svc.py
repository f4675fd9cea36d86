"""LinearSVC: scikit-learn's ``LinearSVC`` interface on gpusvm's solvers, chosen by the data.

It validates LinearSVC's parameters, picks the solver (:func:`~gpusvm.solvers.policy.choose_solver`),
runs :class:`~gpusvm.estimators.sdca.SDCASVC` with LinearSVC's settings translated, and reports
the result in LinearSVC's attributes.  No mathematics here.
"""

from __future__ import annotations

import math
import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.base import _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import validate_data

from .. import _arrays
from ..backends import BACKENDS, resolve_backend_name
from .._arrays import check_sparse_structure
from ..solvers.policy import batch_size, choose_cv_solver, choose_solver, working_dtype
from ._base import (_LinearSVCBase, _max_sq_row_norm, _mean_sq_norm,
                    intercept_scaling_refusal)
from .cv import SDCASVCCV, _OnePassSearch
from .sdca import SDCASVC

#: with ``dual="auto"``, SDCA (squared hinge) not converged after this many epochs hands over
#: to Newton from its point (news20, ``C = 100``: SDCA alone takes 1,000 epochs, 17 s; the
#: text sets SDCA finishes need at most 160); earlier when its gap's rate says it is that
#: slow (:func:`~gpusvm.solvers.policy.sdca_hands_over`)
SWITCH_EPOCHS = 200


class LinearSVC(_LinearSVCBase):
    r"""Linear Support Vector Classification: scikit-learn's ``LinearSVC`` on gpusvm's solvers.

    The parameters, defaults, attributes and problem of :class:`sklearn.svm.LinearSVC`:
    for two classes (one-vs-rest for more)

    .. math::

        \min_w\ \frac12\|w\|^2 + C\sum_i s_i \max(0, 1 - y_i\langle w, x_i\rangle)^2

    (``loss="squared_hinge"``; without the square for ``"hinge"``), the intercept the
    weight of a regularised constant feature ``intercept_scaling``, as in liblinear.
    The solver is chosen by the data (:func:`~gpusvm.solvers.policy.choose_solver`, the
    faster one on every set and ``C`` of BENCHMARKS.md): mini-batch SDCA
    (:class:`~gpusvm.SDCASVC`) for wide data and small ``C``, primal truncated Newton for
    ``n_samples >= n_features`` and larger ``C``.  Both stop on a duality gap, a
    certificate of the distance to the optimum.

    Parameters
    ----------
    penalty : {"l2"}, default="l2"
        Only the L2 penalty; ``"l1"`` raises an error that names the alternatives.
    loss : {"squared_hinge", "hinge"}, default="squared_hinge"
        The squared hinge or the hinge (dual solver only).
    dual : "auto" or bool, default="auto"
        ``True``: the dual solver (SDCA); ``False``: the primal Newton solver (squared hinge
        only, as in LinearSVC); ``"auto"``: chosen from the data (``choose_solver``).
    tol : float, default=1e-4
        Stop when the duality gap divided by ``C n`` (the objective at ``w = 0``
        without weights) is ``<= tol``: a certified relative suboptimality.  The solvers
        iterate in float32, in float64 for ``tol`` below 1e-6
        (:data:`~gpusvm.solvers.policy.FLOAT32_MIN_TOL`), which float32 cannot reach.
    C : float, default=1.0
        Regularisation parameter (strictly positive).
    multi_class : {"ovr"}, default="ovr"
        One-vs-rest; ``"crammer_singer"`` raises an error that names the alternative.
    fit_intercept : bool, default=True
        Fit an intercept (a regularised constant feature, as liblinear).
    intercept_scaling : float, default=1
        The value of that feature; a larger value regularises the intercept less.
    class_weight : dict or "balanced", default=None
        ``{label: weight}`` or ``"balanced"`` (``n / (n_classes * count)``).  With more
        than two classes a row keeps its weight in every output (liblinear weights only
        the positive class of each).
    verbose : int, default=0
        A progress bar with the live duality gap when > 0 (and the threads the fit ran on).
    random_state : int, RandomState instance or None, default=None
        Seed of the order in which the dual solver visits the rows.
    max_iter : int, default=1000
        The most epochs of the dual solver, or Newton iterations of the primal one
        (per output of one-vs-rest).  On a GPU an epoch of the cap is ``n beta_b / b``
        iterations of the batch ``b`` (:func:`~gpusvm.solvers.policy.epoch_iterations`),
        and ``n_iter_`` counts passes over the rows, which may exceed it.
    backend, device
        As in :class:`~gpusvm.SDCASVC`.
    n_jobs : int or None, default=None
        Threads of the fit (None or -1: every usable core; a positive int at most the
        usable cores), as in :class:`~gpusvm.SDCASVC`:
        large sparse fits by Newton on the compiled CPU backend use them, and a fit with
        the same ``random_state`` and ``n_jobs`` is the same bit for bit.

    Attributes
    ----------
    coef_, intercept_, classes_, n_features_in_, feature_names_in_
        As in :class:`sklearn.svm.LinearSVC`.
    n_iter_ : int
        Epochs of the dual solver or Newton iterations (the most of any output); for
        ``"sdca+newton"``, the epochs of SDCA plus the Newton iterations.
    solver_ : {"sdca", "newton", "sdca+newton"}
        The solver that ran; ``"sdca+newton"``: with ``dual="auto"``, SDCA had not
        converged after :data:`SWITCH_EPOCHS` epochs and Newton finished from its point.
    duality_gap_ : float or ndarray of shape (n_classes,)
        The certificate: the duality gap divided by ``C n`` (see ``tol``), per output.
    backend_ : str
        The backend that ran.
    n_threads_ : int
        Threads the fit ran on.

    See Also
    --------
    sklearn.svm.LinearSVC : the liblinear estimator this one mirrors.
    gpusvm.SDCASVC : the solvers, with all their settings.
    gpusvm.patch_sklearn : make ``sklearn.svm.LinearSVC`` this class in unmodified code.

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> from gpusvm import LinearSVC
    >>> X, y = make_classification(n_samples=200, random_state=0)
    >>> clf = LinearSVC(random_state=0).fit(X, y)
    >>> clf.solver_
    'newton'
    """

    _MULTICLASS = True

    _parameter_constraints: dict = {
        "penalty": [StrOptions({"l1", "l2"})],
        "loss": [StrOptions({"hinge", "squared_hinge"})],
        "dual": ["boolean", StrOptions({"auto"})],
        "tol": [Interval(Real, 0.0, None, closed="neither")],
        "C": [Interval(Real, 0.0, None, closed="neither")],
        "multi_class": [StrOptions({"ovr", "crammer_singer"})],
        "fit_intercept": ["boolean"],
        "intercept_scaling": [Interval(Real, 0, None, closed="neither")],
        "class_weight": [None, dict, StrOptions({"balanced"})],
        "verbose": ["verbose"],
        "random_state": ["random_state"],
        "max_iter": [Interval(Integral, 0, None, closed="left")],
        "backend": [StrOptions(set(BACKENDS))],
        "device": [Interval(Integral, 0, None, closed="left"), None],
        "n_jobs": [Integral, None],
    }

    def __init__(self, penalty="l2", loss="squared_hinge", *, dual="auto", tol=1e-4, C=1.0,
                 multi_class="ovr", fit_intercept=True, intercept_scaling=1, class_weight=None,
                 verbose=0, random_state=None, max_iter=1000, backend="auto", device=None,
                 n_jobs=None):
        self.penalty = penalty
        self.loss = loss
        self.dual = dual
        self.tol = tol
        self.C = C
        self.multi_class = multi_class
        self.fit_intercept = fit_intercept
        self.intercept_scaling = intercept_scaling
        self.class_weight = class_weight
        self.verbose = verbose
        self.random_state = random_state
        self.max_iter = max_iter
        self.backend = backend
        self.device = device
        self.n_jobs = n_jobs

    def unsupported(self):
        """Why gpusvm cannot fit these parameters, in one line, or None when it can.

        Returns
        -------
        str or None
        """
        if self.penalty == "l1":
            return ("penalty='l1' (sparse weights) is not available in gpusvm.LinearSVC, which "
                    "solves the L2-regularised problem; use "
                    "sklearn.svm.LinearSVC(penalty='l1', dual=False) for an L1 penalty")
        if self.multi_class == "crammer_singer":
            return ("multi_class='crammer_singer' is not available in gpusvm.LinearSVC; use "
                    "multi_class='ovr' (one-vs-rest), or "
                    "sklearn.svm.LinearSVC(multi_class='crammer_singer') for the joint problem")
        if self.loss == "hinge" and self.dual is False:
            return ("loss='hinge' has no primal solver (the hinge is not differentiable), as in "
                    "sklearn.svm.LinearSVC: use dual=True or dual='auto', or "
                    "loss='squared_hinge' with dual=False")
        return None

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, sample_weight=None):
        """Fit the model on the training data.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training vectors.
        y : array-like of shape (n_samples,)
            Class labels (two or more classes).
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weight of every row (multiplied by ``class_weight``).

        Returns
        -------
        self : LinearSVC
            The fitted estimator.
        """
        X, y, device = self._check_input(X, y)
        inner = self._inner(X, y)
        switch = self.dual == "auto" and inner.solver == "sdca" and self.loss == "squared_hinge"
        epochs = self._max_epochs()
        if inner.solver == "sdca":  # the cap in epochs, resolved with the batch (policy)
            inner._epochs = min(epochs, SWITCH_EPOCHS) if switch else epochs
        if switch and epochs > SWITCH_EPOCHS:   # SDCA first, Newton from its point if slow
            inner._handover_tol = float(self.tol)
        caught = self._fit_quietly(inner, X, y, sample_weight)
        sdca_epochs = None
        if switch and (inner.stop_reason_ == "handover" or (
                inner.stop_reason_ == "max_iter" and epochs > SWITCH_EPOCHS)):
            sdca_epochs = _epochs(inner.n_iter_, inner.batch_size_, inner._n_rows)
            inner._epochs = inner._handover_tol = None
            inner.set_params(solver="newton", warm_start=True, max_iter=max(self.max_iter, 1))
            caught = self._fit_quietly(inner, X, y, sample_weight)
        for w in caught:
            if not issubclass(w.category, ConvergenceWarning):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        self._copy_fit(inner, device)
        if sdca_epochs is not None:
            self.solver_ = "sdca+newton"
            self.n_iter_ += sdca_epochs
        if inner.stop_reason_ != "tol":
            warnings.warn(self._convergence_message(inner), ConvergenceWarning, stacklevel=2)
        return self

    # ------------------------------------------------------------ internals
    def _check_input(self, X, y):
        """The parameters gpusvm cannot honour as a one-line error; ``X``, ``y`` validated
        once here, to read the shape and norms (the solvers copy nothing), unless on a GPU;
        and whether they are."""
        reason = self.unsupported()
        if reason is not None:
            raise ValueError(reason.replace("gpusvm.LinearSVC", f"gpusvm.{type(self).__name__}"))
        device = _arrays.is_device(X) or _arrays.is_device(y)
        if not device:
            check_sparse_structure(X)
            X, y = validate_data(self, X, y, accept_sparse="csr", dtype=[np.float64, np.float32],
                                 order="C", y_numeric=False)
        return X, y, device

    @staticmethod
    def _fit_quietly(inner, X, y, sample_weight):
        """Fit ``inner``, returning the warnings it raised instead of showing them."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            inner.fit(X, y, sample_weight=sample_weight)
        return caught

    def _max_epochs(self):
        """``max_iter``; 0 runs no iteration (zeros, certified, as scikit-learn's)."""
        return int(self.max_iter)

    def _iterations(self, n, backend):
        """``max_iter`` epochs in SDCA iterations on ``n`` rows (batches of the default size)."""
        return self._max_epochs() * max(math.ceil(n / batch_size(backend, max(n, 1), "auto")), 1)

    def _inner(self, X, y):
        """The SDCASVC that fits this problem (solver chosen, settings translated)."""
        n, d = X.shape
        intercept = float(self.intercept_scaling) if self.fit_intercept else 0.0
        solver = self.dual if self.dual != "auto" else "auto"
        if solver == "auto" and self.loss != "hinge" and d <= n:
            n_classes = len(np.unique(y))
            sq = _mean_sq_norm(X, intercept)
            solver = choose_solver(n, d, float(self.C), sq, n_classes, self.loss, "auto")
        else:
            solver = choose_solver(n, d, float(self.C), 0.0, 2, self.loss, self.dual)
        # SDCA's cap: ``fit`` sets it in epochs (``_epochs``), resolved with the batch
        max_iter = None if solver == "sdca" else self._max_epochs()
        inner = SDCASVC(
            C=float(self.C), loss=self.loss, solver=solver, class_weight=self.class_weight,
            multi_class="ovr", tol=float(self.tol), max_iter=max_iter,
            bias="augmented" if self.fit_intercept else "none",
            intercept_scaling=float(self.intercept_scaling), backend=self.backend,
            dtype=working_dtype(float(self.tol)), random_state=self.random_state,
            verbose=self.verbose, device=self.device, n_jobs=getattr(self, "n_jobs", None))
        inner.set_params(dtype=self._carrying_dtype(inner, X, float(self.C)))
        return inner

    @staticmethod
    def _carrying_dtype(inner, X, C):
        """``inner``'s dtype, or float64 where float32 cannot carry ``lam = 1/(C n)`` (a step
        ``1/lam`` that overflows, weights whose squares underflow), as liblinear fits any
        ``C`` in double precision: ``C=1e30`` on float32 data fits rather than fails; and
        where float32 cannot hold ``intercept_scaling`` (:func:`intercept_scaling_refusal`)."""
        if inner.dtype == "float64":
            return inner.dtype
        if inner.bias == "augmented" and \
                intercept_scaling_refusal(inner.intercept_scaling, np.float32) is not None:
            return "float64"
        if _arrays.is_device(X):
            return inner.dtype
        n = max(X.shape[0], 1)
        if inner._lam_refusal(1.0 / (C * n), "float32", _max_sq_row_norm(X)) is None:
            return inner.dtype
        return "float64"

    def _copy_fit(self, inner, device):
        names = ("coef_", "intercept_", "classes_", "duality_gap_", "backend_", "solver_",
                 "stop_reason_", "n_threads_") + (("n_features_in_",) if device else ())
        for name in names:
            setattr(self, name, getattr(inner, name))
        self.n_iter_ = int(_epochs(inner.n_iter_, inner.batch_size_, inner._n_rows)
                           if inner.solver_ == "sdca" else inner.n_iter_)
        self._inner_estimator = inner

    def _convergence_message(self, inner):
        gap = float(np.max(inner.duality_gap_))
        what = ("epochs of the dual solver (SDCA)" if inner.solver_ == "sdca"
                else "Newton iterations")
        fix = ("increase max_iter, or use dual=False (the primal Newton solver, faster for "
               "large C when n_samples >= n_features), or scale the data"
               if inner.solver_ == "sdca" else "increase max_iter")
        if inner.stop_reason_ != "max_iter":
            what = f"{what}, stopped by {inner.stop_reason_}"
        return (f"gpusvm.LinearSVC did not converge: {self.n_iter_} {what} ended with relative "
                f"duality gap {gap:.3g} > tol={self.tol}; {fix}")


class LinearSVCCV(LinearSVC):
    r"""LinearSVC with ``C`` chosen by cross-validation, every (C, fold) model in one pass.

    :class:`LinearSVC` with ``C`` replaced by ``LogisticRegressionCV``'s search: the
    one-pass search of :class:`~gpusvm.SDCASVCCV` (Newton blocks when ``n >= 4 d``, SDCA
    passes on text; :func:`~gpusvm.solvers.policy.choose_cv_solver`), each model certified
    by its duality gap, then the refit at ``C_`` by the solver :class:`LinearSVC` would
    choose.  scikit-learn's equivalent, ``GridSearchCV(LinearSVC(), {"C": Cs}, cv=cv)``,
    is 8 to 17 times slower on the shared data (BENCHMARKS.md, "Choosing C").

    Parameters
    ----------
    Cs, cv, scoring, refit, n_jobs
        As in :class:`~gpusvm.SDCASVCCV`.
    penalty, loss, dual, tol, multi_class, fit_intercept, intercept_scaling, \
class_weight, verbose, random_state, max_iter, backend, device
        As in :class:`LinearSVC`, for every model of the search and the refit (a refit by
        another solver than the search's runs with that solver's default ``max_iter``).

    Attributes
    ----------
    C_, Cs_, scores_, solver_, refit_solver_
        As in :class:`~gpusvm.SDCASVCCV`.
    duality_gaps_ : ndarray of shape (n_folds, n_Cs, n_problems)
        The certificate of every model of the search (relative, as ``duality_gap_``).
    coef_, intercept_, classes_, n_features_in_, feature_names_in_, duality_gap_, \
backend_, n_iter_
        Of the final model (``n_iter_``: of the refit), as in :class:`LinearSVC`.

    See Also
    --------
    gpusvm.SDCASVCCV : the search, with every setting of SDCASVC.
    sklearn.model_selection.GridSearchCV : one fit per (C, fold).

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> from gpusvm import LinearSVCCV
    >>> X, y = make_classification(n_samples=300, random_state=0)
    >>> search = LinearSVCCV(Cs=[0.01, 0.1, 1.0], cv=3, random_state=0).fit(X, y)
    >>> search.scores_.shape
    (3, 3)
    """

    _parameter_constraints: dict = {
        **{k: v for k, v in LinearSVC._parameter_constraints.items() if k != "C"},
        **_OnePassSearch._SEARCH_CONSTRAINTS,
    }

    def __init__(self, *, Cs=10, cv=None, scoring=None, refit=True, n_jobs=None, penalty="l2",
                 loss="squared_hinge", dual="auto", tol=1e-4, multi_class="ovr",
                 fit_intercept=True, intercept_scaling=1, class_weight=None, verbose=0,
                 random_state=None, max_iter=1000, backend="auto", device=None):
        self.Cs = Cs
        self.cv = cv
        self.scoring = scoring
        self.refit = refit
        self.n_jobs = n_jobs
        self.penalty = penalty
        self.loss = loss
        self.dual = dual
        self.tol = tol
        self.multi_class = multi_class
        self.fit_intercept = fit_intercept
        self.intercept_scaling = intercept_scaling
        self.class_weight = class_weight
        self.verbose = verbose
        self.random_state = random_state
        self.max_iter = max_iter
        self.backend = backend
        self.device = device

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, sample_weight=None):
        """Score every value of ``Cs`` on the folds of ``cv``, choose ``C_``, refit.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        self : LinearSVCCV
            The fitted estimator.
        """
        X, y, device = self._check_input(X, y)
        n, d = X.shape
        # dual="auto": the search's rule and, for the refit, LinearSVC's; True or False: that
        # solver for both.  The search's solver is resolved here to count max_iter in its units
        solver = {True: "sdca", False: "newton"}.get(self.dual, "auto")
        resolved = choose_cv_solver(self.loss, n, d + bool(self.fit_intercept), 1, solver)
        max_iter = self._max_epochs() if resolved != "sdca" else \
            self._iterations(n, resolve_backend_name(self.backend))
        dtype = working_dtype(float(self.tol))
        if self.fit_intercept and intercept_scaling_refusal(self.intercept_scaling, dtype):
            dtype = "float64"           # float32 cannot hold it (LinearSVC's _carrying_dtype)
        search = SDCASVCCV(
            Cs=self.Cs, cv=self.cv, scoring=self.scoring, refit=self.refit, n_jobs=self.n_jobs,
            loss=self.loss, solver=solver, class_weight=self.class_weight, multi_class="ovr",
            tol=float(self.tol), max_iter=max_iter,
            bias="augmented" if self.fit_intercept else "none",
            intercept_scaling=float(self.intercept_scaling), backend=self.backend,
            dtype=dtype, random_state=self.random_state, verbose=self.verbose,
            device=self.device)
        search.fit(X, y, sample_weight=sample_weight)
        names = ["C_", "Cs_", "scores_", "duality_gaps_", "coef_", "intercept_", "classes_",
                 "solver_"] + (["n_features_in_"] if device else [])
        if self.refit:
            names += ["duality_gap_", "backend_", "refit_solver_", "stop_reason_"]
            self.n_iter_ = int(_epochs(search.n_iter_, search.batch_size_, n)
                               if search.refit_solver_ == "sdca" else search.n_iter_)
        for name in names:
            setattr(self, name, getattr(search, name))
        self._search = search
        return self


def _epochs(n_iter, batch, n):
    """SDCA iterations of ``batch`` rows as epochs over ``n`` rows, rounded up."""
    return math.ceil(n_iter * batch / max(n, 1))


__all__ = ["LinearSVC", "LinearSVCCV"]
