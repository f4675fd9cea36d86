"""Worker-resident row blocks: the dask actors that hold a block's rows and solver state.

Each block is an actor pinned to a worker for the whole fit, called directly by the driver.
Its local work is a backend's segment (``sdca_segment_m``, ``pegasos_segment_m``) or the
reference backend's Pegasos step functions, on the counter's batches keyed by seed and block.
Its columns are re-indexed to those its rows use (``cols``: messages are ``d_k x M``).  Every
call names the round the driver expects; a rebuilt block at another raises StaleBlockError.
"""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from ..backends import make_backend
from ..backends._csr_nb import localize_columns
from ..backends._state import S_A, S_VSQ
from ..backends.base import PegasosPlan, SDCAPlan, step_size
from ..backends.numpy_ import NumpyBackend
from ..solvers._cocoa import commit, line_search, step_sums  # noqa: F401
from ..solvers._sampling import CounterSampler, block_seed


class StaleBlockError(RuntimeError):
    """A block's state is not at the round the driver expects (it was rebuilt)."""


def _rewrap(a):
    """``a`` (1-D, contiguous, writable) over a memoryview of its memory: a block arrives inside
    dask's uint8 receive buffers, and SciPy copies an array whose base has over twice its
    elements (news20's 36 MB block: 10-60 ms a copy)."""
    if a.ndim == 1 and a.size and a.flags.c_contiguous and a.flags.writeable and \
            isinstance(a.base, np.ndarray):
        return np.frombuffer(memoryview(a), dtype=a.dtype)
    return a


def on_host(X):
    """A partition in host memory: a CuPy array or cupyx sparse matrix (dask-cuda's partitions)
    is copied to the host once, where the block is built (its backend puts it back on the GPU)."""
    if type(X).__module__.split(".")[0] in ("cupy", "cupyx"):
        return X.get()
    return X


def block_csr(X, bias: str, intercept_scaling: float) -> sp.csr_matrix:
    """The block's rows as canonical CSR float64, int32 indices, bias column appended."""
    X = on_host(X)
    if sp.issparse(X) and X.format == "csr":
        X = sp.csr_matrix((_rewrap(X.data), _rewrap(X.indices), _rewrap(X.indptr)),
                          shape=X.shape)
    Xc = sp.csr_matrix(X, dtype=np.float64) if sp.issparse(X) else sp.csr_matrix(
        np.asarray(X, dtype=np.float64))
    if bias == "augmented":
        col = sp.csr_matrix(np.full((Xc.shape[0], 1), intercept_scaling, dtype=np.float64))
        Xc = sp.hstack([Xc, col], format="csr", dtype=np.float64)
    if not Xc.has_canonical_format:   # a copy first: the block's data may be shared or read-only
        Xc = Xc.copy()
        Xc.sum_duplicates()
        Xc.sort_indices()
    if not np.all(np.isfinite(Xc.data)):
        raise ValueError("X contains NaN or infinity; clean the data before fitting")
    return sp.csr_matrix((Xc.data, Xc.indices.astype(np.int32, copy=False),
                          Xc.indptr.astype(np.int32, copy=False)), shape=Xc.shape)


def local_columns(Xc: sp.csr_matrix):
    """``(cols, X_local)``: the sorted columns the rows use (int64), and the rows re-indexed to
    them (canonical CSR, int32 indices)."""
    cols, local = localize_columns(Xc.indices, Xc.shape[1])    # O(nnz + d), no sort
    if cols.size == 0:                      # all-zero rows: keep one column so shapes stay valid
        cols = np.zeros(1, dtype=np.int64)
    X_local = sp.csr_matrix((Xc.data, local, Xc.indptr), shape=(Xc.shape[0], cols.size))
    X_local.has_sorted_indices = True
    return cols, X_local


def _host(a) -> np.ndarray:
    """A backend array (NumPy or CuPy) as a host NumPy array."""
    get = getattr(a, "get", None)
    return np.asarray(get() if callable(get) and not isinstance(a, np.ndarray) else a)


def _as_columns(s, n):
    """Row weights as a column (n, 1) shared by the outputs or (n, M) per output."""
    if s is None:
        return np.ones((n, 1))
    return s if s.ndim == 2 else s[:, None]


def loss_sums(Z, Y, s, loss: str) -> np.ndarray:
    """``sum_i s_ic loss(y_ic z_ic)`` per output (float64 (M,)); ``s`` of shape (n,) shared by
    the outputs, (n, M) per output, or None for unit weights."""
    slack = np.maximum(0.0, 1.0 - Y * Z)
    if loss == "squared_hinge":
        slack = slack * slack
    if s is not None:
        slack = _as_columns(s, slack.shape[0]) * slack
    return slack.sum(axis=0)


def dual_sums(alpha, s, loss: str) -> np.ndarray:
    """``sum_i alpha_ic`` (hinge) or ``sum_i (alpha_ic - alpha_ic^2 / (4 s_ic))`` over
    ``s_ic > 0`` (squared hinge); ``s`` as in :func:`loss_sums`."""
    if loss != "squared_hinge":
        return alpha.sum(axis=0)
    w = _as_columns(s, alpha.shape[0])
    safe = np.where(w > 0, w, 1.0)
    return np.where(w > 0, alpha - alpha * alpha / (4.0 * safe), 0.0).sum(axis=0)


class _Block:
    """What both blocks hold: the rows on their columns ``cols`` of ``d``, labels and weights."""

    def _rows(self, X, Y, s, block, bias, intercept_scaling):
        """Set ``d``, ``cols``, ``Y`` (n_k, M) and ``s`` (None: 1); return the rows on ``cols``."""
        Xc = block_csr(X, bias, intercept_scaling)
        self.d, self.block = Xc.shape[1], block
        self.cols, X_local = local_columns(Xc)
        self.Y = np.ascontiguousarray(np.reshape(Y, (Xc.shape[0], -1)), dtype=np.float64)
        self.s = None if s is None else np.ascontiguousarray(s, dtype=np.float64)
        return X_local

    def info(self):
        """``(n_k, d, block, cols)``, also a liveness probe."""
        return self.Y.shape[0], self.d, self.block, self.cols

    def _expect(self, at, expected, what):
        if expected != at:
            raise StaleBlockError(
                f"block {self.block} {what} {at}, the driver expects {expected}")


class SDCABlock(_Block):
    """One row block of distributed SDCA (CoCoA+ with a line search), resident on a worker;
    ``alpha`` (None: 0) is the committed state of round ``round_`` to start from.

    The local subproblem of Ma et al. (2015, eq. 9) is maximised by SDCA steps against
    ``v = w + sigma' u``, ``u = (1/(lam n)) sum_{i in P_k} dalpha_i y_i x_i``: ``delta_i`` is
    eq. (15) with ``beta = sigma'``, which is the backend's SDCA step with ``beta = 1`` at
    ``lam n / (sigma' n_k)`` on the block's ``n_k`` rows, ``V`` set to the broadcast ``w`` and
    ``alpha`` the committed ``alpha_k``.  The block returns ``u_k = (v - w) / sigma'`` and keeps
    ``alpha_k + dalpha_k`` pending: the next call commits ``alpha_k + gamma dalpha_k`` with
    the driver's ``gamma`` (:func:`line_search`).
    """

    def __init__(self, X, Y, s, block, n, lam, sigma, seed, bias, intercept_scaling, loss,
                 backend, alpha, round_):
        Xl = self._rows(X, Y, s, block, bias, intercept_scaling)
        self.lam, self.sigma = float(lam), float(sigma)
        self.loss = loss
        n_k = Xl.shape[0]
        self.be = make_backend(backend, Xl, self.Y, sample_weight=self.s)
        self.be.init_state_m(None)
        self.lam_local = self.lam * n / (self.sigma * n_k)
        self.be.init_dual_m(1.0, loss, alpha0=alpha, lam=self.lam_local)
        self.xp = getattr(self.be, "xp", np)
        self.sampler = CounterSampler(n_k, 1, "epoch", block_seed(seed, block))
        self.plan = SDCAPlan(lam=self.lam_local, beta_b=1.0, theta=0.5, aggressive=False,
                             shrinking=False, loss=loss)
        self.pending = None
        self.round = round_
        self._w = None

    def _broadcast(self, w):
        """The broadcast ``w`` (d_k, M) as a float64 backend array, in one buffer for the whole
        fit: a dask worker returns freed memory at once, so a fresh array a round would pay its
        page faults every round (news20: 30 ms a step instead of 22)."""
        if self._w is None:
            self._w = self.xp.empty(self.be.V.shape, dtype=np.float64)
        self._w[...] = self.xp.asarray(np.reshape(w, self._w.shape))
        return self._w

    def _set_point(self, w):
        """``V = w`` (exact from the wire's float32) and ``a = 1``; the margins at ``V``; then
        ``||V_c||^2``, which brings ``V`` back into the cache for the solver after the pass over
        ``X`` (news20: a block's solver 13 against 18-31 ms with ``V`` cold)."""
        be = self.be
        be.V[...] = self.xp.asarray(np.reshape(w, be.V.shape))
        be.sm[S_A] = 1.0
        Z = _host(be.decision_function_m(be.V, 0.0))
        v = be.V if be.V.dtype == np.float64 else be.V.astype(np.float64)
        be.sm[S_VSQ] = self.xp.einsum("ij,ij->j", v, v)
        return Z

    def _commit(self, round_, gamma):
        """Refuse a stale call; commit the pending ``alpha + gamma dalpha``."""
        self._expect(self.round, round_, "holds round")
        if self.pending is not None:
            if gamma is None:
                raise StaleBlockError(f"block {self.block} has a step pending and no gamma")
            before, after = self.pending
            self.be.alpha[...] = commit(before, after, self.xp.asarray(gamma))
            self.pending = None

    def certify(self, w, round_, gamma=None):
        """Commit ``gamma``'s step; the ``loss`` and ``dual`` sums at ``w`` and ``alpha``, and
        the signed margins ``A`` at ``w``."""
        self._commit(round_, gamma)
        be = self.be
        Z = _host(be.decision_function_m(self._broadcast(w), 0.0))
        return {"loss": loss_sums(Z, self.Y, self.s, self.loss),
                "dual": dual_sums(_host(be.alpha), self.s, self.loss), "A": self.Y * Z}

    def step(self, w, round_, t0, t1, gamma):
        """One round: commit ``gamma``'s step, the certificate's sums and the signed margins
        ``A`` at ``w``, then the local solver from ``V = w`` over the counter positions ``t0 ..
        t1``.  Returns ``loss``, ``dual``, ``A``, ``u = (v - w) / sigma'`` in ``w``'s dtype
        (float32 on the wire), the pending ``alpha``, ``b``, ``q`` (:func:`line_search`'s
        sums) and ``seconds``."""
        wire = np.float32 if np.asarray(w).dtype == np.float32 else np.float64
        self._commit(round_, gamma)
        be = self.be
        Z = self._set_point(w)
        out = {"loss": loss_sums(Z, self.Y, self.s, self.loss),
               "dual": dual_sums(_host(be.alpha), self.s, self.loss), "A": self.Y * Z}
        before = be.alpha.copy()
        start = time.perf_counter()
        be.sdca_segment_m(self.sampler, int(t0), int(t1), self.plan)
        if hasattr(be, "synchronize"):
            be.synchronize()
        out["seconds"] = time.perf_counter() - start
        after = be.alpha.copy()
        self.pending = (before, after)
        self.round = round_ + 1
        out["alpha"] = _host(after)
        w = np.reshape(w, be.V.shape)
        if self.sigma == 1.0 and isinstance(be, NumpyBackend):   # u = v - w, one pass
            out["u"] = np.subtract(be.V, w, out=np.empty(w.shape, dtype=wire),
                                   casting="same_kind")
        else:
            u = self._broadcast(w)
            u = self.xp.subtract(be.V, u, out=u)
            u /= self.sigma
            out["u"] = _host(u).astype(wire)           # a fresh array for the wire
        out["b"], out["q"] = step_sums(_host(before), out["alpha"], self.s, self.loss)
        return out

    def alpha_copy(self):
        """The block's committed dual variables (float64, shape (n_k, M))."""
        return _host(self.be.alpha).copy()

    def xty(self, round_, gamma=None):
        """Commit the pending step, then ``X_k^T (alpha_k * Y_k)`` (float64, (d_k, M)): the
        driver's exact ``w(alpha)`` before a final certificate."""
        self._commit(round_, gamma)
        be = self.be
        A = be.alpha * be.Y.astype(np.float64)
        return _host(be.X.T @ A).reshape(self.cols.size, -1)


class PegasosBlock(_Block):
    """One row block of distributed mini-batch Pegasos, resident on a worker.

    Holds a replica of ``W = V diag(a)`` on its columns in a :class:`NumpyBackend` over its
    rows (``V``, ``a``: the state to start from, None: 0 and 1) that every iteration ``t``
    updates with the driver's all-reduced step; ``share`` is the block's rows per iteration.
    """

    def __init__(self, X, Y, s, block, n, share, seed, bias, intercept_scaling, loss, backend, V,
                 a, t):
        self.X = self._rows(X, Y, s, block, bias, intercept_scaling)
        n_k = self.X.shape[0]
        self.share, self.loss = share, loss
        self.backend = backend
        self.k_eff = n * share / n_k     # the block's rows stand for n_k / n of the batch
        self.ref = NumpyBackend(self.X, self.Y, self.s)
        self.ref.init_state_m(None if V is None else np.reshape(V, (self.d, -1))[self.cols])
        if a is not None:
            self.ref.sm[S_A] = a
        self.t = t
        self.seed = block_seed(seed, block)
        self.sampler = CounterSampler(n_k, share, "without_replacement", self.seed)
        self._be = None

    def loss_sum(self, w):
        """Loss sums of the block's rows at ``w`` (d_k, M), per output."""
        Z = np.asarray(self.X @ np.asarray(w, dtype=np.float64))
        return loss_sums(Z, self.Y, self.s, self.loss)

    def local_round(self, w, t0, local_steps, lam, radius, project):
        """Local-steps variant: ``local_steps`` iterations from iteration ``t0`` as one call of the
        backend's ``pegasos_segment_m``, from the broadcast ``w`` on all ``d`` columns (the shrink
        and the projection see the whole norm).  Returns ``w`` and ``seconds``."""
        self._expect(self.t, t0, "is at iteration")
        start = time.perf_counter()
        if self._be is None:
            X = self.X
            full = sp.csr_matrix((X.data, self.cols[X.indices].astype(np.int32), X.indptr),
                                 shape=(X.shape[0], self.d))
            self._be = make_backend(self.backend, full, self.Y, sample_weight=self.s)
        be = self._be
        be.init_state_m(np.asarray(w, dtype=np.float64))
        plan = PegasosPlan(lam=float(lam), k=self.share, radius=float(radius) if project else 0.0,
                           loss=self.loss)
        be.pegasos_segment_m(self.sampler, int(t0) - 1, int(t0) - 1 + int(local_steps), plan)
        W, _ = be.output_m(False)
        self.t = t0 + local_steps
        return {"w": _host(W), "seconds": time.perf_counter() - start}

    def iterate(self, t, update, lam, evaluate):
        """Apply step ``t - 1`` (:func:`driver_step`'s ``update``, None at ``t = 1``) as the
        driver did (its scales after the projection, which saw the whole ``||v||^2``): every
        replica of ``V`` stays bitwise the driver's.  Returns the loss sums at ``w_t`` when
        ``evaluate`` and this block's part ``idx``, ``agg`` of step ``t``: the reference's
        ``sum_i eta_t/(k' a) g_i y_i x_i`` over its rows of ``A_t``, ``k' = n k_k / n_k``."""
        self._expect(self.t, t, "is at iteration")
        ref = self.ref
        if update is not None:
            idx, agg, a_step, a_new = update
            pos = np.minimum(np.searchsorted(self.cols, idx), self.cols.size - 1)
            mine = self.cols[pos] == idx
            ref.pegasos_update_m(pos[mine], agg[mine], a_step, 0.0, False)
            ref.sm[S_A] = a_new
            ref.renormalize_m(PegasosPlan.renorm_threshold)
        out = {}
        if evaluate:
            out["loss"] = self.loss_sum(ref.V * ref.sm[S_A])
        rows, _ = self.sampler.batch(t - 1)
        m = ref.margins_m(rows)                                     # step 2, at w_t
        eta, shrink = step_size("pegasos", t, lam, None, 0.0)        # step 3
        if shrink == 0.0:
            ref.reset_scale_m()
            shrink = 1.0
        coef, _ = ref.pegasos_coef_m(rows, m, eta / (self.k_eff * (ref.sm[S_A] * shrink)),
                                     self.loss == "squared_hinge")
        idx, out["agg"] = ref.row_sum_m(rows, coef)
        out["idx"] = self.cols[idx]
        self.t = t + 1
        return out


def driver_step(be, t, lam, idx, agg, radius, average):
    """Pegasos step ``t`` on the driver's replica ``be`` (a :class:`NumpyBackend` without rows)
    from the all-reduced part ``(idx, agg)``, as in ``pegasos_segment_m``: the reset at ``t =
    1``, ``pegasos_update_m``, ``renormalize_m``.  Returns the blocks' update ``(idx, agg,
    a_step, a_new)`` (the shrunk scales, and those after the projection)."""
    _, shrink = step_size("pegasos", t, lam, None, 0.0)
    if shrink == 0.0:
        be.reset_scale_m()
        shrink = 1.0
    a_step = be.sm[S_A] * shrink
    be.pegasos_update_m(idx, agg, a_step, radius, average)
    update = (idx, agg, a_step, be.sm[S_A].copy())
    be.renormalize_m(PegasosPlan.renorm_threshold)
    return update
