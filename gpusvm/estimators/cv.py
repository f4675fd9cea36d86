r"""Choosing ``C`` by cross-validation in one pass: :class:`SDCASVCCV`, :class:`PegasosSVCCV`.

The ``n_Cs x K`` models of a search (times the binary problems) are outputs of one solver
call on all the rows: output ``j = (problem p, C_j, fold f)`` has the labels of ``p`` and
the row weights

.. math::

    s_{ij} = \text{sample\_weight}_i \cdot \text{class\_weight}_f[y_i]
             \cdot [i \in \text{train}_f] \cdot [i \in \text{rows}_p] \cdot C_j / C_\text{ref},

with one shared ``lam_ref = 1/(C_ref n)``.  Output ``j`` then minimises ``(C_j / C_ref)
(n_j / n)`` times the objective of ``SDCASVC(C=C_j)`` on the ``n_j`` training rows of
``p`` in fold ``f``, so it reaches the same model; :func:`gpusvm.solvers.sdca.sdca`
reports its duality gap in that fit's units (``output_scale``), so every output stops on
its own certificate.  A held-out row (weight 0) costs its output no step.

The values of ``C`` are solved in ascending groups, each warm-started from the dual point
of the largest ``C`` before (Chu et al., KDD 2015, as LIBLINEAR's ``train -C``), clipped
to the hinge's box.  A pass holds ``~ 36 n + 28 d`` bytes per output, within
:data:`MEMORY_BUDGET`; ``n_jobs`` threads share the ``(problem, fold)`` lanes.
"""

from __future__ import annotations

import math
import threading
import warnings
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from numbers import Integral

import numpy as np
from sklearn.base import _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import check_scoring
from sklearn.model_selection import check_cv
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.class_weight import compute_class_weight
from sklearn.utils.validation import _check_sample_weight, check_is_fitted

from .._threads import resolve_n_jobs
from ..backends import make_backend, resolve_backend_name
from ..solvers.newton import DEFAULT_MAX_ITER as DEFAULT_NEWTON_ITER
from ..solvers.newton import block_products, device_block_products, newton_block
from ..solvers.policy import choose_cv_solver, choose_solver, sdca_settings
from ..solvers.sdca import sdca
from ._base import _mean_sq_norm, class_labels, finishes_compiles, output_problems, row_weights
from .pegasos import PegasosSVC
from .sdca import SDCASVC

#: bytes one pass may hold for its outputs (alpha, weights, labels, margins, W)
MEMORY_BUDGET = 1 << 30
#: LIBLINEAR's largest C of ``train -C`` (the top of the grid when ``Cs`` is an int)
LIBLINEAR_MAX_C = 1024.0
#: values of C per pass on the CPU backends (measured: BENCHMARKS.md, "Choosing C")
_LEVELS_CPU = 1


def default_Cs(n_Cs: int, n: int, max_sq_norm: float, loss: str) -> np.ndarray:
    """A log grid of ``n_Cs`` values of ``C`` for ``n`` rows, as LIBLINEAR's search.

    From LIBLINEAR's start (``calc_start_C``: ``2^floor(log2(1 / (2 n max_sq_norm)))``
    for the squared hinge, below which every model is nearly ``w = 0``; without the 2
    for the hinge) to its ``max_C`` (1024).

    Parameters
    ----------
    n_Cs, n : int
        The size of the grid; the number of rows.
    max_sq_norm : float
        ``max_i ||x_i||^2``, bias feature included.
    loss : {"hinge", "squared_hinge"}

    Returns
    -------
    ndarray of shape (n_Cs,)
    """
    factor = 2.0 if loss == "squared_hinge" else 1.0
    low = 2.0 ** math.floor(math.log2(1.0 / (factor * n * max(max_sq_norm, 1e-300))))
    low = min(low, LIBLINEAR_MAX_C / 2)
    if n_Cs == 1:
        return np.array([1.0])
    return np.logspace(math.log2(low), math.log2(LIBLINEAR_MAX_C), n_Cs, base=2.0)


def check_Cs(Cs) -> np.ndarray:
    """``Cs`` as a sorted float64 array of distinct values; one-line errors for bad ones."""
    arr = np.asarray(Cs, dtype=np.float64).ravel() if not isinstance(Cs, str) else None
    if arr is None or arr.size == 0:
        raise ValueError(f"Cs must be a positive int or a non-empty list of positive values of "
                         f"C, got {Cs!r}")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        bad = arr[~(np.isfinite(arr) & (arr > 0))][0].item()
        raise ValueError(f"Cs must hold finite values > 0 (C = 1/(lam n)), got {bad!r}; "
                         "e.g. Cs=np.logspace(-4, 4, 10)")
    return np.unique(arr)


class _OnePassSearch:
    """What SDCASVCCV and PegasosSVCCV share: folds, weights per output, scores, choice.

    A subclass names its base estimator (``_BASE``) and implements ``_run(lanes,
    ctx)`` (fit the models of the ``(problem, fold)`` lanes for every ``C`` and
    ``ctx["result"].record`` them), ``_refit`` and ``_check_search``.
    """

    _BASE = None
    _SEARCH_CONSTRAINTS = {
        "Cs": [Interval(Integral, 1, None, closed="left"), "array-like"],
        "cv": ["cv_object"],
        "scoring": [str, callable, None],
        "refit": ["boolean"],
        "n_jobs": [Integral, None],
    }

    # the parameters of the base estimator that a search does not take from the user
    lam = None
    C = None
    warm_start = False
    max_time = None
    callback = None
    target_objective = None

    def _choose_solver(self, n: int, d: int, n_problems: int) -> str:
        return "pegasos"

    def _check_search(self) -> None:
        """Refuse options the search cannot honour (before any work)."""

    def _base_params(self) -> dict:
        """The parameters of the base estimator, for the models of the search and the refit."""
        names = self._BASE().get_params().keys()
        own = self.get_params(deep=False)
        return {k: own[k] for k in names if k in own}

    def to_estimator(self):
        """The refitted model as a plain estimator (SDCASVC, PegasosSVC) at ``C_``.

        Returns
        -------
        SDCASVC or PegasosSVC
            Fitted: its parameters those of this search with ``C=C_``, its attributes
            those of the refit (what :func:`gpusvm.model_io.save_model` writes).
        """
        check_is_fitted(self)
        if not self.refit:
            raise ValueError("to_estimator needs the model refitted at C_; fit with refit=True")
        est = self._BASE(**self._base_params(), C=self.C_)
        _copy_fitted(self, est, skip={"Cs_", "C_", "scores_", "duality_gaps_", "n_iter_cv_",
                                      "search_products_"})
        return est

    # ------------------------------------------------------------------ fit
    @_fit_context(prefer_skip_nested_validation=True)
    @finishes_compiles
    def fit(self, X, y, sample_weight=None):
        """Score every value of ``Cs`` on the folds of ``cv``, choose ``C_``, refit.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        sample_weight : array-like of shape (n_samples,) or None

        Returns
        -------
        self : estimator
        """
        self._check_search()
        Cs = check_Cs(self.Cs) if not isinstance(self.Cs, Integral) else None
        Xc, y = self._prepare(X, y)
        classes, y_idx = class_labels(y, type(self).__name__)
        K = classes.size
        n_problems = 1 if K == 2 else {"ovr": K, "ovo": K * (K - 1) // 2}.get(self.multi_class,
                                                                              K - 1)
        self.solver_ = self._choose_solver(*Xc.shape, n_problems)
        n, d_aug = Xc.shape
        sw = None if sample_weight is None else _check_sample_weight(
            sample_weight, Xc, dtype=np.float64, ensure_non_negative=True,
            allow_all_zero_weights=False)
        if Cs is None:
            Cs = default_Cs(int(self.Cs), n, self._max_sq + (self.bias == "augmented")
                            * self.intercept_scaling ** 2, self.loss)
        folds = self._folds(X, y, classes, y_idx)
        scorer = check_scoring(self, scoring=self.scoring)
        problems = [(rows, np.asarray(Y, dtype=np.float64))
                    for rows, Y in output_problems(classes.size, y_idx, self.multi_class)]
        labels, masks = _problem_columns(problems, n)
        fold_weights, n_train = self._fold_weights(folds, sw, classes, y_idx, masks, n)
        n_P, n_F, n_C = labels.shape[1], len(folds), Cs.size
        C_ref = float(Cs[-1])
        lam_ref = 1.0 / (C_ref * n)
        result = _SearchResult(n_F, n_C, n_P, n, d_aug)
        lanes = [(p, f) for f in range(n_F) for p in range(n_P)]
        budget_per_output = (36 + Xc.dtype.itemsize) * n + 28 * d_aug
        # a device runs one stream (a graph capture forbids other threads' allocations); on
        # the CPU threads share the lanes (Newton on 2 cores: letter 3.10 -> 2.20 s)
        on_device = resolve_backend_name(self.backend) not in ("numpy", "numba")
        workers = 1 if on_device else _effective_jobs(self.n_jobs, len(lanes))
        groups = [lanes[i::workers] for i in range(workers)]
        device_backend = resolve_backend_name(self.backend) if on_device else None
        ctx = dict(products=_SharedProducts(Xc, device_backend, self.device), Xc=Xc,
                   labels=labels, masks=masks, fold_weights=fold_weights, n_train=n_train,
                   Cs=Cs, C_ref=C_ref, lam_ref=lam_ref, result=result,
                   budget=max(1, MEMORY_BUDGET // workers // budget_per_output))
        if workers == 1:
            self._run(groups[0], ctx)
        else:
            _run_lanes(self._run, groups, ctx, workers)
        self.Cs_ = Cs
        self.classes_ = classes
        self.scores_ = self._score(Xc, y, folds, result, scorer, classes, problems)
        mean = self.scores_.mean(axis=0)
        best = int(np.flatnonzero(mean == np.max(mean))[0])   # the smallest C among ties
        self.C_ = float(Cs[best])
        self.n_iter_cv_ = result.n_iter
        self.search_products_ = tuple(result.products)
        self._certificates(result, Cs)
        if self.refit:
            self._refit(X, y, sample_weight, best, result, folds, classes, problems, n, Xc)
        else:
            W = np.mean([result.model(f, best) for f in range(n_F)], axis=0)
            b = np.mean([result.intercepts(f, best) for f in range(n_F)], axis=0)
            self._set_solution(W, b)
            self.lam_ = 1.0 / (self.C_ * n)
        return self

    # ------------------------------------------------------------------ pieces
    def _folds(self, X, y, classes, y_idx):
        cv = check_cv(self.cv, y, classifier=True)
        counts = np.bincount(y_idx, minlength=classes.size)
        k = cv.get_n_splits(X, y) if hasattr(cv, "get_n_splits") else None
        if type(cv).__name__ in ("StratifiedKFold", "RepeatedStratifiedKFold") and k and \
                counts.min() < cv.n_splits:
            small = classes[int(np.argmin(counts))]
            small = small.item() if hasattr(small, "item") else small
            raise ValueError(
                f"cv={cv.n_splits} folds, but class {small!r} has only {int(counts.min())} "
                f"rows: each stratified fold needs rows of every class; use cv <= "
                f"{int(counts.min())}, or more data")
        folds = [(np.asarray(tr), np.asarray(te)) for tr, te in cv.split(np.zeros((y.size, 1)), y)]
        if not folds:
            raise ValueError("cv produced no folds")
        for f, (tr, te) in enumerate(folds):
            present = np.unique(y_idx[tr])
            if present.size < 2:
                one = classes[present[0]]
                one = one.item() if hasattr(one, "item") else one
                raise ValueError(
                    f"fold {f} of cv trains on one class only ({one!r}): "
                    "every training fold needs two classes; use a stratified splitter "
                    "(cv=int does) or fewer folds")
            if te.size == 0:
                raise ValueError(f"fold {f} of cv has no held-out rows to score")
        return folds

    def _fold_weights(self, folds, sw, classes, y_idx, masks, n):
        """Per fold: the row weights of its training rows (0 elsewhere), float64 (n,),
        and per (fold, problem) the number of training rows of the problem."""
        weights, n_train = [], np.zeros((len(folds), masks.shape[1]))
        for f, (tr, _) in enumerate(folds):
            s = np.zeros(n)
            s[tr] = 1.0 if sw is None else sw[tr]
            if self.class_weight is not None:      # a class the fold lacks keeps weight 1
                present = np.unique(y_idx[tr])
                cw = np.ones(classes.size)
                cw[present] = compute_class_weight(self.class_weight, classes=classes[present],
                                                   y=classes[y_idx[tr]],
                                                   sample_weight=None if sw is None else sw[tr])
                s[tr] *= cw[y_idx[tr]]
            weights.append(s)
            train = np.zeros(n, dtype=bool)
            train[tr] = True
            n_train[f] = (masks & train[:, None]).sum(axis=0)
        return weights, n_train

    def _outputs(self, outs, ctx):
        """Labels (n, M), weights (n, M), gap scales and ``C_j / C_ref`` of the outputs."""
        labels, Cs, C_ref = ctx["labels"], ctx["Cs"], ctx["C_ref"]
        n = labels.shape[0]
        Y = np.empty((n, len(outs)))
        S = np.empty((n, len(outs)))
        scale = np.empty(len(outs))
        g = np.empty(len(outs))
        for j, (ci, p, f) in enumerate(outs):
            g[j] = Cs[ci] / C_ref
            Y[:, j] = labels[:, p]
            S[:, j] = ctx["fold_weights"][f] * ctx["masks"][:, p] * g[j]
            scale[j] = n / (g[j] * max(ctx["n_train"][f, p], 1.0))
        return Y, S, scale, g

    def _score(self, Xc, y, folds, result, scorer, classes, problems):
        d = Xc.shape[1] - (self.bias == "augmented")
        Xs = Xc[:, :d]
        scores = np.empty((len(folds), result.n_C))
        view = self._BASE(**self._base_params())         # what the scorer calls predict on
        view.classes_ = classes
        view.n_features_in_ = d
        accuracy = self.scoring is None or self.scoring == "accuracy"
        for f, (_, te) in enumerate(folds):
            Xte, yte = Xs[te], y[te]
            if accuracy:                # every C's model in one product: Xte @ [W_C1 W_C2 ...]
                views = []
                for ci in range(result.n_C):
                    view._set_solution(result.model(f, ci), result.intercepts(f, ci))
                    views.append((view.coef_.copy(), view.intercept_.copy()))
                coef = np.vstack([c for c, _ in views])
                Z = np.asarray(Xte @ coef.T.astype(Xte.dtype), dtype=np.float64)
                Z += np.concatenate([b for _, b in views])
                for ci in range(result.n_C):
                    block = Z[:, ci * result.n_P:(ci + 1) * result.n_P]
                    scores[f, ci] = np.mean(view._labels(block) == yte)
                continue
            for ci in range(result.n_C):
                view._set_solution(result.model(f, ci), result.intercepts(f, ci))
                scores[f, ci] = scorer(view, Xte, yte)
        return scores

    def _certificates(self, result, Cs):
        self.duality_gaps_ = result.gap
        bad = np.argwhere(~(result.gap <= self.tol))
        if bad.size:
            f, ci, p = bad[0]
            warnings.warn(
                f"{bad.shape[0]} of the {result.gap.size} models of the search ended above "
                f"tol={self.tol}, e.g. C={Cs[ci]:.4g} on fold {f} (problem {p}) with duality gap "
                f"{result.gap[f, ci, p]:.3g}; increase max_iter, or use loss='squared_hinge' "
                "with solver='newton' at large C", ConvergenceWarning, stacklevel=3)


class SDCASVCCV(_OnePassSearch, SDCASVC):
    r"""SDCASVC with ``C`` chosen by cross-validation, every (C, fold) model in one pass.

    ``LogisticRegressionCV``'s conventions: ``C_`` has the best mean score over the folds,
    and the refit at ``C_`` starts from the folds' dual points.  The models of the search
    are outputs of one solver call (module docstring), each stopped by its own gap.

    Parameters
    ----------
    Cs : int or array-like of float, default=10
        The values of ``C`` (LinearSVC's meaning), or the size of a log grid from
        LIBLINEAR's smallest useful ``C`` for the data to 1024 (:func:`default_Cs`).
    cv : int, cross-validation generator or iterable, default=None
        As in scikit-learn: None is 5 folds, an int that many, stratified
        (``StratifiedKFold``, no shuffling).
    scoring : str or callable, default=None
        A scikit-learn scorer name or callable; None is accuracy.
    refit : bool, default=True
        Fit the final model on all rows at ``C_``; with False, ``coef_`` and
        ``intercept_`` are the mean of the folds' models at ``C_``.
    n_jobs : int or None, default=None
        Threads the (problem, fold) lanes are split across (None, -1: every core this
        process may run on; a positive int at most those cores); a GPU backend runs one.
    solver : {"auto", "sdca", "newton"}, default="auto"
        SDCA passes, or (squared hinge) primal Newton on the folds of one ``C`` as one
        block (:func:`~gpusvm.solvers.newton.newton_block`), warm-started along ``C``.
        ``"auto"``: Newton for the squared hinge when ``n >= 4 d``, else SDCA; the refit
        takes :class:`~gpusvm.LinearSVC`'s solver (with its default ``max_iter`` when
        it is not the search's).
    loss, class_weight, multi_class, batch_size, variant, theta, tol, sigma2, \
max_iter, sampling, bias, intercept_scaling, eval_every, backend, dtype, random_state, \
verbose, shrinking, device
        As in :class:`~gpusvm.SDCASVC`, for every model of the search and the refit.

    Attributes
    ----------
    Cs_ : ndarray of shape (n_Cs,)
        The values of ``C`` tried, ascending.
    C_ : float
        The chosen value (the smallest ``C`` among ties).
    scores_ : ndarray of shape (n_folds, n_Cs)
        The score of every (fold, C) model on its fold's held-out rows.
    duality_gaps_ : ndarray of shape (n_folds, n_Cs, n_problems)
        The certified gap of every model of the search, in the units of an
        ``SDCASVC(C=C)`` fit on the fold's training rows.
    coef_, intercept_, classes_, n_features_in_, feature_names_in_
        Of the final model.
    lam_, alpha_, duality_gap_, primal_objective_, dual_objective_, n_iter_, \
stop_reason_, history_
        Of the refit (``refit=True``), as in SDCASVC.
    solver_, refit_solver_ : {"sdca", "newton"}
        The solver of the search; of the refit (``refit=True``).
    n_iter_cv_ : ndarray of shape (n_folds, n_Cs, n_problems)
        Iterations of every model of the search (SDCA: of the pass it was in).
    search_products_ : tuple of (int, int)
        Newton's sparse-times-block products and their columns summed (what
        ``benchmarks/roofline.py`` models); ``(0, 0)`` for SDCA.

    Notes
    -----
    Class weights are computed on each fold's training rows, as in a GridSearchCV.
    """

    _BASE = SDCASVC
    _parameter_constraints: dict = {
        **{k: v for k, v in SDCASVC._parameter_constraints.items()
           if k not in ("lam", "C", "warm_start", "max_time", "callback")},
        **_OnePassSearch._SEARCH_CONSTRAINTS,
        "solver": [StrOptions({"auto", "sdca", "newton"})],
    }

    def __init__(self, *, Cs=10, cv=None, scoring=None, refit=True, n_jobs=None,
                 loss="hinge", solver="auto", class_weight=None, multi_class="ovr",
                 batch_size="auto", variant="auto", theta=0.5, tol=1e-3, sigma2=None,
                 max_iter=None, sampling="epoch", bias="augmented", intercept_scaling=1.0,
                 eval_every=None, backend="auto", dtype="float32", random_state=None,
                 verbose=0, shrinking=True, device=None):
        self.Cs = Cs
        self.cv = cv
        self.scoring = scoring
        self.refit = refit
        self.n_jobs = n_jobs
        self.loss = loss
        self.solver = solver
        self.class_weight = class_weight
        self.multi_class = multi_class
        self.batch_size = batch_size
        self.variant = variant
        self.theta = theta
        self.tol = tol
        self.sigma2 = sigma2
        self.max_iter = max_iter
        self.sampling = sampling
        self.bias = bias
        self.intercept_scaling = intercept_scaling
        self.eval_every = eval_every
        self.backend = backend
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose
        self.shrinking = shrinking
        self.device = device

    def _base_params(self) -> dict:
        params = super()._base_params()
        params["solver"] = getattr(self, "solver_", "sdca")
        return params

    def _choose_solver(self, n: int, d: int, n_problems: int) -> str:
        """:func:`~gpusvm.solvers.policy.choose_cv_solver`."""
        return choose_cv_solver(self.loss, n, d, n_problems, self.solver)

    def _check_search(self) -> None:
        if self.bias not in ("none", "augmented"):
            raise ValueError(f"SDCASVCCV supports bias='none' or bias='augmented', got "
                             f"bias={self.bias!r}")
        if self.solver == "newton" and self.loss != "squared_hinge":
            raise ValueError(
                f"solver='newton' minimises the squared hinge, but loss={self.loss!r}: use "
                "loss='squared_hinge' with solver='newton', or solver='sdca' for the hinge")

    def _run(self, lanes, ctx):
        if self.solver_ == "newton":
            return self._run_newton(lanes, ctx)
        return self._run_sdca(lanes, ctx)

    def _run_sdca(self, lanes, ctx):
        """The SDCA passes of the lanes (problem, fold), ``C`` in ascending groups."""
        Xc, Cs = ctx["Xc"], ctx["Cs"]
        n = Xc.shape[0]
        per_level = len(lanes)
        budget = ctx["budget"]
        if per_level > budget:                    # even one C for every lane is too much
            for i in range(0, per_level, budget):
                self._run_sdca(lanes[i:i + budget], ctx)
            return
        levels = max(1, min(len(Cs), budget // per_level, self._levels_per_pass()))
        backend = resolve_backend_name(self.backend)
        b, variant, max_iter, *_ = sdca_settings(backend, n, self.batch_size, self.variant,
                                                self.max_iter, False)
        prev = None                               # own-unit alpha of the last level (n, lanes)
        stop = ctx.get("stop")
        callback = None if stop is None else (lambda t, primal, elapsed: not stop.is_set())
        for c0 in range(0, len(Cs), levels):
            if stop is not None and stop.is_set():
                return
            block = range(c0, min(len(Cs), c0 + levels))
            outs = [(ci, p, f) for ci in block for (p, f) in lanes]
            Y, S, scale, g = self._outputs(outs, ctx)
            alpha0 = None
            if prev is not None:                  # warm start along C, each fit's own units
                alpha0 = np.tile(prev, (1, len(block))) * g[None, :]
                if self.loss == "hinge":
                    alpha0 = np.minimum(alpha0, S)
            be = make_backend(backend, Xc, Y.astype(Xc.dtype), sample_weight=S,
                              device=self.device)
            res = sdca(be, lam=ctx["lam_ref"], b=b, max_iter=max_iter, variant=variant,
                       theta=float(self.theta), sigma2=self.sigma2, tol=float(self.tol),
                       sampling=self.sampling, seed=self._seed(), eval_every=self.eval_every,
                       shrinking=False, loss=self.loss, alpha0=alpha0, output_scale=scale,
                       callback=callback)
            if res.stop_reason == "callback":     # the search is stopping (_run_lanes)
                return
            ex = res.extra
            W = np.asarray(res.w, dtype=np.float64).reshape(Xc.shape[1], -1)
            A = np.asarray(ex["alpha"], dtype=np.float64).reshape(n, -1)
            own = A / g[None, :]
            prev = own[:, -len(lanes):]
            ctx["result"].record(outs, W, own, np.atleast_1d(ex["gap"]), res.n_iter)

    def _run_newton(self, lanes, ctx):
        """Newton on the lanes' models, all lanes of one ``C`` as one block
        (:func:`~gpusvm.solvers.newton.newton_block`), ``C`` ascending, each block
        starting from the weights of the previous ``C``."""
        Cs = ctx["Cs"]
        max_iter = self.max_iter if self.max_iter is not None else DEFAULT_NEWTON_ITER
        products = ctx["products"]()               # the float64 matrix and its squares, once
        prev = None
        stop = ctx.get("stop")
        for ci in range(len(Cs)):
            if stop is not None and stop.is_set():  # the search is stopping (_run_lanes)
                return
            outs = [(ci, p, f) for (p, f) in lanes]
            Y, S, scale, g = self._outputs(outs, ctx)
            res = newton_block(None, Y, S, ctx["lam_ref"], float(self.tol) / scale, W0=prev,
                               max_iter=max_iter, products=products)
            prev = res["w"]
            ctx["result"].count_products(res["products"], res["product_columns"])
            # no dual points kept: a refit after Newton starts from the weights (Newton) or
            # from zero (SDCA, at a small C, where it needs a few epochs)
            ctx["result"].record(outs, res["w"], None, res["gap"] * scale, res["n_iter"])

    def _levels_per_pass(self) -> int:
        """Values of ``C`` in one pass: all of them on a device (a wide M is the cheap
        direction there), ``_LEVELS_CPU`` on the CPU, where every output costs its
        own work and the warm start from the previous group saves more."""
        if resolve_backend_name(self.backend) in ("numpy", "numba"):
            return _LEVELS_CPU
        return 1 << 30

    def _refit(self, X, y, sample_weight, best, result, folds, classes, problems, n, Xc):
        params = self._base_params()
        if self.solver == "auto" and self.loss == "squared_hinge":
            # one model: the rule of a single fit (gpusvm.LinearSVC's), not the search's,
            # which weighs how many models share a pass (letter, 26 classes, C = 32: the
            # search's SDCA refit took 0.81 s warm-started, Newton 0.20 s cold)
            params["solver"] = choose_solver(*Xc.shape, self.C_, _mean_sq_norm(Xc, 0.0),
                                             classes.size, self.loss)
            if params["solver"] != self.solver_:  # max_iter counts the search's iterations
                params["max_iter"] = None
        est = SDCASVC(**params, C=self.C_)
        # warm start: each row's alpha from a fold that trained on it (SDCA searches keep
        # them; Newton reads w only), the mean model's w
        alpha = np.zeros((n, result.n_P))
        n_F = len(folds)
        if result.alpha is not None:
            held = np.full(n, -1)
            for f, (_, te) in enumerate(folds):
                held[te] = f
            for f in range(n_F):
                rows = np.flatnonzero((held + 1) % n_F == f) if n_F > 1 else np.arange(n)
                alpha[rows] = result.alpha_of(f, best)[rows]
        W = np.mean([result.model(f, best) for f in range(n_F)], axis=0)
        if self.loss == "hinge":                   # inside the refit's box [0, s_i]
            s = row_weights(self.class_weight, sample_weight, classes,
                            np.searchsorted(classes, y), X)
            alpha = np.minimum(alpha, 1.0 if s is None else s[:, None])
        # binary or one-vs-rest (all rows), from the search's dual points or by Newton
        if problems[0][0] is None and (result.alpha is not None or est.solver == "newton"):
            est.alpha_ = alpha[:, 0] if result.n_P == 1 else alpha
            est._set_solution(W, np.zeros(result.n_P))
            est.warm_start = True
        est.fit(X, y, sample_weight=sample_weight)
        est.warm_start = False
        solver = self.solver_
        _copy_fitted(est, self)
        self.solver_, self.refit_solver_ = solver, est.solver


class PegasosSVCCV(_OnePassSearch, PegasosSVC):
    r"""PegasosSVC with ``C`` chosen by cross-validation, every (C, fold) model in one pass.

    The search of :class:`SDCASVCCV` with Pegasos as the solver: every ``(problem, C,
    fold)`` model is an output of one Pegasos run (the shrink ``1 - eta_t lam_j = 1 - 1/t``
    is common to all outputs, the step and the projection radius are per output, a
    held-out row has weight 0), stopped by the doubling rule on the outputs' mean
    objective, each in its own fit's units.  Pegasos' first step multiplies ``w`` by
    ``1 - eta_1 lam = 0``: neither the values of ``C`` nor the refit are warm-started.

    Parameters
    ----------
    Cs, cv, scoring, refit, n_jobs
        As in :class:`SDCASVCCV`.
    loss, class_weight, multi_class, batch_size, max_iter, sampling, projection, \
averaging, tol, schedule, eta0, norma_p, bias, intercept_scaling, eval_every, backend, \
dtype, random_state, verbose, device
        As in :class:`~gpusvm.PegasosSVC`, for every model of the search and the refit.

    Attributes
    ----------
    Cs_, C_, scores_, n_iter_cv_
        As in :class:`SDCASVCCV`.
    coef_, intercept_, classes_, n_features_in_, feature_names_in_, lam_, n_iter_, \
stop_reason_, history_
        Of the final model (the refit, with ``refit=True``).
    """

    _BASE = PegasosSVC
    _parameter_constraints: dict = {
        **{k: v for k, v in PegasosSVC._parameter_constraints.items()
           if k not in ("lam", "C", "max_time", "callback", "target_objective")},
        **_OnePassSearch._SEARCH_CONSTRAINTS,
    }

    def __init__(self, *, Cs=10, cv=None, scoring=None, refit=True, n_jobs=None,
                 loss="hinge", class_weight=None, multi_class="ovr", batch_size="auto",
                 max_iter=None, sampling="epoch", projection=True, averaging="auto", tol=1e-3,
                 schedule="pegasos", eta0=None, norma_p=0.7, bias="augmented",
                 intercept_scaling=1.0, eval_every=None, backend="auto", dtype="float32",
                 random_state=None, verbose=0, device=None):
        self.Cs = Cs
        self.cv = cv
        self.scoring = scoring
        self.refit = refit
        self.n_jobs = n_jobs
        self.loss = loss
        self.class_weight = class_weight
        self.multi_class = multi_class
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.sampling = sampling
        self.projection = projection
        self.averaging = averaging
        self.tol = tol
        self.schedule = schedule
        self.eta0 = eta0
        self.norma_p = norma_p
        self.bias = bias
        self.intercept_scaling = intercept_scaling
        self.eval_every = eval_every
        self.backend = backend
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose
        self.device = device

    def _check_search(self) -> None:
        self._check_options()

    def _run(self, lanes, ctx):
        """All values of ``C`` of the lanes in one Pegasos run (passes split by memory)."""
        Xc, Cs = ctx["Xc"], ctx["Cs"]
        budget = ctx["budget"]
        if len(lanes) > budget:
            for i in range(0, len(lanes), budget):
                self._run(lanes[i:i + budget], ctx)
            return
        levels = max(1, min(len(Cs), budget // len(lanes)))
        base = PegasosSVC(**self._base_params(), C=1.0)
        base._averaging = None                            # a fit, not partial_fit
        for c0 in range(0, len(Cs), levels):
            outs = [(ci, p, f) for ci in range(c0, min(len(Cs), c0 + levels))
                    for (p, f) in lanes]
            Y, S, scale, _ = self._outputs(outs, ctx)
            W, b, _, per = base._solve_one(Xc, Y.astype(Xc.dtype), S, ctx["lam_ref"], None,
                                           output_scale=scale)
            ctx["result"].record(outs, W, None, np.full(len(outs), np.nan), per["n_iter"], b=b)

    def _certificates(self, result, Cs):
        """Pegasos has no certificate: nothing to report per model."""

    def _refit(self, X, y, sample_weight, best, result, folds, classes, problems, n, Xc):
        est = PegasosSVC(**self._base_params(), C=self.C_).fit(X, y, sample_weight=sample_weight)
        _copy_fitted(est, self)



def _copy_fitted(source, target, skip=()):
    """Copy the fitted attributes (``name_``) of ``source`` to ``target``."""
    for key, value in vars(source).items():
        if key.endswith("_") and not key.startswith("_") and key not in skip:
            setattr(target, key, value)


def _run_lanes(run, groups, ctx, workers):
    """``run(group, ctx)`` for every group of lanes on ``workers`` threads.  The main thread
    waits with a timeout, so a signal (Ctrl-C) is handled at once; on any exception, its own
    or a lane's, it sets ``ctx["stop"]``, which the lanes read between segments, and waits
    only for them to return (the threads finished every lane before a ``KeyboardInterrupt``
    took effect: Ctrl-C at 4 s, back at 58 s)."""
    stop = ctx["stop"] = threading.Event()
    pool = ThreadPoolExecutor(max_workers=workers)
    try:
        pending = {pool.submit(run, g, ctx) for g in groups}
        while pending:
            done, pending = wait(pending, timeout=0.1, return_when=FIRST_EXCEPTION)
            for fut in done:
                fut.result()                    # a lane's exception, raised here
    except BaseException:
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _effective_jobs(n_jobs, lanes: int) -> int:
    """The search's threads: ``n_jobs`` resolved (:func:`gpusvm._threads.resolve_n_jobs`),
    at most one per lane; each lane's solver runs on one thread, the refit on ``n_jobs``
    after the lanes, so the two never share the cores at once."""
    return max(1, min(resolve_n_jobs(n_jobs), lanes))


def _problem_columns(problems, n):
    """Labels (n, P) and row masks (n, P) of the binary problems over all rows."""
    cols, masks = [], []
    for rows, Y in problems:
        Y = Y.reshape(Y.shape[0], -1)
        at = slice(None) if rows is None else rows
        for c in range(Y.shape[1]):
            cols.append(np.full(n, -1.0))
            cols[-1][at] = Y[:, c]
            masks.append(np.zeros(n, dtype=bool))
            masks[-1][at] = True
    return np.column_stack(cols), np.column_stack(masks)


class _SharedProducts:
    """The Newton search's float64 products of ``X`` (:func:`~gpusvm.solvers.newton.block_products`:
    the matrix, its transpose and squares), made once by the first thread that asks; with a
    device backend's name, the device's (:func:`~gpusvm.solvers.newton.device_block_products`
    of a backend holding ``X``), so that every Newton block runs there."""

    def __init__(self, X, backend=None, device=None):
        self._X, self._products, self._lock = X, None, threading.Lock()
        self._backend, self._device = backend, device

    def __call__(self):
        with self._lock:
            if self._products is None:
                if self._backend is None:
                    self._products = block_products(self._X)
                else:
                    be = make_backend(self._backend, self._X, np.ones(self._X.shape[0]),
                                      device=self._device)
                    self._products = device_block_products(be)
        return self._products


class _SearchResult:
    """The figures, weights and dual points of every (fold, C, problem) model."""

    def __init__(self, n_F, n_C, n_P, n, d):
        self.n_F, self.n_C, self.n_P, self.n = n_F, n_C, n_P, n
        self.gap = np.full((n_F, n_C, n_P), np.nan)
        self.n_iter = np.zeros((n_F, n_C, n_P), dtype=np.int64)
        self.W = np.zeros((n_F, n_C, d, n_P), dtype=np.float32)
        self.b = np.zeros((n_F, n_C, n_P))
        self.alpha = None                        # (n_F, n_C, n, n_P) float32, dual solvers
        self.products = [0, 0]                   # Newton's block products and their columns
        self._lock = threading.Lock()

    def count_products(self, products, columns):
        with self._lock:
            self.products[0] += int(products)
            self.products[1] += int(columns)

    def record(self, outs, W, alpha, gaps, n_iter, b=None):
        n_iter = np.broadcast_to(np.asarray(n_iter), (len(outs),))
        with self._lock:
            if alpha is not None and self.alpha is None:
                self.alpha = np.zeros((self.n_F, self.n_C, self.n, self.n_P), dtype=np.float32)
            for j, (ci, p, f) in enumerate(outs):
                self.W[f, ci, :, p] = W[:, j]
                if alpha is not None:
                    self.alpha[f, ci, :, p] = alpha[:, j]
                if b is not None:
                    self.b[f, ci, p] = b[j]
                self.gap[f, ci, p] = gaps[j]
                self.n_iter[f, ci, p] = n_iter[j]

    def model(self, f, ci):
        """``W`` (d, P) of the (fold, C) model, float64."""
        return self.W[f, ci].astype(np.float64)

    def intercepts(self, f, ci):
        return self.b[f, ci].copy()

    def alpha_of(self, f, ci):
        return self.alpha[f, ci].astype(np.float64)


__all__ = ["PegasosSVCCV", "SDCASVCCV", "default_Cs", "check_Cs"]
