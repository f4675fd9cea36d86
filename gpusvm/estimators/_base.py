"""What every gpusvm estimator shares: validation, labels, data preparation, prediction and
progress bars (no mathematics)."""

from __future__ import annotations

import functools
import math
import warnings
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.class_weight import compute_class_weight
from sklearn.utils.extmath import safe_sparse_dot
from sklearn.utils.multiclass import _ovr_decision_function, type_of_target
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data

from .. import _arrays, _memory, _threads
from .._threads import check_n_jobs
from .._arrays import INT32_MAX, as_dtype, check_sparse_structure, warn_if_rows_unscaled
from ..backends import BACKENDS, numba_available, resolve_backend_name, wait_for_compiles
from ..model_io import check_restored
from ..solvers._sampling import SAMPLING_MODES
from ..solvers.pegasos import BIAS_MODES

#: the largest ``max_iter``: iteration counters are 64-bit integers in the compiled loops
MAX_ITER = 2**62
#: losses of the linear estimators (docs/algorithms.md, "Weights, and the squared hinge")
LOSSES = ("hinge", "squared_hinge")
#: how more than two classes are split into binary problems
MULTI_CLASS_MODES = ("ovr", "ovo", "ordinal")
#: ``lam`` when neither ``lam`` nor ``C`` is given
DEFAULT_LAM = 1e-4
#: backends where one-vs-rest is one M-output solver call (a batch row's gather serves all M
#: margins; 20 Newsgroups, numba: 1.26 s against 2.14 s for one binary fit per class)
OVR_NATIVE_BACKENDS = ("numpy", "numba", "cupy", "emulated")


def finishes_compiles(method):
    """``method``, then :func:`gpusvm.backends.wait_for_compiles` however it ends: no
    compilation it started in the background outlives it (they swap the warning handler)."""
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        finally:
            wait_for_compiles()
    return wrapper


def _mean_sq_norm(X, intercept: float) -> float:
    """``mean_i ||x_i||^2`` of ``X`` with the constant column ``intercept`` (0: none)."""
    data = X.data if sp.issparse(X) else X
    if hasattr(data, "get"):                    # CuPy: reduced on the device
        total = float((data.ravel() @ data.ravel()).get()) if data.size else 0.0
    else:
        data = np.asarray(data).ravel()
        # not BLAS's dot: on a long vector it wakes OpenBLAS's threads, which then spin on a
        # second core for about 0.1 s (w8a: the fit's CPU time doubled); float64 sums too
        total = float(np.einsum("i,i->", data, data, dtype=np.float64)) if data.size else 0.0
    return total / max(X.shape[0], 1) + intercept * intercept


def intercept_scaling_refusal(intercept_scaling, dtype):
    """Why ``dtype`` cannot carry the constant column ``intercept_scaling`` (one line), or
    None when it can: below the fourth root of the largest ``dtype``, the column's square (a
    term of every row's squared norm) times a curvature or a weight's square stays finite
    (float32 cast 1e40 to inf and the fit returned NaN; 1e153 overflowed Newton's Hessian)."""
    dtype = np.dtype(dtype)
    limit = float(np.finfo(dtype).max) ** 0.25
    if float(intercept_scaling) < limit:
        return None
    other = " (or dtype='float64')" if dtype != np.float64 else ""
    return (f"intercept_scaling={intercept_scaling!r} is too large for {dtype.name}: the constant "
            f"column's products overflow; use intercept_scaling < {limit:.2e}{other} (already "
            "at 1e3 the intercept is all but unregularised)")


def _max_sq_row_norm(X) -> float:
    """:func:`_max_squared_row_norm` of a dense array or any sparse matrix (float64)."""
    if sp.issparse(X):
        return _max_squared_row_norm(sp.csr_matrix(X))
    X = np.asarray(X)
    if X.size == 0:
        return 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        return float(np.einsum("ij,ij->i", X, X, dtype=np.float64).max())


def _max_squared_row_norm(X) -> float:
    """Largest ``||x_i||^2`` of a CSR matrix, in float64 (inf when it overflows).

    The compiled row-norm loop where numba imports: no copy, 2-3 ms on imdb against 11 ms.
    """
    if X.nnz == 0:
        return 0.0
    if numba_available():
        from ..backends._csr_nb import row_sq_norms as _row_sq_norms  # noqa: PLC0415
        out = np.empty(X.shape[0], dtype=np.float64)
        _row_sq_norms(X.indptr, X.data, out)
        return float(out.max())
    with np.errstate(over="ignore", invalid="ignore"):
        data = X.data.astype(np.float64)
        sq = np.add.reduceat(data * data, X.indptr[:-1][np.diff(X.indptr) > 0])
    return float(np.max(sq))


def class_labels(y, estimator_name: str):
    """Sorted class labels (two or more) and every row's index into them (intp)."""
    y = np.asarray(y)
    target = type_of_target(y, input_name="y")
    if target not in ("binary", "multiclass"):
        raise ValueError(f"Unknown label type: {estimator_name} needs class labels; got targets "
                         f"of type {target!r}")
    if target == "binary":          # at most two classes: the inverse by one comparison
        classes = np.unique(y)      # (np.unique's argsort of ijcnn1's sorted y: 3 ms of a
        inv = y == classes[-1] if classes.size == 2 else np.zeros(y.shape, dtype=bool)
    else:                           # 0.1 s fit); more classes: one sort for both
        classes, inv = np.unique(y, return_inverse=True)
    if classes.size == 0:
        raise ValueError(f"{estimator_name} needs samples of 2 classes, but y is empty; pass "
                         "at least one sample of each class")
    if classes.size < 2:
        raise ValueError(
            f"{estimator_name} needs samples of 2 classes, but the data contains only one "
            f"class: {classes.tolist()[0]!r}")
    return classes, inv.astype(np.intp).ravel()


def _only_binary(estimator_name: str, n_classes: int) -> None:
    if n_classes > 2:
        raise ValueError(
            f"Only binary classification is supported. {estimator_name} got y with "
            f"{n_classes} classes: wrap the estimator in sklearn.multiclass.OneVsRestClassifier")


def binary_labels(y, estimator_name: str):
    """The sorted two classes and the labels in {-1, +1} (``+1``: ``classes[1]``)."""
    classes, y_idx = class_labels(y, estimator_name)
    _only_binary(estimator_name, classes.size)
    return classes, np.where(y_idx == 1, 1.0, -1.0)


def check_batch_size(k, n: int) -> None:
    if k != "auto" and k > n:
        raise ValueError(
            f"batch_size={k} exceeds the number of samples n={n}; choose 1 <= batch_size <= {n}")


def resolve_lam(lam, C, n: int) -> float:
    """The ``lam`` of a fit on ``n`` rows (of the pair for "ovo", "ordinal") from ``lam`` or ``C``.

    LinearSVC's ``1/2 ||w||^2 + C sum_i s_i loss_i`` is ``C n`` times
    ``P_s(w) = lam/2 ||w||^2 + (1/n) sum_i s_i loss_i`` at ``lam = 1/(C n)``.
    """
    if C is None:
        return DEFAULT_LAM if lam is None else float(lam)
    if lam is not None:
        raise ValueError(
            f"lam={lam!r} and C={C!r} were both given, but they set the same regularisation "
            "(lam = 1/(C n), n the number of training rows): pass only one of them")
    return 1.0 / (float(C) * n)


def row_weights(class_weight, sample_weight, classes, y_idx, X):
    """Row weights ``s_i = sample_weight_i * class_weight[y_i]`` (float64), None when all are 1.

    scikit-learn's semantics (:func:`~sklearn.utils.class_weight.compute_class_weight`:
    "balanced" counts weighted by ``sample_weight``); ``X`` is for the shape check.
    """
    if sample_weight is None and class_weight is None:
        return None
    s = None
    if sample_weight is not None:
        s = _check_sample_weight(sample_weight, X, dtype=np.float64, ensure_non_negative=True,
                                 allow_all_zero_weights=False, copy=True)
    if class_weight is not None:
        cw = compute_class_weight(class_weight, classes=classes, y=classes[y_idx],
                                  sample_weight=s)
        if not np.all(np.isfinite(cw)) or np.any(cw < 0):
            raise ValueError(f"class_weight must be finite and non-negative; got {cw.tolist()}")
        s = cw[y_idx] if s is None else s * cw[y_idx]
    if not np.all(np.isfinite(s)):
        raise ValueError("sample_weight contains NaN or infinity")
    if not np.any(s > 0):
        raise ValueError("every row has weight 0 (sample_weight times class_weight); give some "
                         "rows a positive weight")
    if np.all(s == 1.0):            # the unweighted problem: solvers need no weights for it
        return None
    return np.ascontiguousarray(s, dtype=np.float64)


def output_problems(n_classes: int, y_idx, multi_class: str):
    """The binary problems of a fit: ``[(rows, labels), ...]``.

    ``rows``: None (all) or the problem's row indices; ``labels`` in {-1, +1}, shape
    ``(n_rows,)``, or ``(n, M)`` for one-vs-rest (output c: +1 for class c).  Two
    classes: +1 for ``classes[1]``.  ``"ovo"``: each pair ``a < b`` on its rows, +1 for
    ``b`` (OneVsOneClassifier's order); ``"ordinal"``: the pairs ``(k, k + 1)`` only
    (Duros & Katzman 2014, Sec. 3.1).
    """
    if n_classes == 2:
        return [(None, np.where(y_idx == 1, 1.0, -1.0))]
    if multi_class == "ovr":
        return [(None, np.where(y_idx[:, None] == np.arange(n_classes)[None, :], 1.0, -1.0))]
    if multi_class == "ovo":
        pairs = [(a, b) for a in range(n_classes) for b in range(a + 1, n_classes)]
    else:
        pairs = [(k, k + 1) for k in range(n_classes - 1)]
    problems = []
    for a, b in pairs:
        rows = np.flatnonzero((y_idx == a) | (y_idx == b))
        problems.append((rows, np.where(y_idx[rows] == b, 1.0, -1.0)))
    return problems


def ordinal_scores(confidences):
    """Class scores of the ordinal rule from the ``K - 1`` neighbour classifiers.

    ``f_k(x) > 0`` says that ``x`` is more like class ``k + 1`` than class ``k``.
    Class ``j`` lies above the pairs ``k < j`` and below the pairs ``k >= j``; its
    total agreement with all of them, ``sum_{k<j} f_k(x) - sum_{k>=j} f_k(x)``, is
    ``2 s_j(x) - sum_k f_k(x)`` with ``s_j(x) = sum_{k<j} f_k(x)`` (``s_0 = 0``).
    The scores (n, K) are ``s_j`` and the prediction is their argmax: when the signs
    are consistent (``f_k > 0`` exactly for ``k < r``) it is class ``r``, the number of
    thresholds passed; otherwise the class the margins agree with most.
    """
    zero = np.zeros((confidences.shape[0], 1), dtype=np.float64)
    return np.hstack([zero, np.cumsum(confidences, axis=1, dtype=np.float64)])


class _LinearSVCBase(ClassifierMixin, BaseEstimator):
    """Validation, data preparation, outputs and prediction; subclasses implement ``_solve``
    (:meth:`_fit_outputs`) and set ``_MULTICLASS = True`` to fit more than two classes."""

    #: whether the estimator fits more than two classes (tag ``multi_class``)
    _MULTICLASS = False

    _parameter_constraints: dict = {
        "lam": [Interval(Real, 0, None, closed="neither"), None],
        "C": [Interval(Real, 0, None, closed="neither"), None],
        "loss": [StrOptions(set(LOSSES))],
        "class_weight": [dict, StrOptions({"balanced"}), None],
        "multi_class": [StrOptions(set(MULTI_CLASS_MODES))],
        "batch_size": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "max_iter": [Interval(Integral, 1, MAX_ITER, closed="both"), None],
        "sampling": [StrOptions(set(SAMPLING_MODES))],
        "bias": [StrOptions(set(BIAS_MODES))],
        "intercept_scaling": [Interval(Real, 0, None, closed="neither")],
        "eval_every": [Interval(Integral, 1, None, closed="left"), None],
        "max_time": [Interval(Real, 0, None, closed="neither"), None],
        "callback": [callable, None],
        "backend": [StrOptions(set(BACKENDS))],
        "device": [Interval(Integral, 0, None, closed="left"), None],
        "dtype": [StrOptions({"float32", "float64"}), type],
        "random_state": ["random_state", np.random.Generator],
        "verbose": ["verbose"],
        "n_jobs": [Integral, None],
    }

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.classifier_tags.multi_class = self._MULTICLASS
        return tags

    def __setstate__(self, state):
        """Restore (pickle, skops), checking a fitted state like a model file's."""
        super().__setstate__(state)
        if "coef_" in state:
            check_restored(self)

    # ------------------------------------------------------------ helpers
    def _prepare(self, X, y, *, reset=True, implicit_bias=False):
        """Validated ``(Xc, y)``: ``Xc`` canonical CSR (int32 indices) with the bias column.

        The caller's matrix is never modified (a non-canonical CSR matrix is copied).
        ``implicit_bias``: leave the column out where the solver adds it without a copy
        (:meth:`_implicit_bias`); ``self._bias_value`` is then its value, else None.
        """
        self._bias_value = None
        if _arrays.is_device(X) or _arrays.is_device(y):   # CuPy input (gpusvm._arrays)
            return _arrays.prepare(self, X, y, reset)
        dtype = as_dtype(self.dtype)
        check_sparse_structure(X)
        checked = None
        if sp.issparse(X) and X.format == "csr" and X.dtype.kind == "f" and X.dtype != dtype \
                and X.data.size == X.indices.size:
            # the values converted, the index arrays just checked shared: scipy's astype
            # copies them, after summing the caller's duplicate entries in place
            X = checked = sp.csr_matrix((X.data.astype(dtype), X.indices, X.indptr),
                                        shape=X.shape)
        X, y = validate_data(self, X, y, accept_sparse="csr", dtype=dtype, order="C",
                             y_numeric=False, reset=reset)
        Xc = _arrays.dense_to_csr(X, dtype) if not sp.issparse(X) else X.tocsr().astype(dtype, copy=False)
        if Xc is not checked:
            check_sparse_structure(Xc)
        n, d = Xc.shape
        d_aug = d + (self.bias == "augmented")
        nnz_aug = Xc.nnz + n * (self.bias == "augmented")
        index = np.int32
        if d_aug > INT32_MAX or nnz_aug > INT32_MAX:
            # the device backends index with int64 there; the CPU backends' loops with int32
            if resolve_backend_name(getattr(self, "backend", "auto")) not in ("cupy", "emulated"):
                bias_column = " (plus the bias column)" if d_aug > d else ""
                raise ValueError(
                    f"X has {d} columns and {Xc.nnz} nonzeros{bias_column}; gpusvm's CPU "
                    f"backends index them with 32-bit integers, so both must stay below "
                    f"{INT32_MAX}: drop unused columns (e.g. re-index the features), split the "
                    "data, or fit on a GPU (backend='cupy' indexes with int64)")
            index = np.int64
        self._check_memory(Xc, y, implicit_bias)
        if Xc.indices.dtype != index or Xc.indptr.dtype != index:
            Xc = sp.csr_matrix((Xc.data, Xc.indices.astype(index), Xc.indptr.astype(index)),
                               shape=Xc.shape)
        if not Xc.has_canonical_format:    # order a copy: Xc may share arrays with the caller's X
            Xc = sp.csr_matrix((Xc.data.copy(), Xc.indices.copy(), Xc.indptr.copy()),
                               shape=Xc.shape)
            Xc.sum_duplicates()
            Xc.sort_indices()
        check_batch_size(getattr(self, "batch_size", "auto"), n)
        max_sq = _max_squared_row_norm(Xc)
        if math.isfinite(max_sq):
            warn_if_rows_unscaled(math.sqrt(max_sq))
        else:
            raise ValueError(
                "X has values so large that the squared norm of a row overflows float64 (e.g. "
                "1e300); scale the features (sklearn.preprocessing.MaxAbsScaler) or normalise "
                "the rows (gpusvm.datasets.normalize_rows) first")
        self._max_sq = max_sq
        if self.bias == "augmented":
            reason = intercept_scaling_refusal(self.intercept_scaling, dtype)
            if reason is not None:
                raise ValueError(reason)
        if self.bias == "augmented" and implicit_bias:
            self._bias_value = self.intercept_scaling
        elif self.bias == "augmented":
            Xc = _arrays.append_constant_column(Xc, self.intercept_scaling)
        return Xc, y

    def _implicit_bias(self) -> bool:
        """Whether this fit's solver adds the bias column to its products without a copy of
        ``X`` (none here; :class:`~gpusvm.estimators.SDCASVC`'s Newton on the CPU does)."""
        return False

    def _check_memory(self, Xc, y, implicit_bias=False) -> None:
        """Refuse, before the bias column's copy, a fit whose estimated peak
        (:func:`gpusvm._memory.fit_peak_bytes`) exceeds the memory available."""
        try:
            threads = _threads.fit_n_jobs(getattr(self, "n_jobs", 1), Xc.nnz)
        except (TypeError, ValueError):     # refused with its own message later
            threads = 1
        classes = np.unique(y).size
        n, d = Xc.shape
        _memory.check_fit_memory(n, d, Xc.nnz, Xc.dtype.itemsize,
                                 solver=getattr(self, "solver", "pegasos"), n_jobs=threads,
                                 outputs=1 if classes <= 2 else classes,
                                 bias=self.bias == "augmented" and not implicit_bias)

    def _check_lam(self, lam: float) -> None:
        """Refuse a ``lam`` the data type cannot carry (:meth:`_lam_refusal`)."""
        reason = self._lam_refusal(lam)
        if reason is not None:
            raise ValueError(reason)

    def _lam_refusal(self, lam: float, dtype=None, max_sq=None):
        """Why the data type cannot carry ``lam`` (one line), or None when it can.

        Too small: the steps ``1/lam`` overflow.  Too large: the weights, about
        ``max ||x_i|| / lam`` (every margin is below 1, ``w = (1/(lam n)) sum_i s_i y_i
        x_i``), have squares below the smallest normal number and the solvers compute
        with zeros (PegasosSVC at ``C=1e-300`` in float32 lost to the majority class).
        ``dtype`` and ``max_sq`` (the largest squared row norm) default to the fit's.
        """
        dtype = as_dtype(self.dtype if dtype is None else dtype)
        if max_sq is None:
            max_sq = getattr(self, "_max_sq", 1.0)
        given = f"lam={lam!r}" if getattr(self, "C", None) is None else \
            f"C={self.C!r} (lam = 1/(C n) = {lam:.3g})"
        step = math.sqrt(max(max_sq, 1.0)) / lam
        if not step * step < np.finfo(dtype).max:
            smallest = math.sqrt(max(max_sq, 1.0) / np.finfo(dtype).max)
            return (f"{given} is too small for dtype={dtype.name}: a step of size 1/lam on "
                    f"rows of norm up to {math.sqrt(max_sq):.3g} overflows; use lam >= "
                    f"{smallest:.1e}")
        bias_sq = float(self.intercept_scaling) ** 2 if self.bias == "augmented" else 0.0
        norm = math.sqrt(max_sq + bias_sq)
        smallest = math.sqrt(float(np.finfo(dtype).tiny))    # the least weight whose square
        if norm > 0 and norm / lam < smallest:              # is a normal number
            largest = norm / smallest
            fix = (f"C >= {self.C * lam / largest:.1e}" if getattr(self, "C", None) is not None
                   else f"lam <= {largest:.1e}")
            other = "" if dtype == np.float64 else " or dtype='float64'"
            return (f"{given} is too large a regularisation for dtype={dtype.name}: the "
                    f"weights, of size about max ||x_i|| / lam = {norm / lam:.3g}, have squares "
                    f"below the smallest normal {dtype.name} (weights below {smallest:.3g}); "
                    f"use {fix}{other}")
        return None

    def _seed(self):
        return seed_of(self.random_state)

    def _set_solution(self, w, b):
        """``coef_`` and ``intercept_`` from ``w`` of shape ``(d_aug,)`` or ``(d_aug, M)``."""
        W = np.asarray(w, dtype=np.float64)
        W = W.reshape(-1, 1) if W.ndim == 1 else W
        # coef_ is a transposed view, not a copy (50 ms for 20 x 130,000), and coef_.T is contiguous
        if self.bias == "augmented":
            self.coef_ = W[:-1].T
            self.intercept_ = W[-1] * self.intercept_scaling
        else:
            self.coef_ = W.T
            self.intercept_ = np.broadcast_to(np.asarray(b, dtype=np.float64),
                                              (W.shape[1],)).copy()

    # ------------------------------------------------------------ fitting outputs
    @finishes_compiles
    def _fit_outputs(self, X, y, sample_weight=None, *, warm=None, classes=None, reset=True):
        """Fit every output; return the solver's ``(common, per_output)`` dicts.

        ``self._solve(Xs, Y, s, lam, init)`` fits one problem: its rows ``Xs`` (CSR, bias
        column included), labels ``Y`` in {-1, +1} (``(n_rows,)`` or ``(n, M)``), row
        weights ``s`` or None, and warm start ``init``.  It returns ``(W (d_aug, M), b (M,),
        common, per_output)``: a dict shared by the outputs, a dict of lists of M values.
        ``warm(first, M, multi, rows)`` gives ``init`` for outputs ``first .. first + M - 1``
        of ``coef_`` on ``rows`` (None: all): a list of M inits when ``multi``, else one.
        ``classes`` (``partial_fit``) replaces those of ``y``; ``reset=False`` checks
        ``n_features_in_`` instead of setting it.
        """
        check_n_jobs(getattr(self, "n_jobs", None))
        Xc, y = self._prepare(X, y, reset=reset, implicit_bias=self._implicit_bias())
        name = type(self).__name__
        if classes is None:
            classes, y_idx = class_labels(y, name)
        else:
            y_idx = np.searchsorted(classes, y)
            unknown = (y_idx >= classes.size) | (classes[np.minimum(y_idx, classes.size - 1)] != y)
            if np.any(unknown):
                raise ValueError(
                    f"y holds the label {np.asarray(y)[unknown][0]!r}, which is not one of the "
                    f"classes {classes.tolist()} given to the first partial_fit call")
        if not self._MULTICLASS:
            _only_binary(name, classes.size)
        s = row_weights(getattr(self, "class_weight", None), sample_weight, classes, y_idx, Xc)
        self.classes_ = classes
        problems = output_problems(classes.size, y_idx, getattr(self, "multi_class", "ovr"))
        results, lams, first = [], [], 0
        for rows, Y in problems:
            Xs = Xc if rows is None else Xc[rows]
            ss = s if (s is None or rows is None) else s[rows]
            lam = resolve_lam(self.lam, getattr(self, "C", None), Xs.shape[0])
            self._check_lam(lam)
            lams.append(lam)
            Y = Y.astype(Xc.dtype)
            n_out = Y.shape[1] if Y.ndim == 2 else 1
            init = warm(first, n_out, Y.ndim == 2, rows) if warm is not None else None
            first += n_out
            results.append(self._solve(Xs, Y, ss, lam, init))
        W, b, common, per = _join_outputs(results)
        if not (np.all(np.isfinite(W)) and np.all(np.isfinite(b))):
            raise ValueError(
                f"{name} overflowed in dtype={as_dtype(self.dtype).name}: the fit's weights are "
                "not finite; scale the features, lower C or intercept_scaling, or use "
                "dtype='float64'")
        self._set_solution(W, b)
        self._problem_rows = [rows for rows, _ in problems]
        self._n_rows = Xc.shape[0]
        self.lam_ = lams[0] if len(lams) == 1 else np.asarray(lams)
        return common, per

    #: one-vs-rest as one M-output call: None decides by backend (OVR_NATIVE_BACKENDS);
    #: True or False forces it (tests compare the two)
    _ovr_native = None

    def _native_ovr(self) -> bool:
        """Whether one-vs-rest runs as one M-output solver call on this fit's backend."""
        if self._ovr_native is not None:
            return bool(self._ovr_native)
        return resolve_backend_name(self.backend) in OVR_NATIVE_BACKENDS

    def _solve_columns(self, Xs, Y, s, lam, init, solve_one, native: bool):
        """One-vs-rest: one native call on the ``(n, M)`` labels, or one binary fit per column
        (the same seed: the same batches; the native call's reference)."""
        if Y.ndim == 1 or native:
            return solve_one(Xs, Y, s, lam, init)
        return _join_outputs([solve_one(Xs, np.ascontiguousarray(Y[:, c]), s, lam,
                                        None if init is None else init[c])
                              for c in range(Y.shape[1])])

    def _per_output_attributes(self, per, scalars=()):
        """Per-output attributes: values for 2 classes, arrays otherwise; ``n_iter_`` the
        most of any output, ``stop_reason_`` the first other than ``"tol"``."""
        binary = len(per["n_iter"]) == 1
        self.n_iter_ = int(max(per["n_iter"]))
        reasons = [r for r in per["stop_reason"] if r != "tol"]
        self.stop_reason_ = reasons[0] if reasons else "tol"
        self.history_ = per["history"][0] if binary else list(per["history"])
        for key, attr in scalars:
            values = per[key]
            setattr(self, attr, values[0] if binary else np.asarray(values))

    # ------------------------------------------------------------ prediction
    def decision_function(self, X):
        """Confidence scores: ``<w, x> + b`` for two classes, one score per class otherwise.

        Positive means ``classes_[1]``; else the predicted class has the largest score:
        the output of each class (``"ovr"``), OneVsOneClassifier's votes plus confidences
        (``"ovo"``), or :func:`ordinal_scores` (``"ordinal"``).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples,) or (n_samples, n_classes)
        """
        check_is_fitted(self)
        if _arrays.is_device(X):                        # CuPy input: computed on the device
            return _arrays.decision_function(self, X)
        check_sparse_structure(X)
        X = validate_data(self, X, accept_sparse="csr", reset=False,
                          dtype=[np.float64, np.float32])
        coef = self.coef_.astype(X.dtype, copy=False)        # ndarray, or CSR after sparsify()
        scores = np.asarray(safe_sparse_dot(X, coef.T, dense_output=True),
                            dtype=np.float64).reshape(X.shape[0], -1) + self.intercept_
        return self._class_scores(scores)

    def _coef_array(self):
        """``coef_`` as an ndarray (a copy when :meth:`sparsify` made it a sparse matrix)."""
        return self.coef_.toarray() if sp.issparse(self.coef_) else self.coef_

    # ------------------------------------------------------------ coef_ format
    def densify(self):
        """Convert ``coef_`` (back) to a numpy.ndarray, as scikit-learn's linear classifiers.

        ``coef_`` is dense after every fit; this undoes :meth:`sparsify` and is a no-op
        otherwise.

        Returns
        -------
        self
            Fitted estimator.
        """
        check_is_fitted(self, msg="Estimator, %(name)s, must be fitted before densifying.")
        if sp.issparse(self.coef_):
            self.coef_ = self.coef_.toarray()
        return self

    def sparsify(self):
        """Convert ``coef_`` to a scipy.sparse CSR matrix, as scikit-learn's linear classifiers.

        Smaller when most weights are zero (more than half, as a rule of thumb; an L2 model
        rarely has many, so this may enlarge it).  ``intercept_`` stays dense.
        :meth:`decision_function`, :meth:`predict` and :func:`gpusvm.save_model` work with
        either format; a warm start or ``partial_fit`` starts from the dense weights.

        Returns
        -------
        self
            Fitted estimator.
        """
        check_is_fitted(self, msg="Estimator, %(name)s, must be fitted before sparsifying.")
        self.coef_ = _sparse_interface(sp.csr_array(self.coef_))
        return self

    def _class_scores(self, scores):
        """The decision function from the outputs' scores ``<w_c, x> + b_c`` (n, M)."""
        n_classes = len(self.classes_)
        if n_classes == 2:
            return scores[:, 0]
        mode = getattr(self, "multi_class", "ovr")
        if mode == "ovo":
            return _ovr_decision_function(scores > 0, scores, n_classes)
        if mode == "ordinal":
            return ordinal_scores(scores)
        return scores

    def _labels(self, scores):
        """Predicted labels from the outputs' scores (n, M), as :meth:`predict` gives them."""
        return self._predicted(self._class_scores(scores))

    def _predicted(self, scores):
        if scores.ndim == 1:
            return self.classes_[(scores > 0).astype(int)]
        return self.classes_[np.argmax(scores, axis=1)]

    def predict(self, X):
        """Predict class labels.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        check_is_fitted(self)
        if _arrays.is_device(X):                        # CuPy input: labels on the device
            return _arrays.predict(self, X)
        return self._predicted(self.decision_function(X))


def warn_short_tail(averaging, n_iter, max_iter, stop_reason) -> None:
    """Warn when ``averaging="tail"`` stopped before ``T/2 = max_iter // 2``: no average."""
    if averaging == "tail" and n_iter <= max_iter // 2:
        warnings.warn(
            f"averaging='tail' averages the iterates after iteration {max_iter // 2} = "
            f"max_iter/2, but the run stopped at iteration {n_iter} ({stop_reason}): the last "
            "iterate is returned, not an average; give the run more time, lower max_iter, or "
            "use averaging='all'", ConvergenceWarning, stacklevel=3)


def _progress_bar(verbose, total, gap=False):
    """``(update, close)`` of a tqdm bar with the live objective (``gap``: the primal and
    the duality gap) when ``verbose``; ``(None, no-op)`` otherwise."""
    if not verbose:
        return None, lambda: None
    from tqdm.auto import tqdm  # noqa: PLC0415
    bar = tqdm(total=total, unit="it", desc="gpusvm sdca" if gap else "gpusvm")
    state = {"done": 0}

    def update(t, objective, duality_gap=None):
        bar.update(t - state["done"])
        state["done"] = t
        if gap:
            bar.set_postfix(primal=f"{objective:.6g}", gap=f"{duality_gap:.3g}")
        else:
            bar.set_postfix(objective=f"{objective:.6g}")

    def close():
        if not gap and 0 < state["done"] < bar.total:    # stopped early (tol): complete
            bar.total = state["done"]
            bar.refresh()
        bar.close()

    return update, close


def _join_outputs(results):
    """``(W, b, common, per_output)`` of several solver calls joined along the outputs."""
    Ws, bs, common, per = [], [], {}, {}
    for W, b, com, per_out in results:
        Ws.append(W)
        bs.append(np.atleast_1d(np.asarray(b, dtype=np.float64)))
        common = common or com
        for key, values in per_out.items():
            per.setdefault(key, []).extend(values)
    return np.hstack(Ws), np.concatenate(bs), common, per


def _sparse_interface(X):
    """``X`` as the sparse type scikit-learn's configuration asks for (``csr_matrix`` by
    default; scikit-learn's own helper where it has one)."""
    try:
        from sklearn.utils import _align_api_if_sparse  # noqa: PLC0415
    except ImportError:                                 # scikit-learn before 1.8
        return sp.csr_matrix(X)
    return _align_api_if_sparse(X)


def seed_of(random_state):
    """The integer seed (or None) of a ``random_state`` (int, RandomState, Generator)."""
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(0, 2**31 - 1))
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(0, 2**31 - 1))
    return random_state
