"""Distributed estimators: CoCoA+ SDCA and all-reduce mini-batch Pegasos over a dask cluster."""

from __future__ import annotations

import math
import time
import warnings
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.base import _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_array, check_is_fitted

from ..estimators import _LinearSVCBase, binary_labels
from ._blocks import PegasosBlock, SDCABlock, StaleBlockError

#: bias modes of the distributed estimators (both have a box-constrained dual / a plain step)
DASK_BIAS_MODES = ("none", "augmented")


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


def _lost_error(exc) -> bool:
    """Whether ``exc`` means "a worker or its actor is gone" (recoverable), not a bug."""
    if isinstance(exc, (OSError, StaleBlockError, _WorkerLost)):
        return True
    return isinstance(exc, RuntimeError) and "Actor was lost" in str(exc)


class _DaskLinearBase(_LinearSVCBase):
    """Data placement, actors, fault handling and prediction of the distributed estimators."""

    _parameter_constraints: dict = {
        "lam": [Interval(Real, 0, None, closed="neither")],
        "max_iter": [Interval(Integral, 1, None, closed="left"), None],
        "bias": [StrOptions(set(DASK_BIAS_MODES))],
        "intercept_scaling": [Interval(Real, 0, None, closed="neither")],
        "n_partitions": [Interval(Integral, 1, None, closed="left"), None],
        "client": "no_validation",
        "timeout": [Interval(Real, 0, None, closed="neither")],
        "max_recoveries": [Interval(Integral, 0, None, closed="left")],
        "direct": ["boolean"],
        "callback": [callable, None],
        "random_state": ["random_state"],
        "verbose": ["verbose"],
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
        info = client.scheduler_info(n_workers=-1) if _accepts_n_workers(client) \
            else client.scheduler_info()
        excluded = getattr(self, "_excluded", set())
        workers = sorted(a for a in info["workers"] if a not in excluded)
        if not workers and excluded:
            deadline = time.monotonic() + self.timeout
            while not workers and time.monotonic() < deadline:
                time.sleep(0.5)
                info = client.scheduler_info(n_workers=-1) if _accepts_n_workers(client) \
                    else client.scheduler_info()
                workers = sorted(a for a in info["workers"] if a not in excluded)
        if not workers:
            raise DistributedFitError(
                "the dask cluster has no workers; start some (e.g. LocalCluster(n_workers=2)) "
                "or wait for them with client.wait_for_workers(...)")
        return workers

    def _split(self, X, y, client):
        """Validate the input and cut it into row blocks (sources) and their labels."""
        name = type(self).__name__
        if _is_dask_array(X):
            if X.ndim != 2:
                raise ValueError(f"{name} expects a 2-D dask array X, got {X.ndim} dimensions")
            if any(math.isnan(c) for c in X.chunks[0]):
                raise ValueError(
                    "X has unknown chunk sizes (NaN in X.chunks); call X.compute_chunk_sizes() "
                    "first")
            if len(X.chunks[1]) != 1:
                X = X.rechunk({1: -1})
            y_local = np.asarray(y.compute() if _is_dask_array(y) else y)
            if y_local.ndim != 1 or y_local.shape[0] != X.shape[0]:
                raise ValueError(f"y must have shape ({X.shape[0]},) to match X's rows, got "
                                 f"{y_local.shape}")
            classes, y_pm = binary_labels(y_local, name)
            bounds = np.concatenate([[0], np.cumsum(X.chunks[0])]).astype(int)
            parts = X.to_delayed().ravel().tolist()
            futures = client.compute(parts)
            sources = []
            for b, fut in enumerate(futures):
                rows = np.arange(bounds[b], bounds[b + 1])
                if rows.size == 0:
                    continue
                sources.append({"rows": rows, "future": fut, "local": None})
            d = X.shape[1]
        else:
            Xc = check_array(X, accept_sparse="csr", dtype=[np.float64, np.float32],
                             input_name="X")
            y_local = np.asarray(y)
            if y_local.ndim != 1 or y_local.shape[0] != Xc.shape[0]:
                raise ValueError(f"y must have shape ({Xc.shape[0]},) to match X's rows, got "
                                 f"{y_local.shape}")
            classes, y_pm = binary_labels(y_local, name)
            n = Xc.shape[0]
            n_workers = len(self._workers(client))
            P = self.n_partitions if self.n_partitions is not None else n_workers
            if P > n:
                raise ValueError(f"n_partitions={P} exceeds the number of samples n={n}")
            Xc = sp.csr_matrix(Xc) if not sp.issparse(Xc) else Xc.tocsr()
            sources = []
            for b in range(P):
                rows = np.arange(b, n, P)  # strided: sorted files still give mixed blocks
                sources.append({"rows": rows, "future": None, "local": Xc[rows]})
            d = Xc.shape[1]
        self.classes_ = classes
        self.n_features_in_ = d
        for s in sources:
            s["y"] = y_pm[s["rows"]]
        return sources, y_pm

    def _place(self, client, sources, make):
        """Create one actor per block, spread over the current workers.

        ``make(b, data)`` returns ``(cls, args)``; scattered blocks are
        (re)scattered from the driver's copy, dask-array blocks are taken from
        their (recomputable) futures.
        """
        workers = self._workers(client)
        futures = []
        for b, s in enumerate(sources):
            addr = workers[b % len(workers)]
            if s["local"] is not None:
                data = client.scatter(s["local"], workers=[addr], direct=True, hash=False)
            else:
                data = s["future"]
            cls, args = make(b, data)
            futures.append(client.submit(cls, *args, actor=True, workers=[addr],
                                         allow_other_workers=False, pure=False))
        actors = []
        for fut in futures:
            actors.append(fut.result(timeout=self.timeout))
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

    def _recover(self, exc, where, blocks):
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

    def _release(self):
        for f in getattr(self, "_actor_futures", []):
            f.release()
        self._actor_futures = []

    def _restore_client(self):
        for bound, value in reversed(getattr(self, "_direct_restore", [])):
            bound.direct_to_workers = value
        self._direct_restore = []
        self._excluded = set()

    def _seed_int(self):
        seed = self._seed()
        if seed is None:
            seed = int(np.random.SeedSequence().generate_state(1)[0])
        return int(seed)

    # ------------------------------------------------------------ prediction
    def decision_function(self, X):
        """Signed distance ``<w, x> + b``; positive means ``classes_[1]``.

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array} of shape (n_samples, n_features)
            A dask array gives a lazy dask array of scores (one chunk per row chunk).

        Returns
        -------
        ndarray or dask.array.Array of shape (n_samples,)
        """
        check_is_fitted(self)
        if _is_dask_array(X):
            if X.shape[1] != self.n_features_in_:
                raise ValueError(f"X has {X.shape[1]} features, but {type(self).__name__} is "
                                 f"expecting {self.n_features_in_} features as input")
            coef, b = self.coef_[0], float(self.intercept_[0])
            X = X.rechunk({1: -1}) if len(X.chunks[1]) != 1 else X
            return X.map_blocks(_block_scores, coef, b, drop_axis=1, dtype=np.float64)
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
        scores = self.decision_function(X)
        if _is_dask_array(X):
            classes = self.classes_
            return scores.map_blocks(lambda s: classes[(s > 0).astype(int)],
                                     dtype=classes.dtype)
        return self.classes_[(scores > 0).astype(int)]

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
        pred = self.predict(X)
        if _is_dask_array(pred):
            pred = pred.compute()
        if _is_dask_array(y):
            y = y.compute()
        return float(accuracy_score(y, pred, sample_weight=sample_weight))

    def _local_params(self):
        return {"lam": self.lam, "bias": self.bias, "intercept_scaling": self.intercept_scaling,
                "dtype": "float64", "backend": "auto"}

    def _to_local(self, est, names):
        check_is_fitted(self)
        for attr in ("coef_", "intercept_", "classes_", "n_features_in_", "n_iter_", "history_",
                     "stop_reason_", *names):
            setattr(est, attr, getattr(self, attr))
        return est


def _accepts_n_workers(client) -> bool:
    import inspect
    try:
        return "n_workers" in inspect.signature(client.scheduler_info).parameters
    except (TypeError, ValueError):  # pragma: no cover
        return False


def _block_scores(block, coef, b):
    return np.asarray(block @ coef).ravel().astype(np.float64) + b


# ================================================================ SDCA (CoCoA+)
class SDCASVC(_DaskLinearBase):
    r"""Linear SVM trained by distributed SDCA (CoCoA+, "adding"), with a duality-gap certificate.

    Solves the SVM primal / dual pair of :class:`gpusvm.SDCASVC`

    .. math::

        P(w) = \frac{\lambda}{2}\|w\|^2 + \frac{1}{n}\sum_i \max(0, 1 - y_i \langle w, x_i\rangle),
        \quad
        D(\alpha) = \frac1n\sum_i \alpha_i - \frac{\lambda}{2}\|w(\alpha)\|^2

    on a dask cluster by CoCoA+ (Ma et al. 2015, Algorithm 1 with
    ``gamma = 1`` and ``sigma' = K``; Smith et al. 2018, Algorithm 1): the
    rows are cut into ``K`` blocks, each resident on a worker with its dual
    variables; a round broadcasts ``w``, every block runs ``local_epochs``
    passes of SDCA on its local subproblem (eq. (9) of Ma et al.; with
    ``sigma' = K`` exactly SDCA with ``lam / K`` and the global ``n``), and
    the driver adds the blocks' updates, ``w <- w + sum_k u_k``.  The global
    duality gap is assembled from the blocks' hinge-loss and ``alpha`` sums at
    ``w = w(alpha)``, which is rebuilt from the blocks' ``X_k^T(alpha_k y_k)``
    before every certificate, so rounding drift cannot invalidate it.  The fit
    stops once the gap is ``<= tol`` (a certificate of ``P(w) - P(w*) <= tol``).

    Parameters
    ----------
    lam : float, default=1e-4
        Regularisation parameter ``lambda > 0`` (LinearSVC's ``C = 1/(lam n)``).
    tol : float, default=1e-3
        Stop at the first certificate with duality gap ``<= tol``.
    max_iter : int or None, default=None
        Maximum number of rounds; ``None`` means 200.
    local_epochs : float, default=1.0
        ``H``: coordinate steps per block and round, in passes over the block
        (``round(H n_k)`` steps over fresh permutations).
    eval_every : int, default=1
        Rounds between two certificates (and recomputations of ``w(alpha)``).
    bias : {"none", "augmented"}, default="none"
        No intercept, or a constant feature ``intercept_scaling`` appended to every
        row (regularised intercept).  The default differs from
        :class:`gpusvm.SDCASVC`'s: the shared column slows CoCoA+ down (see Notes).
    intercept_scaling : float, default=1.0
    n_partitions : int or None, default=None
        Blocks ``K`` for in-memory input (NumPy / SciPy); ``None``: one per worker.
        Rows are dealt out strided (row ``i`` to block ``i mod K``).  A dask
        array keeps its row chunks as blocks.
    client : distributed.Client or None, default=None
        ``None`` uses the current client (``distributed.get_client()``).
    timeout : float, default=600
        Seconds a block may take to answer one call before the fit fails.
    max_recoveries : int, default=3
        Lost workers survived per fit; then :class:`DistributedFitError`.
    direct : bool, default=True
        Send the actor calls straight to the workers (the client's
        ``direct_to_workers`` is switched on for the duration of the fit, then
        restored).  Through the scheduler (``False``) every payload is relayed
        and pickled twice: measured 3.5x slower for a 1.6 MB call on a
        LocalCluster.  Use ``False`` only when the driver cannot reach the workers.
    callback : callable or None, default=None
        ``callback(round, gap, elapsed)`` after each certificate; return ``False``
        to stop.
    random_state : int, RandomState, Generator or None, default=None
        Seed of the blocks' permutations (each block draws from a counter-based
        stream keyed by seed, block and round: the same seed and partition give
        the same model, whatever the workers).
    verbose : int, default=0
        A progress bar per round with the live duality gap when > 0.

    Attributes
    ----------
    coef_ : ndarray of shape (1, n_features)
    intercept_ : ndarray of shape (1,)
    classes_ : ndarray of shape (2,)
    alpha_ : ndarray of shape (n_samples,)
        Dual variables in ``[0, 1]``, in the order of the training rows.
    n_iter_ : int
        Rounds performed.
    history_ : list of (int, float, float, float, float)
        ``(round, P, D, gap, elapsed seconds)`` at every certificate.
    primal_objective_, dual_objective_, duality_gap_ : float
        At the returned ``w = w(alpha_)``.
    n_blocks_ : int
        ``K``.
    bytes_per_round_ : int
        Bytes of ``w`` sent to and received from the blocks per round
        (``2 K d 8``, computed) plus the ``dalpha`` returned (``8 n``).
    n_recoveries_ : int
        Workers lost and survived.
    worker_seconds_ : float
        Sum over rounds of the slowest block's compute time (the rest of the
        wall time is communication and driver work).
    stop_reason_ : str
        ``"tol"``, ``"max_iter"`` or ``"callback"``.
    n_features_in_ : int

    Notes
    -----
    *Residency.*  Each block lives in a dask actor pinned to one worker
    (``client.submit(..., actor=True, workers=[addr])``): the block's rows and
    ``alpha_k`` stay in the worker's memory across rounds, and a round is one
    direct call per block (no task graph).  Actors rather than pinned futures
    (``client.submit(step, state_future, workers=...)`` every round) because a
    round is then one message per block and direction, without a task through
    the scheduler and without new state futures per round; the price is that
    an actor dies with its worker, which the fault handling below covers.
    The driver keeps a copy of every
    block's committed ``alpha_k`` (``dalpha`` comes back each round) and, for
    in-memory input, of its rows.

    *Rounds against K.*  ``sigma' = K`` is the safe choice for any data, and
    the local steps are those of SDCA with ``lam / K``: more blocks mean more
    rounds for the same ``tol`` (imdb, ``lam = 1e-4``, ``H = 1``: 5 rounds with
    K = 1, 9 with 2, 30 with 8, 144 with 32; BENCHMARKS.md).  A feature shared
    by all rows, such as the ``bias="augmented"`` column, slows CoCoA+ down much
    more (rcv1_small, ``lam = 1e-4``, K = 4: gap 0.013 after 200 rounds with
    ``bias="augmented"``, 58 rounds to 1e-3 with ``bias="none"``), and so do
    blocks with different label mixes (contiguous chunks of a sorted file):
    shuffle the rows, keep ``K`` to the number of workers, and prefer
    ``bias="none"`` on centred data.

    *Faults.*  When a worker is lost, the fit rebuilds every block on the
    remaining workers from the last committed round (rows re-scattered from
    the driver's copy, or recomputed by dask from a dask array's graph,
    ``alpha`` from the driver's copy) and repeats that round: the result is the
    one an undisturbed run gives.  Every call carries the round number, so a
    block whose state is not the committed one is refused, never used.

    References
    ----------
    C. Ma, V. Smith, M. Jaggi, M. I. Jordan, P. Richtárik, M. Takáč. Adding vs.
    Averaging in Distributed Primal-Dual Optimization. ICML 2015.
    V. Smith, S. Forte, C. Ma, M. Takáč, M. I. Jordan, M. Jaggi. CoCoA: A General
    Framework for Communication-Efficient Distributed Optimization. JMLR 18(230), 2018.

    Examples
    --------
    >>> from distributed import Client, LocalCluster            # doctest: +SKIP
    >>> from gpusvm.dask import SDCASVC                          # doctest: +SKIP
    >>> client = Client(LocalCluster(n_workers=2))               # doctest: +SKIP
    >>> clf = SDCASVC(lam=1e-4, tol=1e-3).fit(X, y)              # doctest: +SKIP
    >>> clf.duality_gap_ <= 1e-3                                 # doctest: +SKIP
    True
    """

    _parameter_constraints: dict = {
        **_DaskLinearBase._parameter_constraints,
        "tol": [Interval(Real, 0, None, closed="left")],
        "local_epochs": [Interval(Real, 0, None, closed="neither")],
        "eval_every": [Interval(Integral, 1, None, closed="left")],
    }

    def __init__(self, *, lam=1e-4, tol=1e-3, max_iter=None, local_epochs=1.0, eval_every=1,
                 bias="none", intercept_scaling=1.0, n_partitions=None, client=None,
                 timeout=600.0, max_recoveries=3, direct=True, callback=None, random_state=None,
                 verbose=0):
        self.lam = lam
        self.tol = tol
        self.max_iter = max_iter
        self.local_epochs = local_epochs
        self.eval_every = eval_every
        self.bias = bias
        self.intercept_scaling = intercept_scaling
        self.n_partitions = n_partitions
        self.client = client
        self.timeout = timeout
        self.max_recoveries = max_recoveries
        self.direct = direct
        self.callback = callback
        self.random_state = random_state
        self.verbose = verbose

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        """Fit by CoCoA+ rounds until the certified duality gap is ``<= tol``.

        Parameters
        ----------
        X : {dask array, sparse matrix, array-like} of shape (n_samples, n_features)
            A dask array of row chunks (each chunk a ``scipy.sparse`` matrix or a
            NumPy array; all columns in one chunk), or in-memory data that is
            cut into ``n_partitions`` blocks.
        y : dask array or array-like of shape (n_samples,)
            Two class labels.

        Returns
        -------
        self : SDCASVC
        """
        client = self._get_client()
        sources, y_pm = self._split(X, y, client)
        n = y_pm.shape[0]
        K = len(sources)
        lam = float(self.lam)
        seed = self._seed_int()
        max_rounds = self.max_iter if self.max_iter is not None else 200
        every = int(self.eval_every)
        self.n_recoveries_ = 0
        self.n_blocks_ = K
        self._direct_restore = []
        self._excluded = set()
        self.worker_seconds_ = 0.0
        steps = [max(1, int(round(self.local_epochs * s["rows"].size))) for s in sources]
        committed = [None] * K  # driver copy of each block's committed alpha

        def make(r):
            def maker(b, data):
                return SDCABlock, (data, sources[b]["y"], b, n, lam, K, seed, self.bias,
                                   float(self.intercept_scaling), committed[b], r)
            return maker

        from tqdm.auto import tqdm
        bar = tqdm(total=max_rounds, unit="round", desc="gpusvm dask sdca") if self.verbose \
            else None
        t0 = time.perf_counter()
        history = []
        stop = "max_iter"
        try:
            blocks = self._place(client, sources, make(0))
            infos = self._gather([blk.certify(None, 0) for blk in blocks])
            d = infos[0]["xty"].shape[0]
            committed = [np.asarray(blk_alpha) for blk_alpha in
                         self._gather([blk.alpha_copy() for blk in blocks])]
            w = np.zeros(d)
            r = 0
            while r < max_rounds:
                cert = r > 0 and r % every == 0
                recompute = (r + 1) % every == 0 or r + 1 == max_rounds
                try:
                    res = self._gather([blk.step(w, r, steps[b], cert, recompute)
                                        for b, blk in enumerate(blocks)])
                except Exception as exc:
                    if not _lost_error(exc):
                        raise
                    self._recover(exc, f"round {r}", blocks)
                    blocks = self._place(client, sources, make(r))
                    continue
                if cert:
                    primal, dual, gap = _gap(w, lam, n, res)
                    elapsed = time.perf_counter() - t0
                    history.append((r, primal, dual, gap, elapsed))
                    if bar is not None:
                        bar.set_postfix(primal=f"{primal:.6g}", gap=f"{gap:.3g}")
                    if gap <= self.tol:
                        stop = "tol"
                        break
                    if self.callback is not None and self.callback(r, gap, elapsed) is False:
                        stop = "callback"
                        break
                self.worker_seconds_ += max(x["seconds"] for x in res)
                for b in range(K):
                    committed[b] = np.clip(committed[b] + res[b]["dalpha"], 0.0, 1.0)
                if recompute:
                    w = _sum_blocks([x["xty"] for x in res]) / (lam * n)
                else:
                    w = w + _sum_blocks([x["u"] for x in res])
                r += 1
                if bar is not None:
                    bar.update(1)
            if stop == "max_iter":
                # final certificate at w(alpha) (w is exact: the last round recomputed it)
                while True:
                    try:
                        res = self._gather([blk.certify(w, r) for blk in blocks])
                        break
                    except Exception as exc:
                        if not _lost_error(exc):
                            raise
                        self._recover(exc, "the final certificate", blocks)
                        blocks = self._place(client, sources, make(r))
                primal, dual, gap = _gap(w, lam, n, res)
                history.append((r, primal, dual, gap, time.perf_counter() - t0))
                if gap <= self.tol:
                    stop = "tol"
        finally:
            self._release()
            self._restore_client()
            if bar is not None:
                bar.close()
        alpha = np.empty(n)
        for b, s in enumerate(sources):
            alpha[s["rows"]] = committed[b]
        self.alpha_ = alpha
        self._set_solution(w, 0.0)
        self.n_iter_ = r
        self.history_ = history
        self.stop_reason_ = stop
        self.primal_objective_, self.dual_objective_, self.duality_gap_ = history[-1][1:4]
        self.bytes_per_round_ = int(2 * K * d * 8 + 8 * n)
        if stop == "max_iter":
            warnings.warn(
                f"distributed SDCA stopped after max_iter={max_rounds} rounds with duality gap "
                f"{self.duality_gap_:.3g} > tol={self.tol}; increase max_iter or local_epochs",
                ConvergenceWarning, stacklevel=2)
        return self

    def to_local(self):
        """This model as an ordinary fitted :class:`gpusvm.SDCASVC` (e.g. for ``save_model``).

        Returns
        -------
        gpusvm.SDCASVC
            Same ``coef_``, ``intercept_``, ``classes_``, ``alpha_``, objectives and
            history; ``n_iter_`` counts rounds.
        """
        from ..estimators_sdca import SDCASVC as LocalSDCASVC
        est = LocalSDCASVC(tol=self.tol, **self._local_params())
        return self._to_local(est, ("alpha_", "primal_objective_", "dual_objective_",
                                    "duality_gap_"))


def _sum_blocks(vectors):
    out = np.array(vectors[0], dtype=np.float64, copy=True)
    for v in vectors[1:]:
        out += v
    return out


def _gap(w, lam, n, res):
    """``P(w)``, ``D(alpha)``, gap from the blocks' hinge and alpha sums (w = w(alpha))."""
    hinge = math.fsum(x["hinge"] for x in res)
    asum = math.fsum(x["asum"] for x in res)
    reg = 0.5 * lam * float(w @ w)
    primal = reg + hinge / n
    dual = asum / n - reg
    return primal, dual, primal - dual


# ================================================================ Pegasos
class PegasosSVC(_DaskLinearBase):
    r"""Linear SVM trained by distributed mini-batch Pegasos (synchronous all-reduce).

    Mini-batch Pegasos (Shalev-Shwartz, Singer & Srebro 2007, Fig. 1 with the
    mini-batch of Sec. 2.3) in which every iteration's batch is split over the
    blocks: block ``k`` draws ``k_k = ceil(batch_size n_k / n)`` of its rows,
    computes its part ``(n_k/(n k_k)) sum_{A_k^+} y_i x_i`` of the subgradient
    at the common ``w_t`` as a sparse vector, the driver sums the parts
    (all-reduce) and every replica of ``w`` (one per block, one on the driver)
    applies the same step ``w_{t+1} = Proj((1 - eta_t lam) w_t + eta_t g_t)``,
    ``eta_t = 1/(lam t)``.  This is the single-process algorithm with a batch
    stratified over the blocks (an unbiased subgradient, as Pegasos' analysis
    requires), not a local-steps approximation: ``w_t`` is identical on all
    replicas at every iteration.

    Parameters
    ----------
    lam : float, default=1e-4
    batch_size : int, default=1024
        Total mini-batch size ``k`` per iteration, split over the blocks.
    max_iter : int or None, default=None
        Iterations ``T``; ``None`` means ten epochs, ``ceil(10 n / k)``.
    local_steps : int, default=1
        ``1``: the synchronous algorithm above (exact mini-batch Pegasos).
        ``H > 1``: the local-steps variant ("local SGD" / iterate averaging):
        every block runs ``H`` Pegasos iterations on its own rows (batch
        ``k_k``, the global step ``eta_t``) from the broadcast ``w``, then the
        driver averages the blocks' ``w_k`` with weights ``n_k / n``.  One round
        trip per ``H`` iterations instead of one per iteration, at the price of
        dense ``w`` messages (``8 d`` bytes per block and direction) and of an
        approximation of the synchronous iteration (blocks drift apart between
        averages); see BENCHMARKS.md for the measured trade-off.
    projection : bool, default=True
        Project onto the ball of radius ``1/sqrt(lam)`` (Fig. 1, step 5).
    averaging : {"none", "tail"}, default="tail"
        Return the last iterate, or the average of the iterates ``t > T/2``
        (Takáč et al. 2013, Theorem 1), kept on the driver.
    eval_every : int or None, default=None
        Iterations between two evaluations of ``P(w_t)`` (``history_``,
        callback); ``None`` means once per epoch.
    bias : {"none", "augmented"}, default="none"
        As for :class:`SDCASVC`.
    intercept_scaling : float, default=1.0
    n_partitions : int or None, default=None
    client : distributed.Client or None, default=None
    timeout : float, default=600
    max_recoveries : int, default=3
    direct : bool, default=True
        As for :class:`SDCASVC`.
    callback : callable or None, default=None
        ``callback(iteration, objective, elapsed)`` at each evaluation; return
        ``False`` to stop.
    random_state : int, RandomState, Generator or None, default=None
        Seed of the batches (counter-based per block and iteration).
    verbose : int, default=0
        Progress bar with the live objective when > 0.

    Attributes
    ----------
    coef_ : ndarray of shape (1, n_features)
    intercept_ : ndarray of shape (1,)
    classes_ : ndarray of shape (2,)
    n_iter_ : int
    history_ : list of (int, float, float)
        ``(iteration, P(w_t), elapsed seconds)``; the last entry is ``P`` of the
        returned (possibly averaged) ``w``.
    objective_ : float
        ``P`` of the returned ``w``.
    n_blocks_ : int
    n_recoveries_ : int
    stop_reason_ : str
    n_features_in_ : int

    Notes
    -----
    *Communication.*  One direct actor call per block and iteration carries
    the previous iteration's summed subgradient and returns the block's part:
    both sparse, ``O(nnz of the batch)`` values, never ``O(d)``.  The cost of
    an iteration is therefore a network round trip plus the batch's work;
    several iterations cannot be fused into one round without changing the
    algorithm (iteration ``t + 1``'s active set depends on every block's
    part of step ``t``), so large batches are what amortises the round trip.

    *Measured* (news20, ``lam = 1e-4``, 2 workers, batch 256, BENCHMARKS.md):
    synchronous, 6,000 iterations, ``P - P* <= 1.4e-3`` in 166 s (28 ms per
    iteration, nearly all of it the round trip); ``local_steps=50``, 6,000
    iterations, ``<= 1.9e-3`` in 56 s.

    *Faults.*  As for :class:`SDCASVC`: blocks are rebuilt from the driver's
    replica of ``w_t`` and the interrupted iteration is repeated (the batches
    are counter-based, so the result equals an undisturbed run's).

    References
    ----------
    S. Shalev-Shwartz, Y. Singer, N. Srebro. Pegasos: Primal Estimated
    sub-GrAdient SOlver for SVM. ICML 2007.
    M. Takáč, A. Bijral, P. Richtárik, N. Srebro. Mini-Batch Primal and Dual
    Methods for SVMs. ICML 2013.
    """

    _parameter_constraints: dict = {
        **_DaskLinearBase._parameter_constraints,
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "projection": ["boolean"],
        "averaging": [StrOptions({"none", "tail"})],
        "local_steps": [Interval(Integral, 1, None, closed="left")],
        "eval_every": [Interval(Integral, 1, None, closed="left"), None],
    }

    def __init__(self, *, lam=1e-4, batch_size=1024, max_iter=None, local_steps=1,
                 projection=True, averaging="tail", eval_every=None, bias="none",
                 intercept_scaling=1.0,
                 n_partitions=None, client=None, timeout=600.0, max_recoveries=3, direct=True,
                 callback=None, random_state=None, verbose=0):
        self.lam = lam
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.local_steps = local_steps
        self.projection = projection
        self.averaging = averaging
        self.eval_every = eval_every
        self.bias = bias
        self.intercept_scaling = intercept_scaling
        self.n_partitions = n_partitions
        self.client = client
        self.timeout = timeout
        self.max_recoveries = max_recoveries
        self.direct = direct
        self.callback = callback
        self.random_state = random_state
        self.verbose = verbose

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        """Fit by synchronous distributed mini-batch Pegasos.

        Parameters
        ----------
        X : {dask array, sparse matrix, array-like} of shape (n_samples, n_features)
        y : dask array or array-like of shape (n_samples,)

        Returns
        -------
        self : PegasosSVC
        """
        client = self._get_client()
        sources, y_pm = self._split(X, y, client)
        n = y_pm.shape[0]
        k = self.batch_size
        if k > n:
            raise ValueError(f"batch_size={k} exceeds the number of samples n={n}; choose "
                             f"1 <= batch_size <= {n}")
        K = len(sources)
        shares = [min(s["rows"].size, max(1, math.ceil(k * s["rows"].size / n)))
                  for s in sources]
        lam = float(self.lam)
        radius = 1.0 / math.sqrt(lam)
        project = bool(self.projection)
        seed = self._seed_int()
        T = self.max_iter if self.max_iter is not None else math.ceil(10 * n / k)
        every = self.eval_every if self.eval_every is not None else max(1, math.ceil(n / k))
        tail_from = T // 2 + 1 if self.averaging == "tail" else None
        self.n_recoveries_ = 0
        self.n_blocks_ = K
        self._direct_restore = []
        self._excluded = set()
        state = {"v": None, "s": None}

        def make(t):
            def maker(b, data):
                return PegasosBlock, (data, sources[b]["y"], b, n, shares[b], seed, self.bias,
                                      float(self.intercept_scaling), state["v"], state["s"], t)
            return maker

        from tqdm.auto import tqdm
        bar = tqdm(total=T, unit="it", desc="gpusvm dask pegasos") if self.verbose else None
        t0 = time.perf_counter()
        history = []
        stop = "max_iter"
        try:
            blocks = self._place(client, sources, make(1))
            d = self._gather([blk.info() for blk in blocks])[0][1]
            v, s = np.zeros(d), np.array([1.0, 0.0])
            w_sum, n_sum = np.zeros(d), 0
            allreduce = _AllReduce(d)
            t = 1
            if self.local_steps == 1:
                t, stop, w_sum, n_sum = self._sync_loop(
                    blocks, make, state, client, sources, v, s, w_sum, n_sum, allreduce, T,
                    every, tail_from, lam, radius, project, n, bar, t0, history)
                w_last = s[0] * v
            else:
                t, stop, w_sum, n_sum, w_last = self._local_loop(
                    blocks, make, state, client, sources, d, w_sum, n_sum, T, every, tail_from,
                    lam, radius, project, n, bar, t0, history)
            blocks = self._blocks
            w = w_sum / n_sum if n_sum else w_last
            while True:
                try:
                    res = self._gather([blk.hinge(w) for blk in blocks])
                    break
                except Exception as exc:
                    if not _lost_error(exc):
                        raise
                    self._recover(exc, "the final evaluation", blocks)
                    state["v"], state["s"] = v, s
                    blocks = self._place(client, sources, make(t))
        finally:
            self._release()
            self._restore_client()
            if bar is not None:
                bar.close()
        objective = 0.5 * lam * float(w @ w) + math.fsum(res) / n
        history.append((t - 1, objective, time.perf_counter() - t0))
        self._set_solution(w, 0.0)
        self.objective_ = objective
        self.n_iter_ = t - 1
        self.history_ = history
        self.stop_reason_ = stop
        return self

    def _sync_loop(self, blocks, make, state, client, sources, v, s, w_sum, n_sum, allreduce, T,
                   every, tail_from, lam, radius, project, n, bar, t0, history):
        """Synchronous all-reduce iterations (one call per block and iteration)."""
        from ._local import pegasos_apply
        stop = "max_iter"
        update = None
        t = 1
        while t <= T:
            evaluate = t > 1 and (t - 1) % every == 0
            try:
                res = self._gather([blk.iterate(t, update, lam, radius, project, evaluate)
                                    for blk in blocks])
            except Exception as exc:
                if not _lost_error(exc):
                    raise
                self._recover(exc, f"iteration {t}", blocks)
                state["v"], state["s"] = v, s
                blocks = self._place(client, sources, make(t))
                update = None
                continue
            if evaluate:
                objective = 0.5 * lam * s[0] ** 2 * float(v @ v) + \
                    math.fsum(x["hinge"] for x in res) / n
                elapsed = time.perf_counter() - t0
                history.append((t - 1, objective, elapsed))
                if bar is not None:
                    bar.set_postfix(objective=f"{objective:.6g}")
                if self.callback is not None and \
                        self.callback(t - 1, objective, elapsed) is False:
                    stop = "callback"
                    break
            update = allreduce(res)
            pegasos_apply(v, s, update[0], update[1], 1.0 / (lam * t), lam, radius, project)
            if tail_from is not None and t + 1 >= tail_from:
                w_sum += s[0] * v  # w_{t+1}
                n_sum += 1
            t += 1
            if bar is not None:
                bar.update(1)
        self._blocks = blocks
        return t, stop, w_sum, n_sum

    def _local_loop(self, blocks, make, state, client, sources, d, w_sum, n_sum, T, every,
                    tail_from, lam, radius, project, n, bar, t0, history):
        """Local-steps variant: ``local_steps`` iterations per block, then a weighted average."""
        stop = "max_iter"
        weights = [s["rows"].size / n for s in sources]
        w = np.zeros(d)
        t = 1
        while t <= T:
            H = min(self.local_steps, T - t + 1)
            try:
                res = self._gather([blk.local_round(w, t, H, lam, radius, project)
                                    for blk in blocks])
            except Exception as exc:
                if not _lost_error(exc):
                    raise
                self._recover(exc, f"iteration {t}", blocks)
                state["v"], state["s"] = w, np.array([1.0, float(w @ w)])
                blocks = self._place(client, sources, make(t))
                continue
            w = weights[0] * res[0]["w"]
            for b in range(1, len(res)):
                w += weights[b] * res[b]["w"]
            t_before, t = t, t + H
            if tail_from is not None and t >= tail_from:
                w_sum += H * w
                n_sum += H
            if bar is not None:
                bar.update(H)
            if (t - 1) // every > (t_before - 1) // every and t <= T:
                try:
                    hinge = math.fsum(self._gather([blk.hinge(w) for blk in blocks]))
                except Exception as exc:
                    if not _lost_error(exc):
                        raise
                    self._recover(exc, f"iteration {t}", blocks)
                    state["v"], state["s"] = w, np.array([1.0, float(w @ w)])
                    blocks = self._place(client, sources, make(t))
                    continue
                objective = 0.5 * lam * float(w @ w) + hinge / n
                elapsed = time.perf_counter() - t0
                history.append((t - 1, objective, elapsed))
                if bar is not None:
                    bar.set_postfix(objective=f"{objective:.6g}")
                if self.callback is not None and self.callback(t - 1, objective, elapsed) is False:
                    stop = "callback"
                    break
        self._blocks = blocks
        return t, stop, w_sum, n_sum, w

    def to_local(self):
        """This model as an ordinary fitted :class:`gpusvm.PegasosSVC` (e.g. for ``save_model``).

        Returns
        -------
        gpusvm.PegasosSVC
        """
        from ..estimators import PegasosSVC as LocalPegasosSVC
        est = LocalPegasosSVC(batch_size=self.batch_size, projection=self.projection,
                              averaging=self.averaging, **self._local_params())
        return self._to_local(est, ())


class _AllReduce:
    """Sum the blocks' sparse parts, in block order (deterministic), into one sparse vector.

    A dense scratch of size ``d`` (kept zero between calls) makes a sum cost
    O(nnz of the parts) plus one O(d / 8) scan of a boolean mask.
    """

    def __init__(self, d):
        self.acc = np.zeros(d)
        self.mark = np.zeros(d, dtype=bool)

    def __call__(self, res):
        if len(res) == 1:
            return res[0]["idx"], res[0]["vals"]
        for x in res:  # indices are unique within one block's part
            self.acc[x["idx"]] += x["vals"]
            self.mark[x["idx"]] = True
        idx = np.flatnonzero(self.mark).astype(np.int32)
        vals = self.acc[idx]
        self.acc[idx] = 0.0
        self.mark[idx] = False
        return idx, vals
