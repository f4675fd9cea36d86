"""Distributed estimators: CoCoA+ SDCA and all-reduce mini-batch Pegasos over a dask cluster."""

from __future__ import annotations

import functools
import math
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.base import _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_array, check_is_fitted

from .._arrays import col_dots
from ..backends._csr_nb import add_rows_at, add_scaled, localize_columns, round_sums
from ..backends._state import S_A
from ..backends.numpy_ import NumpyBackend
from ..estimators._base import (_LinearSVCBase, class_labels, output_problems, resolve_lam,
                                row_weights)
from ..solvers._cocoa import best_points
from ._blocks import (PegasosBlock, SDCABlock, StaleBlockError, commit, driver_step, line_search,
                      on_host)

#: bias modes of the distributed estimators (both have a box-constrained dual / a plain step)
DASK_BIAS_MODES = ("none", "augmented")
#: a dask graph larger than this holds in-memory data: its chunks are scattered instead
GRAPH_SCATTER_BYTES = 1 << 20
#: ``rebalance="auto"``: deal the rows out once when a block's share of some class differs
#: from the data's by more than this (class-sorted or time-sorted chunks)
REBALANCE_SKEW = 0.1


class DistributedFitError(RuntimeError):
    """A distributed fit could not continue (workers lost too often, or a call timed out)."""


class _WorkerLost(Exception):
    """Internal: a block's worker or actor is gone; the fit resumes from the last committed state."""


def _is_dask_array(X) -> bool:
    try:
        import dask.array as da
    except ImportError:  # pragma: no cover
        return False
    return isinstance(X, da.Array)


def _client_current(fit):
    """Run ``fit`` with the estimator's client as the current one (the actor proxies look it up,
    and ``client=`` may not be the default client) and the driver's BLAS on one thread (an idle
    BLAS thread spins on a core the workers may share: news20 on 2 cores, a fit 1.5x as long)."""
    from threadpoolctl import threadpool_limits  # noqa: PLC0415  (a scikit-learn dependency)

    @functools.wraps(fit)
    def wrapper(self, *args, **kwargs):
        client = self._get_client()
        with client.as_current(), threadpool_limits(limits=1, user_api="blas"):
            return fit(self, *args, **kwargs)
    return wrapper


def _lost_error(exc) -> bool:
    """Whether ``exc`` means "a worker or its actor is gone" (recoverable), not a bug."""
    if isinstance(exc, (OSError, StaleBlockError, _WorkerLost)):
        return True
    return isinstance(exc, RuntimeError) and "Actor was lost" in str(exc)


def _to_dask_array(X, what):
    """A dask DataFrame or Series as a dask array with known chunk sizes; anything else as is."""
    if not hasattr(X, "__dask_graph__") or _is_dask_array(X):
        return X
    if hasattr(X, "to_dask_array"):
        return X.to_dask_array(lengths=True)
    raise TypeError(f"{what} is a dask collection of type {type(X).__name__}; pass a dask array, "
                    "a dask DataFrame or Series, or in-memory data")


def _computed(v, name):
    """A dask collection computed on the cluster; anything else as is."""
    v = _to_dask_array(v, name)
    return v.compute() if _is_dask_array(v) else v


def _host_vector(v, name, n):
    """A label or weight vector (dask array or Series, or array-like) as a host array of n."""
    if v is None:
        return None
    v = np.asarray(_computed(v, name))
    if v.ndim != 1 or v.shape[0] != n:
        raise ValueError(f"{name} must have shape ({n},) to match X's rows, got {v.shape}")
    return v


def deal_rows(n, K):
    """The block (int64 (n,)) of every row, dealt out strided: row ``i`` to block ``i mod K``.

    The rule of in-memory input, and no seed's: CoCoA's rounds depend on the partition far
    more than on the local solvers' sampling (news20 as stored in 2 halves, tol 1e-3: the
    halvings of seeded shuffles certified in 16-30 rounds for six seeds in ten, 70 and 130
    for two, and stalled at a gap of 1.3-1.5e-3 after 200 for the other two, each one also
    with the other seeds' sampling), so a seeded deal made the rounds to ``tol`` a matter
    of the seed's luck.  Strided, the blocks are the data order's: the same for every seed,
    and of one class mix when the file is sorted by label or time.
    """
    return np.arange(n, dtype=np.int64) % K


def _take_rows(block, idx):
    """Rows ``idx`` of one chunk (a worker task of the rebalance), in host memory."""
    return on_host(block)[idx]


def _stack_rows(*pieces):
    """The pieces of a rebalanced block, one under the other (a worker task)."""
    if any(sp.issparse(p) for p in pieces):
        return sp.vstack([sp.csr_matrix(p) for p in pieces], format="csr")
    return np.concatenate(pieces, axis=0)


class _DaskLinearBase(_LinearSVCBase):
    """Data placement, actors, fault handling and prediction of the distributed estimators."""

    _MULTICLASS = True

    _parameter_constraints: dict = {
        **{k: _LinearSVCBase._parameter_constraints[k]
           for k in ("lam", "C", "loss", "class_weight", "multi_class", "intercept_scaling",
                     "backend", "callback", "verbose")},
        "max_iter": [Interval(Integral, 1, None, closed="left"), None],
        "bias": [StrOptions(set(DASK_BIAS_MODES))],
        "n_partitions": [Interval(Integral, 1, None, closed="left"), None],
        "rebalance": ["boolean", StrOptions({"auto"})],
        "client": "no_validation",
        "timeout": [Interval(Real, 0, None, closed="neither")],
        "max_recoveries": [Interval(Integral, 0, None, closed="left")],
        "direct": ["boolean"],
        "random_state": ["random_state"],
    }

    # ------------------------------------------------------------ client and data
    def _get_client(self):
        if self.client is not None:
            return self.client
        try:
            from distributed import get_client
        except ImportError as exc:  # pragma: no cover
            raise ImportError('gpusvm.dask needs dask.distributed: pip install "gpusvm[dask]"') \
                from exc
        try:
            return get_client()
        except ValueError:
            raise ValueError(
                f"{type(self).__name__} found no dask client: start one first, e.g. "
                "`from distributed import Client, LocalCluster; client = Client(LocalCluster())`, "
                "or pass client=...") from None

    def _workers(self, client):
        excluded = getattr(self, "_excluded", set())

        def listed():
            info = client.scheduler_info(n_workers=-1) if _accepts_n_workers(client) \
                else client.scheduler_info()
            return sorted(a for a in info["workers"] if a not in excluded)

        workers = listed()
        deadline = time.monotonic() + min(self.timeout, 60.0)
        while not workers and time.monotonic() < deadline:   # e.g. a nanny restarting a worker
            time.sleep(0.5)
            workers = listed()
        if not workers:
            raise DistributedFitError(
                "the dask cluster has no workers; start some (e.g. LocalCluster(n_workers=2)) "
                "or wait for them with client.wait_for_workers(...)")
        return workers

    def _labels(self, y_local, n, sample_weight):
        """Classes, the ``(n, M)`` labels of the outputs and the row weights (or None)."""
        name = type(self).__name__
        classes, y_idx = class_labels(y_local, name)
        if classes.size > 2 and self.multi_class != "ovr":
            raise ValueError(
                f"{name} fits more than two classes one-vs-rest only (multi_class='ovr', the M "
                f"outputs in one distributed pass); multi_class={self.multi_class!r} needs "
                f"gpusvm.{name}(multi_class={self.multi_class!r}) on one machine")
        s = row_weights(self.class_weight, sample_weight, classes, y_idx, np.empty((n, 0)))
        (_, Y), = output_problems(classes.size, y_idx, "ovr")
        return classes, np.ascontiguousarray(Y.reshape(n, -1), dtype=np.float64), s

    def _split(self, X, y, sample_weight, client):
        """Validate the input and cut it into row blocks (sources), their labels and weights."""
        name = type(self).__name__
        X = _to_dask_array(X, "X")
        if _is_dask_array(X):
            if X.ndim != 2:
                raise ValueError(f"{name} expects a 2-D dask array X, got {X.ndim} dimensions")
            if any(math.isnan(c) for c in X.chunks[0]):
                raise ValueError(
                    "X has unknown chunk sizes (NaN in X.chunks); call X.compute_chunk_sizes() "
                    "first")
            if len(X.chunks[1]) != 1:
                X = X.rechunk({1: -1})
            n, d = X.shape
            y_local = _host_vector(y, "y", n)
            sw = _host_vector(sample_weight, "sample_weight", n)
            bounds = np.concatenate([[0], np.cumsum(X.chunks[0])]).astype(int)
            parts = X.to_delayed().ravel().tolist()
            if _graph_bytes(X) > GRAPH_SCATTER_BYTES:
                # the graph holds the data (da.from_array of an in-memory matrix): the client has
                # the rows anyway, so send each chunk once to its worker instead of the graph
                import dask
                chunks = dask.compute(*parts, scheduler="sync")
                sources = [{"rows": np.arange(bounds[b], bounds[b + 1]), "local": c}
                           for b, c in enumerate(chunks) if c.shape[0]]
            else:
                sources = [{"rows": np.arange(bounds[b], bounds[b + 1]), "local": None,
                            "delayed": p} for b, p in enumerate(parts) if bounds[b + 1] > bounds[b]]
        else:
            Xc = check_array(X, accept_sparse="csr", dtype=[np.float64, np.float32],
                             input_name="X")
            n, d = Xc.shape
            y_local = _host_vector(y, "y", n)
            sw = _host_vector(sample_weight, "sample_weight", n)
            n_workers = len(self._workers(client))
            P = self.n_partitions if self.n_partitions is not None else n_workers
            if P > n:
                raise ValueError(f"n_partitions={P} exceeds the number of samples n={n}")
            Xc = sp.csr_matrix(Xc) if not sp.issparse(Xc) else Xc.tocsr()
            # strided: a sorted file still gives blocks of the same mix
            sources = [{"rows": np.arange(b, n, P), "local": Xc[np.arange(b, n, P)]}
                       for b in range(P)]
        self.classes_, Y, s = self._labels(y_local, n, sw)
        self.n_features_in_ = d
        self.rebalanced_ = False
        if _is_dask_array(X):
            sources = self._rebalance(sources, y_local, n)
        pending = [src for src in sources if "delayed" in src]
        if pending:   # each block's future: its chunk computed where dask puts it
            for src, fut in zip(pending, client.compute([src.pop("delayed") for src in pending])):
                src["future"] = fut
        for src in sources:
            src["Y"] = Y[src["rows"]]
            src["s"] = None if s is None else s[src["rows"]]
        return sources, Y, s

    def _rebalance(self, sources, y_local, n):
        """Deal the rows out afresh by :func:`deal_rows` when the blocks' class mixes differ
        (sorted chunks pull CoCoA's local problems apart); the rows move once, on the workers
        (each new block is a task taking its rows from the chunks), never through the client."""
        K = len(sources)
        if K < 2 or self.rebalance is False:
            return sources
        if self.rebalance == "auto":
            _, idx = np.unique(y_local, return_inverse=True)
            idx = idx.ravel()
            share = np.bincount(idx, minlength=idx.max() + 1) / n
            skew = max(np.abs(np.bincount(idx[src["rows"]], minlength=share.size)
                              / src["rows"].size - share).max() for src in sources)
            if skew <= REBALANCE_SKEW:
                return sources
        import dask
        self.rebalanced_ = True
        owner = deal_rows(n, K)
        scattered = sources[0]["local"] is not None    # the sources are all of one kind
        out = []
        for b in range(K):
            pieces, rows = [], []
            for src in sources:
                local = np.flatnonzero(owner[src["rows"]] == b)
                if local.size == 0:
                    continue
                rows.append(src["rows"][local])
                pieces.append(_take_rows(src["local"], local) if scattered
                              else dask.delayed(_take_rows, pure=True)(src["delayed"], local))
            if scattered:
                out.append({"local": _stack_rows(*pieces)})
            else:
                out.append({"local": None, "delayed": dask.delayed(_stack_rows, pure=True)(*pieces)})
            out[-1]["rows"] = np.concatenate(rows)
        return out

    def _place(self, client, sources, make):
        """One actor per block (``make(b, data)`` gives its class and arguments), spread over the
        current workers: a scattered block from the driver's copy, a dask-array block from its
        (recomputable) future; all at once, one thread each."""
        workers = self._workers(client)

        def place(b):
            addr = workers[b % len(workers)]
            s = sources[b]
            data = s["future"] if s["local"] is None else client.scatter(
                s["local"], workers=[addr], direct=True, hash=False)
            cls, args = make(b, data)
            return client.submit(cls, *args, actor=True, workers=[addr],
                                 allow_other_workers=False, pure=False)

        with ThreadPoolExecutor(max_workers=min(len(sources), 8)) as pool:
            futures = list(pool.map(place, range(len(sources))))
        actors = [fut.result(timeout=self.timeout) for fut in futures]
        self._actor_futures = futures
        if self.direct:
            for actor in actors:
                bound = getattr(actor, "_client", None)
                if bound is not None and not bound.direct_to_workers:
                    self._direct_restore.append((bound, bound.direct_to_workers))
                    bound.direct_to_workers = True
        return actors

    def _gather(self, calls):
        """Results of one actor call per block, watching for lost workers."""
        deadline = time.monotonic() + self.timeout
        out = []
        for af in calls:
            while True:
                try:
                    out.append(af.result(timeout=0.5))
                    break
                except TimeoutError:
                    if any(f.status not in ("finished", "pending") for f in self._actor_futures):
                        raise _WorkerLost("a block's worker was lost") from None
                    if time.monotonic() > deadline:
                        raise DistributedFitError(
                            f"a block did not answer within timeout={self.timeout} s; raise "
                            "timeout for larger blocks, or check the cluster's workers") from None
        return out

    def _rebuild(self, exc, where, blocks, client, sources, make):
        """After a failed call: raise a bug again; after a lost worker, the blocks ``make`` builds
        on the remaining workers (at most ``max_recoveries`` times)."""
        if not _lost_error(exc):
            raise exc
        self.n_recoveries_ += 1
        if self.n_recoveries_ > self.max_recoveries:
            raise DistributedFitError(
                f"{type(self).__name__}: a worker was lost at {where} and max_recoveries="
                f"{self.max_recoveries} recoveries are used up ({type(exc).__name__}: {exc}); "
                "check the cluster or raise max_recoveries") from exc
        warnings.warn(
            f"{type(self).__name__}: a worker was lost at {where} ({type(exc).__name__}); "
            "resuming from the last committed state on the remaining workers", RuntimeWarning,
            stacklevel=3)
        # workers whose actor does not answer a probe are not used again in this fit (the
        # scheduler may still list a dead worker for a while)
        for actor in blocks:
            try:
                actor.info().result(timeout=5)
            except Exception:  # noqa: BLE001 - any failure means "do not place blocks there"
                self._excluded.add(actor._address)
        self._release()
        return self._place(client, sources, make)

    def _release(self):
        """Drop the blocks now: the actors' keys are cancelled for every holder, as the
        handles' own references (in cycles of dask's call closures) would wait for Python's
        cyclic collector, and the workers keep a block's rows while one reference lives."""
        futures = getattr(self, "_actor_futures", [])
        if futures:
            futures[0].client.cancel(futures, force=True)
        self._actor_futures = []

    def _seed_int(self):
        if not hasattr(self, "_seed_value"):
            seed = self._seed()
            if seed is None:
                seed = int(np.random.SeedSequence().generate_state(1)[0])
            self._seed_value = int(seed)
        return self._seed_value

    def _begin(self, X, y, sample_weight):
        """A fit's client and :meth:`_split`; fresh state of the fault handling (and a fresh
        seed for ``random_state=None``)."""
        client = self._get_client()
        self.__dict__.pop("_seed_value", None)
        self.n_recoveries_ = 0
        self._direct_restore = []
        self._excluded = set()
        return (client, *self._split(X, y, sample_weight, client))

    def _bar(self, total, unit, desc):
        """A progress bar when ``verbose``, else None."""
        from tqdm.auto import tqdm
        return tqdm(total=total, unit=unit, desc=desc) if self.verbose else None

    def _end(self, bar):
        """The end of a fit, also a failed one: actors released, the clients' settings restored."""
        self._release()
        for bound, value in reversed(getattr(self, "_direct_restore", [])):
            bound.direct_to_workers = value
        self._direct_restore = []
        self._excluded = set()
        if bar is not None:
            bar.close()

    # ------------------------------------------------------------ prediction
    def decision_function(self, X):
        """Confidence scores: ``<w, x> + b`` for two classes, one score per class otherwise.

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array} of shape (n_samples, n_features)
            A dask array gives a lazy dask array of scores (one chunk per row chunk).

        Returns
        -------
        ndarray or dask.array.Array of shape (n_samples,) or (n_samples, n_classes)
        """
        check_is_fitted(self)
        X = _to_dask_array(X, "X")
        if _is_dask_array(X):
            if X.shape[1] != self.n_features_in_:
                raise ValueError(f"X has {X.shape[1]} features, but {type(self).__name__} is "
                                 f"expecting {self.n_features_in_} features as input")
            X = X.rechunk({1: -1}) if len(X.chunks[1]) != 1 else X
            coef, b = np.ascontiguousarray(self._coef_array().T), self.intercept_.copy()
            if coef.shape[1] == 1:
                return X.map_blocks(_block_scores, coef, b, drop_axis=1, dtype=np.float64)
            return X.map_blocks(_block_scores, coef, b, chunks=(X.chunks[0], (coef.shape[1],)),
                                dtype=np.float64)
        return super().decision_function(X)

    def predict(self, X):
        """Predict class labels.

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array} of shape (n_samples, n_features)

        Returns
        -------
        ndarray or dask.array.Array of shape (n_samples,)
        """
        X = _to_dask_array(X, "X")
        if _is_dask_array(X):
            scores = self.decision_function(X)
            classes = self.classes_
            if scores.ndim == 1:
                return scores.map_blocks(lambda s: classes[(s > 0).astype(int)], dtype=classes.dtype)
            return scores.map_blocks(lambda s: classes[np.argmax(s, axis=1)], drop_axis=1,
                                     dtype=classes.dtype)
        return super().predict(X)

    def score(self, X, y, sample_weight=None):
        """Mean accuracy on ``(X, y)`` (dask inputs are computed).

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array} of shape (n_samples, n_features)
        y : array-like or dask array of shape (n_samples,)
        sample_weight : array-like of shape (n_samples,), optional

        Returns
        -------
        float
        """
        from sklearn.metrics import accuracy_score
        pred = _computed(self.predict(X), "X")
        return float(accuracy_score(_computed(y, "y"), pred, sample_weight=sample_weight))

    def _local_params(self):
        return {"lam": self.lam, "C": self.C, "loss": self.loss,
                "class_weight": self.class_weight, "multi_class": "ovr", "bias": self.bias,
                "intercept_scaling": self.intercept_scaling, "dtype": "float64",
                "backend": "auto", "random_state": self.random_state}

    def _to_local(self, est, names):
        check_is_fitted(self)
        for attr in ("coef_", "intercept_", "classes_", "n_features_in_", "n_iter_", "history_",
                     "stop_reason_", "lam_", *names):
            setattr(est, attr, getattr(self, attr))
        return est


def _graph_bytes(X) -> int:
    """Bytes the dask graph of ``X`` holds (its in-memory arrays; tasks are small)."""
    from dask.sizeof import sizeof
    try:
        graph = X.__dask_graph__()
        return int(sum(sizeof(v) for v in dict(graph).values()))
    except Exception:  # noqa: BLE001 - an unknown graph: assume it is small
        return 0


def _accepts_n_workers(client) -> bool:
    import inspect
    try:
        return "n_workers" in inspect.signature(client.scheduler_info).parameters
    except (TypeError, ValueError):  # pragma: no cover
        return False


def _block_scores(block, coef, b):
    block = on_host(block)
    out = np.asarray(block @ coef, dtype=np.float64).reshape(block.shape[0], -1) + b
    return out[:, 0] if coef.shape[1] == 1 else out


# ================================================================ SDCA (CoCoA+)
class SDCASVC(_DaskLinearBase):
    r"""Linear SVM trained by distributed SDCA (CoCoA+, "adding"), with duality-gap certificates.

    Solves the problems of :class:`gpusvm.SDCASVC` (hinge or squared hinge, row
    weights, one output per class for more than two classes)

    .. math::

        P(w) = \frac{\lambda}{2}\|w\|^2 + \frac{1}{n}\sum_i s_i\, \ell(y_i \langle w, x_i\rangle),
        \quad
        D(\alpha) = \frac1n\sum_i \ell^*_i(\alpha_i) - \frac{\lambda}{2}\|w(\alpha)\|^2

    on a dask cluster by CoCoA (Ma et al. 2015, Algorithm 1; Smith et al. 2018,
    Algorithm 1) with an exact line search as the aggregation: each of ``K`` row blocks,
    resident on a worker with its duals, runs its backend's SDCA segment on its local
    subproblem (``sigma'``) from the broadcast ``W``, and the driver moves ``alpha`` by
    ``gamma`` (per output, in ``[0, 1]``, maximising the dual:
    :func:`gpusvm.dask._blocks.line_search`) times the blocks' changes.  The dual never
    decreases, and every round gains at least what CoCoA's averaging would.  The fit stops
    once every output's duality gap, from the blocks' sums, is ``<= tol``: that of the
    lowest-``P`` point of the rounds (the minimum on the segment between the best point and
    each round's, from the blocks' margins; CoCoA+'s points alternate around the optimum).

    Parameters
    ----------
    lam, C : float or None, default=None
        Regularisation ``lambda > 0``, ``1e-4`` unless LinearSVC's ``C`` gives ``1/(C n)``.
    loss : {"hinge", "squared_hinge"}, default="hinge"
    class_weight : dict, "balanced" or None, default=None
        As in LinearSVC; multiplies ``sample_weight``.
    multi_class : {"ovr"}, default="ovr"
        More than two classes: one output per class, all in the same rounds (the other
        modes of :class:`gpusvm.SDCASVC` are refused with what to use).
    tol : float, default=1e-3
        Stop when every output's duality gap is ``<= tol``.
    max_iter : int or None, default=None
        Maximum number of rounds; ``None`` means 200.
    local_epochs : float, default=1.0
        ``H``: coordinate steps per block and round, in passes over the block (more did
        not save rounds on imdb or news20).
    sigma : float >= 1 or "K", default=1.0
        ``sigma'`` of the local subproblems: ``1`` steps as plain SDCA on each block (the
        line search damps the sum); ``"K"`` is CoCoA+'s safe value (more rounds).
    bias : {"none", "augmented"}, default="none"
        No intercept, or a constant feature ``intercept_scaling`` appended to every row
        (unlike :class:`gpusvm.SDCASVC`'s default: the shared column slows CoCoA+ down).
    intercept_scaling : float, default=1.0
    n_partitions : int or None, default=None
        Blocks ``K`` for in-memory input, rows dealt out strided (row ``i`` to block
        ``i mod K``); ``None``: one per worker.  A dask array keeps its row chunks.
    rebalance : bool or "auto", default="auto"
        For a dask array: deal its rows out afresh, once, on the workers, strided as
        in-memory input (row ``i`` to block ``i mod K``, whatever the seed);
        ``"auto"``: when a block's share of some class differs from the data's by more
        than 0.1.
    backend : {"auto", "numba", "numpy", "cupy", "emulated"}, default="auto"
        Every block's local solver (``"auto"``: the device backend where the worker sees
        a CUDA device, else numba).
    client : distributed.Client or None, default=None
        ``None`` uses the current client (``distributed.get_client()``).
    timeout : float, default=600
        Seconds a block may take to answer one call before the fit fails.
    max_recoveries : int, default=3
        Lost workers survived per fit; then :class:`DistributedFitError`.
    direct : bool, default=True
        Send the actor calls straight to the workers (the client's ``direct_to_workers``,
        for the fit); ``False`` only when the driver cannot reach the workers.
    callback : callable or None, default=None
        ``callback(round, gap, elapsed)`` after each certificate (the largest of the
        outputs' gaps); return ``False`` to stop (a ConvergenceWarning when the gap is above
        ``tol`` then).
    random_state : int, RandomState, Generator or None, default=None
        Seed of the blocks' batch streams (keyed by seed and block); the partition does
        not depend on it.  The same seed and partition give the same model, whatever the
        workers.
    verbose : int, default=0
        A progress bar per round with the live duality gap when > 0.

    Attributes
    ----------
    coef_ : ndarray of shape (1, n_features) or (n_classes, n_features)
    intercept_ : ndarray of shape (1,) or (n_classes,)
    classes_ : ndarray of shape (n_classes,)
    alpha_ : ndarray of shape (n_samples,) or (n_samples, n_classes)
        Dual variables, in the order of the training rows.
    lam_ : float
        The ``lam`` of the fit (``C`` resolved).
    n_iter_ : int
        Rounds performed.
    history_ : list of (int, float, float, float, float)
        ``(round, P, D, gap, elapsed seconds)`` at every certificate (the output of the
        largest gap); ``P`` is the lowest of the points so far, a round's ``D`` uses the
        driver's running ``w(alpha)`` (exact up to float32 rounding), the last entry is exact.
    primal_objective_, dual_objective_, duality_gap_ : float or ndarray of shape (n_classes,)
        At the returned ``W`` (the lowest-``P`` point of the segments between the rounds'
        points and ``w(alpha_)``: :func:`gpusvm.solvers._cocoa.best_points`) and ``alpha_``,
        one per output for more than two classes.
    steps_ : ndarray of shape (n_iter,) or (n_iter, n_classes)
        The line search's ``gamma`` of every round.
    n_blocks_, n_recoveries_ : int
        ``K``, and the workers lost and survived.
    rebalanced_ : bool
        Whether the rows were dealt out afresh (``rebalance``).
    bytes_per_round_ : int
        One round's ``W`` out and ``U_k`` back in float32 on the blocks' columns, plus
        ``alpha`` (``8 sum_k d_k M + 8 n M``).
    worker_seconds_ : float
        Sum over rounds of the slowest block's local-solver time.
    stop_reason_ : str
        ``"tol"``, ``"max_iter"`` or ``"callback"``.
    n_features_in_ : int

    Notes
    -----
    More blocks mean more rounds for the same ``tol`` (BENCHMARKS.md), and so do a feature
    shared by all rows or blocks of different label mixes.  After a lost worker every block
    is rebuilt from the last committed round: the result is an undisturbed run's.

    References
    ----------
    C. Ma, V. Smith, M. Jaggi, M. I. Jordan, P. Richtárik, M. Takáč. Adding vs.
    Averaging in Distributed Primal-Dual Optimization. ICML 2015.
    V. Smith, S. Forte, C. Ma, M. Takáč, M. I. Jordan, M. Jaggi. CoCoA: A General
    Framework for Communication-Efficient Distributed Optimization. JMLR 18(230), 2018.

    Examples
    --------
    >>> clf = SDCASVC(C=1.0, tol=1e-3).fit(X, y)    # doctest: +SKIP
    >>> bool(clf.duality_gap_ <= 1e-3)              # doctest: +SKIP
    True
    """

    _parameter_constraints: dict = {
        **_DaskLinearBase._parameter_constraints,
        "tol": [Interval(Real, 0, None, closed="left")],
        "local_epochs": [Interval(Real, 0, None, closed="neither")],
        "sigma": [Interval(Real, 1, None, closed="left"), StrOptions({"K"})],
    }

    def __init__(self, *, lam=None, C=None, loss="hinge", class_weight=None, multi_class="ovr",
                 tol=1e-3, max_iter=None, local_epochs=1.0, sigma=1.0, bias="none",
                 intercept_scaling=1.0, n_partitions=None, rebalance="auto", backend="auto",
                 client=None, timeout=600.0, max_recoveries=3, direct=True, callback=None,
                 random_state=None, verbose=0):
        self.lam = lam
        self.C = C
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
        self.callback = callback
        self.random_state = random_state
        self.verbose = verbose

    @_fit_context(prefer_skip_nested_validation=True)
    @_client_current
    def fit(self, X, y, sample_weight=None):
        """Fit by CoCoA+ rounds until every output's certified duality gap is ``<= tol``.

        Parameters
        ----------
        X : {dask array, dask DataFrame, sparse matrix, array-like} of shape (n_samples, n_features)
            A dask array of row chunks (``scipy.sparse`` or NumPy, all columns in one chunk),
            a dask DataFrame, or in-memory data cut into ``n_partitions`` blocks.
        y : dask array, dask Series or array-like of shape (n_samples,)
            Class labels (two or more classes).
        sample_weight : dask array, dask Series or array-like of shape (n_samples,), optional
            Non-negative row weights (multiplied by ``class_weight``).

        Returns
        -------
        self : SDCASVC
        """
        client, sources, Y, s = self._begin(X, y, sample_weight)
        n, M = Y.shape
        K = len(sources)
        lam = self.lam_ = self._fit_lam(n)
        tol = self._output_tol(M)      # per output (a search's outputs have their own units)
        seed = self._seed_int()
        max_rounds = self.max_iter if self.max_iter is not None else 200
        sigma = float(K) if self.sigma == "K" else min(float(self.sigma), float(K))
        self.n_blocks_ = K
        self.worker_seconds_ = 0.0
        steps = [max(1, int(round(float(self.local_epochs) * src["rows"].size)))
                 for src in sources]    # each block's coordinate steps a round
        alpha0 = self._initial_alpha()        # a warm start (n, M) in the caller's row order
        # the driver's copy of each block's committed alpha
        committed = [None if alpha0 is None else alpha0[src["rows"]] for src in sources]
        s_rows = None if sources[0]["s"] is None else np.concatenate(
            [np.asarray(src["s"], dtype=np.float64) for src in sources])
        position = [0] * K      # each block's counter position (steps done)
        r = 0

        def make(b, data):      # block b at round r, from the committed alpha
            return SDCABlock, (data, sources[b]["Y"], sources[b]["s"], b, n, lam, sigma, seed,
                               self.bias, float(self.intercept_scaling), self.loss, self.backend,
                               committed[b], r)

        bar = self._bar(max_rounds, "round", "gpusvm dask sdca")
        t0 = time.perf_counter()
        history, steps_taken = [], []
        stop = "max_iter"
        pending = None           # (alpha after the local solvers, gamma) of the last round
        try:
            blocks = self._place(client, sources, make)
            infos = self._gather([blk.info() for blk in blocks])
            d = infos[0][1]
            cols = [info[3] for info in infos]
            union, pos = _column_map(d, cols)
            committed = [np.asarray(a) for a in self._gather([blk.alpha_copy()
                                                               for blk in blocks])]
            W = np.zeros((union.size, M))   # w on the columns some block uses
            if alpha0 is not None:          # w(alpha0), from the blocks
                W = _assemble(union.size, M, pos,
                              self._gather([blk.xty(0) for blk in blocks])) / (lam * n)
            W_buf, U_buf = np.empty_like(W), np.empty_like(W)   # a round's W and U, reused
            sums = np.empty((3, M))
            every = np.arange(M)
            best = best_points(lam, self.loss, s_rows)    # the lowest-P point of the rounds

            def offer(point, res, primal, sq):
                """Combine ``point`` (its ``P`` ``primal`` and ``||w_c||^2`` ``sq``, the blocks'
                margins in ``res``) with the best point; ``best.P``."""
                A = np.ascontiguousarray(np.concatenate([x["A"] for x in res]).T)
                best.offer(every, point if best.W is not None else point.copy(), A, primal, sq)
                return best.P.copy()

            def take_pending():
                """Commit the last round's step on the driver's copy, as every block does;
                its ``gamma`` (None: no step pending)."""
                nonlocal committed, pending
                if pending is None:
                    return None
                (after, gamma), pending = pending, None
                committed = [commit(committed[b], after[b], gamma) for b in range(K)]
                return gamma

            def certify_final():
                """Commit the pending step, set ``W = w(alpha)`` from the blocks' ``X_k^T
                (alpha_k Y_k)`` and certify it (no local solver), in ``history``, with the best
                point of the rounds and ``W`` (any primal point certifies ``alpha``)."""
                nonlocal blocks, W
                gamma = take_pending()
                while True:
                    try:
                        parts = self._gather([blk.xty(r, gamma) for blk in blocks])
                        W = _assemble(union.size, M, pos, parts) / (lam * n)
                        res = self._gather([blk.certify(np.take(W, pos[b], axis=0), r)
                                            for b, blk in enumerate(blocks)])
                    except Exception as exc:
                        blocks = self._rebuild(exc, "the final certificate", blocks, client,
                                               sources, make)
                        gamma = None
                        continue
                    sq = col_dots(np, W, W)
                    primal, dual, _ = _gaps(sq, lam, n, res)
                    primal = offer(W, res, primal, sq)
                    gaps = primal - dual
                    worst = int(np.argmax(gaps))
                    history.append((r, primal[worst], dual[worst], gaps[worst],
                                    time.perf_counter() - t0))
                    return primal, dual, gaps

            while r < max_rounds:
                gamma = take_pending()
                Wb = W.astype(np.float32)   # between exact certificates, w and u travel in float32
                try:
                    res = self._gather([blk.step(np.take(Wb, pos[b], axis=0), r, position[b],
                                                 position[b] + steps[b], gamma)
                                        for b, blk in enumerate(blocks)])
                except Exception as exc:
                    blocks = self._rebuild(exc, f"round {r}", blocks, client, sources, make)
                    continue
                # W = the running w(alpha) (to rounding) and the round's sums, in one pass
                U = _assemble(union.size, M, pos, [x["u"] for x in res], U_buf)
                W = W_buf
                round_sums(Wb, U, W, sums)
                primal, dual, _ = _gaps(sums[0], lam, n, res)
                primal = offer(W, res, primal, sums[0].copy())
                gaps = primal - dual
                worst = int(np.argmax(gaps))
                elapsed = time.perf_counter() - t0
                history.append((r, primal[worst], dual[worst], gaps[worst], elapsed))
                if bar is not None:
                    bar.set_postfix(primal=f"{primal[worst]:.6g}", gap=f"{gaps[worst]:.3g}")
                if self.callback is not None and \
                        self.callback(r, float(gaps.max()), elapsed) is False:
                    stop = "callback"
                    break
                self.worker_seconds_ += max(x["seconds"] for x in res)
                step = line_search(sums[1], sums[2], np.sum([x["b"] for x in res], axis=0),
                                   np.sum([x["q"] for x in res], axis=0), lam, n)
                add_scaled(W, U, step)
                steps_taken.append(step)
                pending = ([x["alpha"] for x in res], step)
                position = [p + k for p, k in zip(position, steps)]
                r += 1
                if bar is not None:
                    bar.update(1)
                if np.all(gaps <= tol):    # the running gap says done: check it exactly
                    primal, dual, gaps = certify_final()
                    if np.all(gaps <= tol):
                        stop = "tol"
                        break
            if stop == "max_iter":            # commit the last round's step and certify it
                primal, dual, gaps = certify_final()
                if np.all(gaps <= tol):
                    stop = "tol"
        finally:
            self._end(bar)
        alpha = np.empty((n, M))
        for b, src in enumerate(sources):
            alpha[src["rows"]] = committed[b]
        self.alpha_ = alpha[:, 0] if M == 1 else alpha
        W_full = np.zeros((d, M))
        W_full[union] = best.W
        self._set_solution(W_full if M > 1 else W_full[:, 0], 0.0)
        self.n_iter_ = r
        self.history_ = history
        self.steps_ = np.array(steps_taken).reshape(-1, M) if M > 1 else \
            np.array(steps_taken).ravel()
        self.stop_reason_ = stop
        self.primal_objective_, self.dual_objective_, self.duality_gap_ = (
            float(v[0]) if M == 1 else v for v in (primal, dual, gaps))
        self.bytes_per_round_ = int(2 * sum(c.size for c in cols) * M * 4 + 8 * n * M)
        if stop == "max_iter":
            advice = "increase max_iter"
            if not self.rebalanced_ and self.rebalance is False and K > 1:
                advice += ", or set rebalance='auto' if the blocks' class mixes differ"
            warnings.warn(
                f"distributed SDCA stopped after max_iter={max_rounds} rounds with duality gap "
                f"{float(np.max(gaps)):.3g} > tol={self.tol}; {advice}",
                ConvergenceWarning, stacklevel=4)   # the caller of fit
        elif stop == "callback" and np.any(gaps > tol):
            warnings.warn(
                f"distributed SDCA stopped by its callback at round {r} with duality gap "
                f"{float(np.max(gaps)):.3g} > tol={self.tol}; let the callback return "
                "something other than False to reach tol", ConvergenceWarning, stacklevel=4)
        return self

    # the hooks SDCASVCCV overrides: the warm start (n, M) or None, lam, and each output's tol
    def _initial_alpha(self):
        return None

    def _fit_lam(self, n):
        return resolve_lam(self.lam, self.C, n)

    def _output_tol(self, M):
        return self.tol

    def to_local(self):
        """This model as an ordinary fitted :class:`gpusvm.SDCASVC` (e.g. for ``save_model``).

        Returns
        -------
        gpusvm.SDCASVC
            Same ``coef_``, ``intercept_``, ``classes_``, ``alpha_``, ``lam_``, objectives
            and history; ``n_iter_`` counts rounds.
        """
        from ..estimators import SDCASVC as LocalSDCASVC
        est = self._to_local(LocalSDCASVC(tol=self.tol, **self._local_params()),
                             ("alpha_", "primal_objective_", "dual_objective_", "duality_gap_"))
        est.solver_ = "sdca"
        return est


def _column_map(d, cols):
    """``(union, pos)``: the sorted columns some block uses, and each block's ``cols`` as
    positions in ``union`` (the driver keeps ``W`` on ``union`` only: the other columns of
    ``w(alpha)`` stay 0)."""
    union, at = localize_columns(np.concatenate(cols).astype(np.int32), d)  # as a block's
    return union, np.split(at, np.cumsum([c.size for c in cols])[:-1])


def _assemble(m, M, pos, parts, out=None):
    """The blocks' ``(d_k, M)`` parts added, in block order, at their positions ``pos`` into one
    ``(m, M)`` matrix (``out``, or a new one)."""
    if out is None:
        out = np.zeros((m, M))
    else:
        out.fill(0.0)
    for p, part in zip(pos, parts):
        add_rows_at(out, p, np.asarray(part).reshape(p.size, M))
    return out


def _gaps(wsq, lam, n, res):
    """``P(w_c)`` at the broadcast ``W`` (``wsq = ||W_c||^2``), ``D(alpha_c)`` with ``w(alpha) =
    W``, and their differences, per output, from the blocks' loss and dual sums.  Between
    rounds ``W`` is ``w(alpha)`` to float32 rounding (the running gap); the final
    certificate's is ``w(alpha)`` itself, and weak duality makes ``P(w) - D(alpha)`` a
    certificate."""
    loss = np.sum([x["loss"] for x in res], axis=0)
    lin = np.sum([x["dual"] for x in res], axis=0)
    primal = 0.5 * lam * wsq + loss / n
    dual = lin / n - 0.5 * lam * wsq
    return primal, dual, primal - dual


# ================================================================ Pegasos
class PegasosSVC(_DaskLinearBase):
    r"""Linear SVM trained by distributed mini-batch Pegasos (synchronous all-reduce).

    Mini-batch Pegasos (Shalev-Shwartz, Singer & Srebro 2007, Fig. 1, Sec. 2.3;
    docs/algorithms.md for weights, squared hinge and M outputs) with every iteration's batch
    split over the blocks: block ``k`` draws ``k_k = ceil(batch_size n_k / n)`` rows from
    its counter stream and returns its sparse part ``(n_k/(n k_k)) sum_{A_k} g_i y_i x_i``
    of the subgradient at ``W_t``; the driver sums the parts and every replica of ``W``
    applies ``W_{t+1} = Proj((1 - eta_t lam) W_t + eta_t G_t)``, ``eta_t = 1/(lam t)``
    (the NumPy reference backend's step functions): the single-process algorithm with a
    stratified batch, ``W_t`` identical everywhere.

    Parameters
    ----------
    lam, C : float or None, default=None
        ``lam = 1e-4`` unless ``C`` is given, then ``lam = 1/(C n)``.
    loss : {"hinge", "squared_hinge"}, default="hinge"
    class_weight : dict, "balanced" or None, default=None
    multi_class : {"ovr"}, default="ovr"
    batch_size : int or "auto", default="auto"
        Total mini-batch size ``k`` per iteration, split over the blocks; ``"auto"``:
        ``min(1024, n)``.
    max_iter : int or None, default=None
        Iterations ``T``; ``None`` means ten epochs, ``ceil(10 n / k)``.
    local_steps : int, default=1
        ``1``: the synchronous algorithm above (exact mini-batch Pegasos).
        ``H > 1``: local SGD: every block runs ``H`` iterations of its backend's Pegasos
        segment on its rows from the broadcast ``W``, and the driver averages the blocks'
        ``W_k`` with weights ``n_k / n`` (one round trip per ``H`` iterations).
    projection : bool, default=True
        Project onto a ball that holds the optimum, radius ``sqrt(mean(s)/lam)``
        (``sqrt(2 mean(s)/lam)`` for the squared hinge).
    averaging : {"none", "tail"}, default="tail"
        Return the last iterate, or the average of the iterates ``t > T/2``.
    eval_every : int or None, default=None
        Iterations between two evaluations of ``P(W_t)``; ``None``: once per epoch.
    bias, intercept_scaling, n_partitions, rebalance, client, timeout, max_recoveries, direct
        As for :class:`SDCASVC`.
    backend : {"auto", "numba", "numpy", "cupy", "emulated"}, default="auto"
        Backend of the local-steps variant's segments.
    callback : callable or None, default=None
        ``callback(iteration, objective, elapsed)`` at each evaluation (the largest
        objective of the outputs); return ``False`` to stop.
    random_state : int, RandomState, Generator or None, default=None
        Seed of the batches (the counter, keyed by seed and block).
    verbose : int, default=0

    Attributes
    ----------
    coef_, intercept_, classes_, lam_, n_iter_, n_blocks_, n_recoveries_, rebalanced_, \
n_features_in_
        As for :class:`SDCASVC` (``n_iter_`` counts iterations).
    batch_size_ : int
        The batch size ``k`` of the fit (``batch_size`` resolved).
    stop_reason_ : str
        ``"max_iter"`` or ``"callback"``.
    history_ : list of (int, float, float)
        ``(iteration, P(W_t), elapsed seconds)`` (the largest of the outputs'
        objectives); the last entry is that of the returned ``W``.
    objective_ : float or ndarray of shape (n_classes,)
        ``P`` of the returned ``W`` per output.

    Notes
    -----
    One direct call per block and iteration carries the summed subgradient out and the
    block's part back, both sparse; large batches (or ``local_steps``) amortise it.
    After a lost worker the blocks are rebuilt from the driver's ``W_t`` and the
    iteration repeated (counter batches: the result is an undisturbed run's).

    References
    ----------
    S. Shalev-Shwartz, Y. Singer, N. Srebro. Pegasos: Primal Estimated
    sub-GrAdient SOlver for SVM. ICML 2007.
    M. Takáč, A. Bijral, P. Richtárik, N. Srebro. Mini-Batch Primal and Dual
    Methods for SVMs. ICML 2013.
    """

    _parameter_constraints: dict = {
        **_DaskLinearBase._parameter_constraints,
        "batch_size": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "projection": ["boolean"],
        "averaging": [StrOptions({"none", "tail"})],
        "local_steps": [Interval(Integral, 1, None, closed="left")],
        "eval_every": [Interval(Integral, 1, None, closed="left"), None],
    }

    def __init__(self, *, lam=None, C=None, loss="hinge", class_weight=None, multi_class="ovr",
                 batch_size="auto", max_iter=None, local_steps=1, projection=True,
                 averaging="tail", eval_every=None, bias="none", intercept_scaling=1.0,
                 n_partitions=None, rebalance="auto", backend="auto", client=None,
                 timeout=600.0, max_recoveries=3, direct=True, callback=None,
                 random_state=None, verbose=0):
        self.lam = lam
        self.C = C
        self.loss = loss
        self.class_weight = class_weight
        self.multi_class = multi_class
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.local_steps = local_steps
        self.projection = projection
        self.averaging = averaging
        self.eval_every = eval_every
        self.bias = bias
        self.intercept_scaling = intercept_scaling
        self.n_partitions = n_partitions
        self.rebalance = rebalance
        self.backend = backend
        self.client = client
        self.timeout = timeout
        self.max_recoveries = max_recoveries
        self.direct = direct
        self.callback = callback
        self.random_state = random_state
        self.verbose = verbose

    @_fit_context(prefer_skip_nested_validation=True)
    @_client_current
    def fit(self, X, y, sample_weight=None):
        """Fit by distributed mini-batch Pegasos.

        Parameters
        ----------
        X, y, sample_weight
            As for :meth:`SDCASVC.fit`.

        Returns
        -------
        self : PegasosSVC
        """
        client, sources, Y, s = self._begin(X, y, sample_weight)
        n, M = Y.shape
        k = self.batch_size_ = min(1024, n) if self.batch_size == "auto" else self.batch_size
        if k > n:
            raise ValueError(f"batch_size={k} exceeds the number of samples n={n}; choose "
                             f"1 <= batch_size <= {n}")
        shares = [min(src["rows"].size, max(1, math.ceil(k * src["rows"].size / n)))
                  for src in sources]
        lam = self.lam_ = resolve_lam(self.lam, self.C, n)
        mean_s = 1.0 if s is None else float(s.mean())
        radius = math.sqrt((2.0 if self.loss == "squared_hinge" else 1.0) * mean_s / lam)
        seed = self._seed_int()
        T = self.max_iter if self.max_iter is not None else math.ceil(10 * n / k)
        every = self.eval_every if self.eval_every is not None else max(1, math.ceil(n / k))
        self.n_blocks_ = len(sources)
        state = {"V": None, "a": None}   # the replica new blocks start from

        def make(t):
            def maker(b, data):
                return PegasosBlock, (data, sources[b]["Y"], sources[b]["s"], b, n, shares[b],
                                      seed, self.bias, float(self.intercept_scaling), self.loss,
                                      self.backend, state["V"], state["a"], t)
            return maker

        bar = self._bar(T, "it", "gpusvm dask pegasos")
        t0 = time.perf_counter()
        history = []
        ctx = {"client": client, "sources": sources, "make": make, "state": state, "n": n,
               "lam": lam, "radius": radius, "project": bool(self.projection), "T": T,
               "every": every, "tail_from": T // 2 + 1 if self.averaging == "tail" else None,
               "bar": bar, "t0": t0, "history": history}
        try:
            blocks = self._place(client, sources, make(1))
            infos = self._gather([blk.info() for blk in blocks])
            ctx["cols"] = cols = [info[3] for info in infos]
            loop = self._sync_loop if self.local_steps == 1 else self._local_loop
            t, stop, W, blocks = loop(blocks, infos[0][1], M, ctx)
            while True:
                try:
                    res = self._gather([blk.loss_sum(W[cols[b]]) for b, blk in enumerate(blocks)])
                    break
                except Exception as exc:
                    blocks = self._rebuild(exc, "the final evaluation", blocks, client, sources,
                                           make(t))
        finally:
            self._end(bar)
        objective = 0.5 * lam * np.einsum("ij,ij->j", W, W) + np.sum(res, axis=0) / n
        history.append((t - 1, float(objective.max()), time.perf_counter() - t0))
        self._set_solution(W if M > 1 else W[:, 0], 0.0)
        self.objective_ = float(objective[0]) if M == 1 else objective
        self.n_iter_ = t - 1
        self.history_ = history
        self.stop_reason_ = stop
        return self

    def _evaluation(self, t, objective, ctx):
        """Record an evaluation; False when the callback stops the fit."""
        elapsed = time.perf_counter() - ctx["t0"]
        ctx["history"].append((t - 1, objective, elapsed))
        if ctx["bar"] is not None:
            ctx["bar"].set_postfix(objective=f"{objective:.6g}")
        return not (self.callback is not None and
                    self.callback(t - 1, objective, elapsed) is False)

    def _sync_loop(self, blocks, d, M, ctx):
        """Synchronous all-reduce iterations (one call per block and iteration); the driver's
        replica of ``W`` is the reference backend's state without rows.  Returns ``t``, the
        stop reason, the last or averaged ``W`` and the blocks (rebuilt ones after a loss)."""
        stop, update, t = "max_iter", None, 1
        lam, n, tail_from = ctx["lam"], ctx["n"], ctx["tail_from"]
        radius = ctx["radius"] if ctx["project"] else 0.0
        be = NumpyBackend(sp.csr_matrix((0, d)), np.zeros((0, M)))
        be.init_state_m(averaging=tail_from is not None)
        allreduce = _AllReduce(d, M)
        while t <= ctx["T"]:
            evaluate = t > 1 and (t - 1) % ctx["every"] == 0
            try:
                res = self._gather([blk.iterate(t, update, lam, evaluate) for blk in blocks])
            except Exception as exc:
                ctx["state"]["V"], ctx["state"]["a"] = be.V, be.sm[S_A].copy()
                blocks = self._rebuild(exc, f"iteration {t}", blocks, ctx["client"],
                                       ctx["sources"], ctx["make"](t))
                update = None
                continue
            if evaluate:
                a = be.sm[S_A]
                objective = 0.5 * lam * a * a * np.einsum("ij,ij->j", be.V, be.V) + \
                    np.sum([x["loss"] for x in res], axis=0) / n
                if not self._evaluation(t, float(objective.max()), ctx):
                    stop = "callback"
                    break
            idx, agg = allreduce(res)
            update = driver_step(be, t, lam, idx, agg, radius,
                                 tail_from is not None and t + 1 >= tail_from)  # w_{t+1}
            t += 1
            if ctx["bar"] is not None:
                ctx["bar"].update(1)
        return t, stop, be.output_m(tail_from is not None)[0], blocks

    def _local_loop(self, blocks, d, M, ctx):
        """Local-steps variant: ``local_steps`` iterations per block, then a weighted average."""
        stop, t = "max_iter", 1
        w_sum, n_sum = np.zeros((d, M)), 0
        n, cols, T, every = ctx["n"], ctx["cols"], ctx["T"], ctx["every"]
        weights = [src["rows"].size / n for src in ctx["sources"]]
        lam, radius, project = ctx["lam"], ctx["radius"], ctx["project"]
        W = np.zeros((d, M))
        while t <= T:
            H = min(self.local_steps, T - t + 1)
            try:
                res = self._gather([blk.local_round(W, t, H, lam, radius, project)
                                    for blk in blocks])
            except Exception as exc:
                ctx["state"]["V"], ctx["state"]["a"] = W, np.ones(M)
                blocks = self._rebuild(exc, f"iteration {t}", blocks, ctx["client"],
                                       ctx["sources"], ctx["make"](t))
                continue
            W = weights[0] * res[0]["w"]
            for b in range(1, len(res)):
                W += weights[b] * res[b]["w"]
            t_before, t = t, t + H
            if ctx["tail_from"] is not None and t >= ctx["tail_from"]:
                w_sum += H * W
                n_sum += H
            if ctx["bar"] is not None:
                ctx["bar"].update(H)
            if (t - 1) // every > (t_before - 1) // every and t <= T:
                try:
                    loss = np.sum(self._gather([blk.loss_sum(W[cols[b]])
                                                for b, blk in enumerate(blocks)]), axis=0)
                except Exception as exc:
                    ctx["state"]["V"], ctx["state"]["a"] = W, np.ones(M)
                    blocks = self._rebuild(exc, f"iteration {t}", blocks, ctx["client"],
                                           ctx["sources"], ctx["make"](t))
                    continue
                objective = 0.5 * lam * np.einsum("ij,ij->j", W, W) + loss / n
                if not self._evaluation(t, float(objective.max()), ctx):
                    stop = "callback"
                    break
        return t, stop, w_sum / n_sum if n_sum else W, blocks

    def to_local(self):
        """This model as an ordinary fitted :class:`gpusvm.PegasosSVC` (e.g. for ``save_model``).

        Returns
        -------
        gpusvm.PegasosSVC
        """
        from ..estimators import PegasosSVC as LocalPegasosSVC
        return self._to_local(LocalPegasosSVC(batch_size=self.batch_size_, projection=self.projection,
                                              averaging=self.averaging, **self._local_params()),
                              ("batch_size_",))


class _AllReduce:
    """Sum the blocks' sparse parts, in block order (deterministic), into one sparse matrix.

    A dense scratch of ``d x M`` (kept zero between calls) makes a sum cost
    O(nnz of the parts M) plus one O(d / 8) scan of a boolean mask.
    """

    def __init__(self, d, M):
        self.acc = np.zeros((d, M))
        self.mark = np.zeros(d, dtype=bool)

    def __call__(self, res):
        if len(res) == 1:
            return res[0]["idx"], res[0]["agg"]
        for x in res:  # indices are unique within one block's part
            self.acc[x["idx"]] += x["agg"]
            self.mark[x["idx"]] = True
        idx = np.flatnonzero(self.mark)
        vals = self.acc[idx]
        self.acc[idx] = 0.0
        self.mark[idx] = False
        return idx, vals
