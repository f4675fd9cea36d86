"""The C search on a dask cluster: the (fold, class) models of each C outputs of one CoCoA+ fit
(:class:`gpusvm.SDCASVCCV`'s search, docs/algorithms.md "Model selection in one pass"); each round
reads a block's rows once for all the models of a ``C``."""

from __future__ import annotations

import warnings
from numbers import Integral

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin, _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import check_scoring
from sklearn.utils.validation import _check_sample_weight, check_array

from ..estimators._base import class_labels, output_problems
from ..estimators.cv import _OnePassSearch, _problem_columns, check_Cs, default_Cs
from ._blocks import on_host
from ._estimators import (SDCASVC, _block_scores, _client_current, _host_vector,
                          _is_dask_array, _to_dask_array)


class SDCASVCCV(SDCASVC):
    r"""Distributed SDCA with ``C`` chosen by cross-validation, a value's models as one fit's outputs.

    The search of :class:`gpusvm.SDCASVCCV` on a dask cluster: the ``Cs`` are tried on the
    folds of ``cv`` and scored by ``scoring`` on the held-out rows; ``C_`` has the best mean
    score (the smallest among ties), and ``refit=True`` fits :class:`gpusvm.dask.SDCASVC` on
    all rows at ``C_``.  The (fold, class) models of one ``C`` are the outputs of one
    distributed fit: a model's labels are its class against the rest, its row weights the
    fold's training rows (held-out rows 0) times ``C / C_ref`` at the ``lam`` of the largest
    ``C``, and it stops on its own duality gap, in the units of ``SDCASVC(C=C)`` on the
    fold's training rows.  The ``C`` go in ascending order, each fit starting from the
    previous one's dual point, as the local search does.

    Parameters
    ----------
    Cs : int or array-like of float, default=10
        The values of ``C``; an int asks for LIBLINEAR's log grid of that many values
        (:func:`gpusvm.estimators.cv.default_Cs`, from a pass over the rows' norms).
    cv : int, cross-validation generator or iterable, default=None
        As in scikit-learn: None is 5 stratified folds.  The folds are of the rows as the
        labels are ordered (``y`` is gathered on the client).
    scoring : str or callable, default=None
        A scikit-learn scorer; None is accuracy.  The scorer sees the held-out rows'
        decision values and predictions (no ``predict_proba``).
    refit : bool, default=True
        Fit :class:`gpusvm.dask.SDCASVC` on all rows at ``C_``; with False, ``coef_`` and
        ``intercept_`` are the mean over the folds of the models at ``C_``.
    loss, class_weight, multi_class, tol, max_iter, local_epochs, sigma, bias, \
intercept_scaling, n_partitions, rebalance, backend, client, timeout, max_recoveries, \
direct, random_state, verbose
        As in :class:`gpusvm.dask.SDCASVC`, for every fit of the search and the refit
        (``max_iter``: rounds of each fit).

    Attributes
    ----------
    Cs_ : ndarray of shape (n_Cs,)
        The values of ``C`` tried, ascending.
    C_ : float
        The chosen value.
    scores_ : ndarray of shape (n_folds, n_Cs)
        The score of every (fold, C) model on its fold's held-out rows.
    duality_gaps_ : ndarray of shape (n_folds, n_Cs, n_problems)
        The certified duality gap of every model of the search, in the units of an
        ``SDCASVC(C=C)`` fit on the fold's training rows.
    search_rounds_ : list of int
        Rounds of the search's fit of each ``C``.
    coef_, intercept_, classes_, n_features_in_, lam_, alpha_, duality_gap_, \
primal_objective_, dual_objective_, n_iter_, history_, stop_reason_
        Of the refit (``refit=True``), as in :class:`gpusvm.dask.SDCASVC`.

    Examples
    --------
    >>> search = SDCASVCCV(Cs=[0.1, 1, 10], cv=3).fit(X, y)      # doctest: +SKIP
    >>> search.C_, search.scores_.mean(axis=0)                   # doctest: +SKIP
    """

    _parameter_constraints: dict = {
        **{k: v for k, v in SDCASVC._parameter_constraints.items()
           if k not in ("lam", "C", "callback")},
        **{k: v for k, v in _OnePassSearch._SEARCH_CONSTRAINTS.items() if k != "n_jobs"},
    }

    # the parameters of SDCASVC that the search does not take from the user
    lam = None
    C = None
    callback = None

    def __init__(self, *, Cs=10, cv=None, scoring=None, refit=True, loss="hinge",
                 class_weight=None, multi_class="ovr", tol=1e-3, max_iter=None,
                 local_epochs=1.0, sigma=1.0, bias="none", intercept_scaling=1.0,
                 n_partitions=None, rebalance="auto", backend="auto", client=None,
                 timeout=600.0, max_recoveries=3, direct=True, random_state=None, verbose=0):
        self.Cs = Cs
        self.cv = cv
        self.scoring = scoring
        self.refit = refit
        self.loss = loss
        self.class_weight = class_weight
        self.multi_class = multi_class
        self.tol = tol
        self.max_iter = max_iter
        self.local_epochs = local_epochs
        self.sigma = sigma
        self.bias = bias
        self.intercept_scaling = intercept_scaling
        self.n_partitions = n_partitions
        self.rebalance = rebalance
        self.backend = backend
        self.client = client
        self.timeout = timeout
        self.max_recoveries = max_recoveries
        self.direct = direct
        self.random_state = random_state
        self.verbose = verbose

    @_fit_context(prefer_skip_nested_validation=True)
    @_client_current
    def fit(self, X, y, sample_weight=None):
        """Score every value of ``Cs`` on the folds of ``cv``, choose ``C_``, refit.

        Parameters
        ----------
        X : {dask array, dask DataFrame, sparse matrix, array-like} of shape (n_samples, n_features)
            As in :meth:`gpusvm.dask.SDCASVC.fit`.
        y : dask array, dask Series or array-like of shape (n_samples,)
        sample_weight : dask array, dask Series or array-like of shape (n_samples,), optional

        Returns
        -------
        self : SDCASVCCV
        """
        name = type(self).__name__
        X = _to_dask_array(X, "X")
        if not _is_dask_array(X):
            X = check_array(X, accept_sparse="csr", dtype=[np.float64, np.float32],
                            input_name="X")
        n, d = X.shape
        y_host = _host_vector(y, "y", n)
        sw = _host_vector(sample_weight, "sample_weight", n)
        if sw is not None:
            sw = _check_sample_weight(sw, np.empty((n, 0)), dtype=np.float64,
                                      ensure_non_negative=True, allow_all_zero_weights=False)
        classes, y_idx = class_labels(y_host, name)
        if classes.size > 2 and self.multi_class != "ovr":
            raise ValueError(
                f"{name} fits more than two classes one-vs-rest only (multi_class='ovr'); "
                f"multi_class={self.multi_class!r} needs gpusvm.SDCASVCCV on one machine")
        folds = _OnePassSearch._folds(self, np.zeros((n, 1)), y_host, classes, y_idx)
        problems = [(rows, np.asarray(Y, dtype=np.float64))
                    for rows, Y in output_problems(classes.size, y_idx, "ovr")]
        labels, masks = _problem_columns(problems, n)
        weights, n_train = _OnePassSearch._fold_weights(self, folds, sw, classes, y_idx,
                                                        masks, n)
        if isinstance(self.Cs, Integral):
            extra = self.intercept_scaling ** 2 if self.bias == "augmented" else 0.0
            Cs = default_Cs(int(self.Cs), n, _max_sq_norm(X) + extra, self.loss)
        else:
            Cs = check_Cs(self.Cs)
        n_P, n_F, n_C = labels.shape[1], len(folds), Cs.size
        C_ref = float(Cs[-1])
        d_aug = d + (self.bias == "augmented")
        W = np.zeros((n_F, n_C, n_P, d_aug))
        gaps = np.empty((n_F, n_C, n_P))
        self.search_rounds_ = []
        prev = None                     # the last C's dual point, in its own units (n, M)
        for ci in range(n_C):           # one fit per C, ascending, warm-started along C
            outs = [(ci, f, p) for f in range(n_F) for p in range(n_P)]
            g = Cs[ci] / C_ref
            Y = labels[:, [p for _, _, p in outs]]
            S = np.column_stack([weights[f] * masks[:, p] for _, f, p in outs]) * g
            scale = np.array([n / (g * max(n_train[f, p], 1.0)) for _, f, p in outs])
            alpha0 = None if prev is None else prev * g
            if alpha0 is not None and self.loss == "hinge":
                alpha0 = np.minimum(alpha0, S)          # the box [0, s_ic]
            self._search = (classes, np.ascontiguousarray(Y), np.ascontiguousarray(S),
                            1.0 / (C_ref * n), self.tol / scale, alpha0)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ConvergenceWarning)   # said below, per model
                    SDCASVC.fit(self, X, y_host)
            finally:
                del self._search
            prev = np.asarray(self.alpha_).reshape(n, -1) / g
            self.search_rounds_.append(int(self.n_iter_))
            Wf = self.coef_.T if self.bias == "none" else np.vstack(
                [self.coef_.T, self.intercept_ / self.intercept_scaling])
            for j, (ci, f, p) in enumerate(outs):
                W[f, ci, p] = Wf[:, j]
                gaps[f, ci, p] = np.atleast_1d(self.duality_gap_)[j] * scale[j]
        self.Cs_, self.classes_, self.n_features_in_, self.duality_gaps_ = Cs, classes, d, gaps
        self.scores_ = self._score(X, y_host, folds, W, classes)
        mean = self.scores_.mean(axis=0)
        best = int(np.flatnonzero(mean == np.max(mean))[0])       # the smallest C among ties
        self.C_ = float(Cs[best])
        bad = np.argwhere(~(gaps <= self.tol))
        if bad.size:
            f, ci, p = bad[0]
            warnings.warn(
                f"{bad.shape[0]} of the {gaps.size} models of the search ended above "
                f"tol={self.tol}, e.g. C={Cs[ci]:.4g} on fold {f} (problem {p}) with duality gap "
                f"{gaps[f, ci, p]:.3g}; increase max_iter, or search smaller Cs",
                ConvergenceWarning, stacklevel=4)   # the caller of fit
        for key in [k for k in vars(self) if k.endswith("_") and not k.startswith("_")]:
            if key not in ("Cs_", "C_", "scores_", "duality_gaps_", "search_rounds_",
                           "classes_", "n_features_in_"):
                delattr(self, key)            # the last search fit's: not this model's
        if self.refit:
            own = self.get_params(deep=False)
            est = SDCASVC(**{k: own[k] for k in SDCASVC().get_params() if k in own}, C=self.C_)
            est.fit(X, y, sample_weight=sample_weight)
            for key, value in vars(est).items():
                if key.endswith("_") and not key.startswith("_"):
                    setattr(self, key, value)
        else:
            self._set_solution(W[:, best].mean(axis=0).T, 0.0)     # (d_aug, n_P)
            self.lam_ = 1.0 / (self.C_ * n)
        return self

    # the hooks of SDCASVC.fit, while a search fit runs
    def _labels(self, y_local, n, sample_weight):
        return self._search[:3]

    def _initial_alpha(self):
        return self._search[5]

    def _fit_lam(self, n):
        return self._search[3]

    def _output_tol(self, M):
        return self._search[4]

    def _score(self, X, y, folds, W, classes):
        """``scores_``: each (fold, C) model scored on its fold's held-out rows."""
        n_F, n_C, n_P, d_aug = W.shape
        scorer = check_scoring(self, scoring=self.scoring or "accuracy")
        scores = np.empty((n_F, n_C))
        for f, (_, te) in enumerate(folds):
            coef = W[f].reshape(n_C * n_P, d_aug).T                 # (d_aug, n_C n_P)
            b = np.zeros(coef.shape[1])
            if self.bias == "augmented":
                b, coef = coef[-1] * self.intercept_scaling, coef[:-1]
            Z = _scores_at(X, te, np.ascontiguousarray(coef), b)
            for ci in range(n_C):
                view = _Scores(classes, Z[:, ci * n_P:(ci + 1) * n_P])
                scores[f, ci] = scorer(view, np.zeros((te.size, 1)), y[te])
        return scores

    def to_local(self):
        """The refitted model as an ordinary fitted :class:`gpusvm.SDCASVC` at ``C_``.

        Returns
        -------
        gpusvm.SDCASVC
        """
        if not self.refit:
            raise ValueError("to_local needs the model refitted at C_; fit with refit=True")
        return super().to_local()

    def _local_params(self):
        return {**super()._local_params(), "C": self.C_}


class _Scores(ClassifierMixin, BaseEstimator):
    """The held-out rows' decision values of one model, as a scorer reads an estimator."""

    def __init__(self, classes=None, Z=None):
        self.classes = classes
        self.Z = Z
        self.classes_ = classes

    def decision_function(self, X):
        return self.Z[:, 0] if self.Z.shape[1] == 1 else self.Z

    def predict(self, X):
        Z = self.decision_function(X)
        return self.classes_[(Z > 0).astype(int) if Z.ndim == 1 else np.argmax(Z, axis=1)]


def _scores_at(X, rows, coef, b):
    """``X[rows] @ coef + b`` (float64), X in memory or a dask array of row chunks."""
    if not _is_dask_array(X):
        return _block_scores(X[rows], coef, b).reshape(rows.size, -1)
    X = X.rechunk({1: -1}) if len(X.chunks[1]) != 1 else X
    Z = X.map_blocks(_block_columns, coef, b, chunks=(X.chunks[0], (coef.shape[1],)),
                     dtype=np.float64).compute()
    return Z[rows]


def _block_columns(block, coef, b):
    return _block_scores(block, coef, b).reshape(block.shape[0], -1)


def _max_sq_norm(X) -> float:
    """``max_i ||x_i||^2`` over the rows of X (in memory or a dask array, on the workers)."""
    def one(block):
        block = on_host(block)
        if sp.issparse(block):
            sq = np.asarray(block.multiply(block).sum(axis=1)).ravel()
        else:
            block = np.asarray(block)
            sq = np.einsum("ij,ij->i", block, block)
        return float(sq.max()) if sq.size else 0.0
    if not _is_dask_array(X):
        return one(X)
    import dask
    return max(dask.compute(*[dask.delayed(one)(p) for p in X.to_delayed().ravel()]))
