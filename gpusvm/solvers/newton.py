r"""Primal truncated Newton for the squared-hinge (L2) SVM, with a duality-gap certificate.

The weighted L2-SVM objective (ALGORITHMS.md, "Weights, and the squared hinge")

.. math::

    P_2(w) = \frac{\lambda}{2}\|w\|^2 + \frac1n \sum_i s_i \max(0, 1 - y_i\langle w, x_i\rangle)^2

is differentiable with a piecewise-constant generalised Hessian.  With
``I = {i : y_i <w, x_i> < 1}`` (Keerthi & DeCoste 2005, eqs. 3-5; Chapelle 2007,
Sec. 4.2):

* gradient ``g = lam w - (2/n) X_I^T (S (1 - y_I * X_I w) * y_I)``;
* Hessian-vector product ``H v = lam v + (2/n) X_I^T (S (X_I v))``: two sparse
  products over the active rows ``I`` only (taken out once per Newton step), and
  ``H`` is never formed.

Each outer iteration solves ``H p = -g`` by conjugate gradients to the relative
residual ``min(0.1, sqrt(||g|| / ||g_0||))`` (the inexact Newton forcing term of
Eisenstat & Walker, as in LIBLINEAR's TRON, Lin, Weng & Keerthi 2008, Alg. 2, which
takes a trust region where this solver searches the line), then minimises ``P_2``
exactly along ``p``: the objective along a line is a convex piecewise quadratic
whose breakpoints are the rows entering or leaving ``I``, so one sort of the
breakpoints and one pass over them give the minimiser (Keerthi & DeCoste 2005,
Sec. 3, "exact line search").

Certificate (ALGORITHMS.md): ``alpha_i = 2 s_i max(0, 1 - y_i <w, x_i>) >= 0`` is
feasible for the dual
``D_2(alpha) = (1/n) sum_i (alpha_i - alpha_i^2 / (4 s_i)) - (lam/2) ||w(alpha)||^2``,
``w(alpha) = (1/(lam n)) sum_i alpha_i y_i x_i``, so ``P_2(w) - D_2(alpha)`` bounds
``P_2(w) - P_2*``; the solver stops when it is ``<= tol``.  At the optimum
``w(alpha) = w`` and the gap is 0.

The products run on the backend's CSR matrix in its own array module
(:attr:`backend.X`, ``backend.xp``): SciPy's compiled CSR products for the
``numpy`` and ``numba`` backends (the same code: a CSR product is already a
compiled loop there), cuSPARSE through CuPy for ``cupy`` (vectors stay on the
device; the line search sorts on the device), and NumPy for ``emulated``.  Data
stored in float32 are copied once to float64 for the products, so that the
Newton steps and the certificate are computed in double precision.  On the CPU a matrix
with a quarter or more nonzeros is copied to a dense array instead (BLAS products), and
with at most 128 columns each Newton step is then solved exactly, ``H`` formed and factored,
in place of CG (pendigits, 10 classes, 17 columns: 0.07 s against 0.14 s by CG on CSR).
"""

from __future__ import annotations

import functools
import math
import time
from typing import Callable

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from threadpoolctl import ThreadpoolController

from ..backends.base import on_backend_stream
from ._common import SolverResult

#: outer iterations when none is given (Newton converges in tens at most)
DEFAULT_MAX_ITER = 100
#: cap of the CG iterations of one Newton step
MAX_CG_ITER = 250


#: the products use a dense float64 copy of ``X`` when it holds at least this fraction of
#: nonzeros (and at most :data:`DENSE_MAX_ENTRIES` entries): BLAS reads a dense row faster than
#: a CSR product its nonzeros, and a dense copy is then no larger than the CSR arrays
DENSE_MIN_DENSITY = 0.25
#: the largest ``n * d`` copied to a dense matrix (160 MB of float64)
DENSE_MAX_ENTRIES = 20_000_000
#: with dense products and at most this many columns, each Newton step solves ``H p = -g``
#: exactly (the ``d x d`` generalised Hessian, a Cholesky solve) instead of by CG: forming
#: ``H`` costs ``|I| d^2``, about the ``2 k |I| d`` of ``k`` CG steps for ``k = d / 2``
DIRECT_MAX_FEATURES = 128


class _Products:
    """``X v`` and ``X^T u`` in float64 on the backend's matrix (``X^T u`` reads the CSR arrays
    as CSC: no transposed copy).

    A CPU matrix with at least :data:`DENSE_MIN_DENSITY` nonzeros is copied once to a dense
    array (BLAS products); with at most :data:`DIRECT_MAX_FEATURES` columns, ``direct`` is
    then True and the Newton steps are solved exactly (:func:`_direct_step`).
    """

    def __init__(self, backend, X=None):
        X = backend.X if X is None else X
        self.xp = getattr(backend, "xp", np) if backend is not None else np
        if X.dtype != np.float64:
            X = X.astype(np.float64)
        n, d = X.shape
        if self.xp is np and sp.issparse(X) and n * d <= DENSE_MAX_ENTRIES \
                and X.nnz >= DENSE_MIN_DENSITY * n * d:
            X = X.toarray()
        self.X, self.XT = X, X.T
        self.n, self.d = X.shape
        self.direct = isinstance(X, np.ndarray) and self.d <= DIRECT_MAX_FEATURES

    def matvec(self, v):
        return self.X @ v

    def rmatvec(self, u):
        return self.XT @ u

    def sq_rmatvec(self, u):
        """``(X * X)^T u``, the squares taken elementwise (made once, on first use)."""
        if getattr(self, "_sqT", None) is None:
            self._sqT = (self.X.multiply(self.X) if not isinstance(self.X, np.ndarray)
                         else self.X * self.X).T
        return self._sqT @ u

    def rows(self, index):
        """The products of the rows ``index`` only (the active set of a Newton step)."""
        sub = _Products.__new__(_Products)
        sub.xp, sub.X = self.xp, self.X[index]
        sub.XT, sub.direct = sub.X.T, self.direct
        sub.n, sub.d = sub.X.shape
        return sub


def _direct_step(sub, D, lam, g):
    """The Newton step ``p = -H^{-1} g`` with ``H = lam I + X_I^T diag(D) X_I`` formed (dense
    ``X_I`` of few columns) and solved by Cholesky; ``H`` is positive definite (``lam > 0``)."""
    XI = sub.X
    H = (XI.T * D) @ XI
    H[np.diag_indices_from(H)] += lam
    return scipy.linalg.cho_solve(scipy.linalg.cho_factor(H, lower=True, check_finite=False),
                                  -g, check_finite=False)


#: the line search sorts only the breakpoints inside a bracket of the minimiser, narrowed by
#: bisection on ``phi'`` (one pass over the rows each) until it holds at most this many: sorting
#: all of them was most of a Newton step on w8a (40,000 rows, 300 columns)
LINE_SEARCH_EVENTS = 1024


def _line_search(xp, lam, n, w, p, z, q, s):
    """Exact minimiser ``t > 0`` of ``P_2(w + t p)`` (a convex piecewise quadratic in ``t``).

    ``z_i = y_i <w, x_i>``, ``q_i = y_i <p, x_i>``.  Along the line the loss of row
    ``i`` is ``s_i max(0, r_i - t q_i)^2`` with ``r_i = 1 - z_i``, so
    ``phi'(t) = a + b t`` between breakpoints, with
    ``a = lam <w, p> - (2/n) sum_active s_i q_i r_i`` and
    ``b = lam ||p||^2 + (2/n) sum_active s_i q_i^2``; a row leaves the active set
    at ``t_i = r_i / q_i`` when ``q_i > 0`` and ``r_i > 0``, and enters there when
    ``q_i < 0`` and ``r_i <= 0``.  ``phi'`` increases, so the root is in the first
    segment whose right end has ``phi' >= 0``.  Only the breakpoints of a bracket
    ``(lo, hi]`` of the root are sorted: ``hi`` the first of ``1, 2, 4, ...`` with
    ``phi'(hi) >= 0``, narrowed by bisection while it holds more than
    :data:`LINE_SEARCH_EVENTS` of them, and ``a``, ``b`` taken at ``lo``.
    """
    r = 1.0 - z
    active = r > 0
    c = 2.0 / n
    wp, pp = lam * float(w @ p), lam * float(p @ p)
    sqr, sqq = s * q * r, s * q * q
    leave = active & (q > 0)
    enter = (~active) & (q < 0)
    events = leave | enter

    def slope(t):                               # phi'(t), from its definition
        return wp + pp * t - c * float(xp.sum(s * q * xp.maximum(0.0, r - t * q)))

    def coefficients(lo):                       # a, b of the segment just right of lo
        u = r - lo * q
        act = (u > 0) | ((u == 0) & (q < 0))
        return wp - c * float(xp.sum(sqr[act])), pp + c * float(xp.sum(sqq[act]))

    if not bool(events.any()):
        a0, b0 = coefficients(0.0)
        return -a0 / b0
    idx = xp.flatnonzero(events)
    t_ev = r[idx] / q[idx]
    lo, hi = 0.0, 1.0
    if slope(0.0) < 0:
        for _ in range(64):                     # phi' grows at least like lam ||p||^2 t
            if slope(hi) >= 0:
                break
            lo, hi = hi, 2.0 * hi
        else:
            hi = math.inf
        inside = (t_ev > lo) & (t_ev <= hi)
        for _ in range(64):
            if math.isinf(hi) or int(xp.count_nonzero(inside)) <= LINE_SEARCH_EVENTS:
                break
            mid = 0.5 * (lo + hi)
            if slope(mid) < 0:
                lo = mid
            else:
                hi = mid
            inside = (t_ev > lo) & (t_ev <= hi)
    else:                                       # not a descent direction: the first segment
        inside = t_ev >= 0
    keep = xp.flatnonzero(inside)
    a0, b0 = coefficients(lo)
    if keep.size == 0:
        return -a0 / b0
    sel = idx[keep]
    t_ev = t_ev[keep]
    sign = xp.where(leave[sel], 1.0, -1.0)     # +1: the row leaves the active set
    da = sign * c * sqr[sel]
    db = -sign * c * sqq[sel]
    order = xp.argsort(t_ev)
    t_ev, da, db = t_ev[order], da[order], db[order]
    a = a0 + xp.concatenate([xp.zeros(1), xp.cumsum(da)])
    b = b0 + xp.concatenate([xp.zeros(1), xp.cumsum(db)])
    right = xp.concatenate([t_ev, xp.full(1, np.inf)])
    ok = a + b * right >= 0                    # phi'(right end of segment k) >= 0
    ok[-1] = True
    k = int(xp.argmax(ok))
    return float(-a[k] / b[k])


def primal_dual(products, y, s, lam, w):
    """``P_2(w)``, ``D_2(alpha(w))`` and the margins, in float64.

    Parameters
    ----------
    products : _Products
    y : array of shape (n,)
    s : array of shape (n,)
        Row weights.
    lam : float
    w : array of shape (d,)

    Returns
    -------
    primal, dual : float
    z : array of shape (n,)
        ``y_i <w, x_i>``.
    """
    xp = products.xp
    n = products.n
    z = y * products.matvec(w)
    r = xp.maximum(0.0, 1.0 - z)
    primal = 0.5 * lam * float(w @ w) + float(xp.sum(s * r * r)) / n
    alpha = 2.0 * s * r
    w_alpha = products.rmatvec(alpha * y) / (lam * n)
    pos = s > 0
    quad = float(xp.sum(alpha[pos] ** 2 / (4.0 * s[pos])))
    dual = (float(xp.sum(alpha)) - quad) / n - 0.5 * lam * float(w_alpha @ w_alpha)
    return primal, dual, z


def _one_blas_thread(func):
    """Run ``func`` with BLAS on one thread.  Its BLAS calls are dot products and norms of
    ``d``-vectors, which a second thread does not make faster: on 20 Newsgroups
    (one-vs-rest, ``d = 130k``) two OpenBLAS threads took the same wall time and twice
    the CPU time (5.7 s wall, 11.2 s CPU against 5.3 s and 5.3 s)."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        with _threadpools().limit(limits=1, user_api="blas"):
            return func(*args, **kwargs)
    return wrapper


@functools.lru_cache(maxsize=1)
def _threadpools() -> ThreadpoolController:
    """The process's thread pools, found once: finding them reads every loaded library (about
    10 ms, which a small fit would pay on every call)."""
    return ThreadpoolController()


@_one_blas_thread
@on_backend_stream
def newton(backend, *, lam: float, tol: float = 1e-3, max_iter: int = DEFAULT_MAX_ITER,
           y=None, sample_weight=None, w0=None, max_time: float | None = None,
           callback: Callable | None = None, progress=None, cg_max_iter: int = MAX_CG_ITER,
           products: _Products | None = None) -> SolverResult:
    """Minimise the squared-hinge SVM objective by primal truncated Newton (Newton-CG).

    Parameters
    ----------
    backend : Backend
        Supplies the CSR matrix ``backend.X`` (bias column included) and, unless
        ``y`` is given, the labels ``backend.y``.
    lam : float
        Regularisation ``lambda > 0``.
    tol : float or array of shape (M,), default=1e-3
        Stop when the duality gap ``P_2(w) - D_2(alpha(w))`` is ``<= tol`` (per
        output when an array).
    max_iter : int, default=100
        Newton iterations.
    y : array of shape (n,) or (n, M), optional
        Labels in {-1, +1}; M columns are M independent problems on the same rows
        (one after the other, sharing the products).
    sample_weight : array of shape (n,) or (n, M), optional
        Row weights ``s_i >= 0`` (None: all 1), shared by the outputs or one column
        per output.
    w0 : array of shape (d,) or (d, M), optional
        Starting point (warm start); zeros by default.
    max_time : float or None
        Time budget in seconds (checked after every Newton iteration).
    callback : callable or None
        ``callback(iteration, primal, elapsed)`` after every Newton iteration;
        ``False`` stops.
    progress : callable or None
        ``progress(iteration, primal, gap)`` after every Newton iteration (iterations
        counted over the outputs one after the other).
    cg_max_iter : int, default=250
        Cap of the CG iterations of one step.
    products : _Products, optional
        Reuse the float64 products of an earlier call on the same backend.

    Returns
    -------
    SolverResult
        ``w`` (shape ``(d,)``, or ``(d, M)``), ``b = 0``, ``n_iter`` (Newton
        iterations, the most of any output), ``history`` with rows
        ``(iteration, P, D, gap, elapsed)`` (a list of them per output for M > 1),
        ``extra``: ``primal``, ``dual``, ``gap`` (floats, or arrays of shape
        ``(M,)``), ``alpha`` (the dual point, y's shape), ``cg_iter`` (total CG
        iterations), ``n_iters`` and ``stop_reasons`` (per output), ``products``.
    """
    if not lam > 0:
        raise ValueError(f"lam must be > 0, got {lam!r}")
    if not (isinstance(max_iter, (int, np.integer)) and max_iter >= 1):
        raise ValueError(f"max_iter must be a positive integer, got {max_iter!r}")
    prod = products if products is not None else _Products(backend)
    xp = prod.xp
    Y = backend.y if y is None else y
    Y = xp.asarray(Y, dtype=np.float64)
    multi = Y.ndim == 2
    Ycols = Y if multi else Y.reshape(-1, 1)
    n, d = prod.n, prod.d
    s_all = xp.ones(n, dtype=np.float64) if sample_weight is None else \
        xp.asarray(sample_weight, dtype=np.float64)
    tols = np.broadcast_to(np.asarray(tol, dtype=np.float64), (Ycols.shape[1],))
    W0 = None
    if w0 is not None:
        W0 = xp.asarray(w0, dtype=np.float64).reshape(d, -1)
    start = time.perf_counter()
    ws, primals, duals, gaps, alphas, histories, n_iters, reasons = [], [], [], [], [], [], [], []
    cg_total = 0
    done = 0                                   # Newton iterations of the earlier outputs
    for c in range(Ycols.shape[1]):
        yc = xp.ascontiguousarray(Ycols[:, c])
        s = s_all if s_all.ndim == 1 else xp.ascontiguousarray(s_all[:, c])  # output c's weights
        tol_c = float(tols[c])
        w = xp.zeros(d, dtype=np.float64) if W0 is None else W0[:, min(c, W0.shape[1] - 1)].copy()
        history = []
        reason = "max_iter"
        g0 = None
        it = 0
        primal, dual, z = primal_dual(prod, yc, s, lam, w)
        for it in range(1, max_iter + 1):
            r = xp.maximum(0.0, 1.0 - z)
            act = r > 0
            g = lam * w - (2.0 / n) * prod.rmatvec(s * r * yc)
            gnorm = float(xp.linalg.norm(g))
            if g0 is None:
                g0 = gnorm
            if gnorm == 0.0:
                it -= 1
                reason = "tol"
                break
            # the generalised Hessian reads the active rows only (LIBLINEAR's TRON does the same)
            index = xp.flatnonzero(act)
            sub = prod.rows(index)
            D = s[index] * (2.0 / n)

            def hess(v, D=D, sub=sub):
                return lam * v + sub.rmatvec(D * sub.matvec(v))

            eta = min(0.1, math.sqrt(gnorm / g0)) if g0 > 0 else 0.1
            if sub.direct:
                p, k = _direct_step(sub, D, lam, g), 0
            else:           # Jacobi preconditioner: diag(H) = lam + X^2^T (D on the active rows)
                weights = xp.zeros(n, dtype=np.float64)
                weights[index] = D
                p, k = _cg(xp, hess, -g, eta, cg_max_iter,
                           inv_diag=1.0 / (lam + prod.sq_rmatvec(weights)))
            cg_total += k
            q = yc * prod.matvec(p)
            t = _line_search(xp, lam, n, w, p, z, q, s)
            w = w + t * p
            primal, dual, z = primal_dual(prod, yc, s, lam, w)
            gap = primal - dual
            elapsed = time.perf_counter() - start
            history.append((it, primal, dual, gap, elapsed))
            if progress is not None:
                progress(done + it, primal, gap)
            if gap <= tol_c:
                reason = "tol"
                break
            if callback is not None and callback(it, primal, elapsed) is False:
                reason = "callback"
                break
            if max_time is not None and elapsed >= max_time:
                reason = "max_time"
                break
        if not history:
            elapsed = time.perf_counter() - start
            history.append((0, primal, dual, primal - dual, elapsed))
        ws.append(w)
        primals.append(primal)
        duals.append(dual)
        gaps.append(primal - dual)
        alphas.append(2.0 * s * xp.maximum(0.0, 1.0 - z))
        histories.append(history)
        n_iters.append(it)
        reasons.append(reason)
        done += it
    if multi:
        W = xp.stack(ws, axis=1)
        alpha = xp.stack(alphas, axis=1)
        out = dict(primal=np.asarray(primals), dual=np.asarray(duals), gap=np.asarray(gaps),
                   alpha=alpha)
        history = histories
        reason = next((r for r in reasons if r != "tol"), "tol")
    else:
        W, alpha = ws[0], alphas[0]
        out = dict(primal=primals[0], dual=duals[0], gap=gaps[0], alpha=alpha)
        history, reason = histories[0], reasons[0]
    out.update(cg_iter=cg_total, n_iters=n_iters, stop_reasons=reasons, histories=histories,
               products=prod)
    to_host = getattr(backend, "to_host", None)
    if to_host is not None and xp is not np:
        W = to_host(W)
        out["alpha"] = to_host(out["alpha"])
    return SolverResult(w=np.asarray(W), b=0.0, n_iter=max(n_iters), history=history,
                        stop_reason=reason, extra=out)


def _cg(xp, hess, rhs, eta, max_iter, inv_diag=None):
    """Conjugate gradients for ``H p = rhs`` from ``p = 0`` to ``||r|| <= eta ||rhs||``,
    preconditioned by ``diag(H)`` when ``inv_diag`` (its inverse) is given (Jacobi PCG)."""
    p = xp.zeros_like(rhs)
    r = rhs.copy()
    z = r if inv_diag is None else inv_diag * r
    direction = z.copy()
    rr = float(r @ r)
    rz = float(r @ z)
    stop = (eta ** 2) * rr
    k = 0
    while k < max_iter and rr > stop:
        Hd = hess(direction)
        step = rz / float(direction @ Hd)
        p += step * direction
        r -= step * Hd
        rr = float(r @ r)
        z = r if inv_diag is None else inv_diag * r
        rz_new = float(r @ z)
        direction = z + (rz_new / rz) * direction
        rz = rz_new
        k += 1
    return p, k


@_one_blas_thread
def newton_block(X, Y, S, lam: float, tol, *, W0=None, max_iter: int = DEFAULT_MAX_ITER,
                 cg_max_iter: int = MAX_CG_ITER, XT=None) -> dict:
    """:func:`newton` on ``M`` outputs at once: every product reads ``X`` once for all of them.

    The same Newton-CG steps and exact line search, per output, with the outputs'
    vectors side by side: the margins ``X W``, the gradients ``X^T (S R Y)`` and each CG
    iteration's Hessian products ``lam P + (2/n) X_I^T (D (X_I P))`` are sparse matrix
    times dense ``M``-column block products (one pass over the rows for all outputs,
    ``I`` the rows active in any output, ``D`` zero where a row is inactive for an
    output), and CG keeps its scalars per output.  An output leaves the block when its
    certificate is ``<= tol`` (or its CG has converged), so the block narrows.  Used by
    the one-pass search (:class:`~gpusvm.estimators.cv.SDCASVCCV`), whose outputs are
    the folds of one ``C`` (each warm-started from the previous ``C``).

    Parameters
    ----------
    X : scipy.sparse.csr_matrix of shape (n, d)
    Y : ndarray of shape (n, M)
        Labels in {-1, +1}.
    S : ndarray of shape (n, M)
        Each output's row weights (``>= 0``; 0 leaves a row out of an output).
    lam : float
    tol : float or ndarray of shape (M,)
        Duality gap at which each output stops.
    W0 : ndarray of shape (d, M), optional
        Starting points.
    max_iter, cg_max_iter : int
    XT : scipy.sparse matrix of shape (d, n), optional
        ``X.T`` (float64), when the caller keeps one for several calls.

    Returns
    -------
    dict
        ``w`` (d, M), ``primal``, ``dual``, ``gap`` (M,), ``alpha`` (n, M),
        ``n_iter`` (M,) Newton iterations per output, ``cg_iter`` (total block CG
        iterations), ``products`` and ``product_columns`` (the sparse-times-block products
        made and their columns summed: what a device would run, for the performance model).
    """
    X = sp.csr_matrix(X, dtype=np.float64)
    n, d = X.shape
    dense = d <= DENSE_COLUMNS and X.nnz >= DENSE_FILL * n * d and n * d * 8 <= DENSE_BYTES
    if dense:                       # few, mostly filled columns: BLAS products on an array
        X = X.toarray()
        XT = None
    Y = np.asarray(Y, dtype=np.float64)
    S = np.asarray(S, dtype=np.float64)
    M = Y.shape[1]
    tols = np.broadcast_to(np.asarray(tol, dtype=np.float64), (M,))
    XT = X.T if XT is None else XT                       # CSC view (or array): no copy
    counts = [0, 0]                                      # block products, their columns

    def mm(A, B):
        counts[0] += 1
        counts[1] += B.shape[1]
        return _matmat(A, B)

    W = np.zeros((d, M)) if W0 is None else np.array(W0, dtype=np.float64).reshape(d, M)
    Z = Y * mm(X, W)
    c2 = 2.0 / n

    def certify(cols):
        """``P_2``, ``D_2`` of the outputs ``cols`` at ``W``, from the margins ``Z``."""
        R = np.maximum(0.0, 1.0 - Z[:, cols])
        SR = S[:, cols] * R
        Wc = W[:, cols]
        loss = np.einsum("ij,ij->j", SR, R)                 # sum_i s_i r_i^2
        primal = 0.5 * lam * np.einsum("ij,ij->j", Wc, Wc) + loss / n
        A = 2.0 * SR                                        # alpha_i = 2 s_i r_i
        Wa = mm(XT, A * Y[:, cols]) / (lam * n)
        # alpha_i^2 / (4 s_i) = s_i r_i^2: the dual's quadratic term is the loss again
        dual = (A.sum(axis=0) - loss) / n - 0.5 * lam * np.einsum("ij,ij->j", Wa, Wa)
        return primal, dual, A

    primal, dual, alpha = certify(np.arange(M))
    gap = primal - dual
    n_iter = np.zeros(M, dtype=np.int64)
    g0 = np.full(M, np.nan)
    live = np.flatnonzero(~(gap <= tols))
    cg_total = 0
    for _ in range(max_iter):
        if live.size == 0:
            break
        Zl = Z[:, live]
        R = np.maximum(0.0, 1.0 - Zl)
        Sl, Yl = S[:, live], Y[:, live]
        G = lam * W[:, live] - c2 * mm(XT, Sl * R * Yl)
        gnorm = np.sqrt(np.einsum("ij,ij->j", G, G))
        first = np.isnan(g0[live])
        g0[live[first]] = gnorm[first]
        flat = gnorm == 0.0
        eta = np.minimum(0.1, np.sqrt(np.where(g0[live] > 0, gnorm / np.where(
            g0[live] > 0, g0[live], 1.0), 0.0)))
        eta = np.where(g0[live] > 0, eta, 0.1)
        rows = np.flatnonzero((R > 0).any(axis=1))          # active in some output
        Xi = X[rows]
        XiT = Xi.T
        D = (c2 * Sl * (R > 0))[rows]

        def hess(P, cols, Xi=Xi, XiT=XiT, D=D):
            return lam * P + mm(XiT, D[:, cols] * mm(Xi, P))

        Xsq = Xi * Xi if dense else Xi.multiply(Xi)
        diag = lam + mm(Xsq.T, D)                           # the Hessians' diagonals (d, M)
        P, k = _cg_block(hess, -G, eta, cg_max_iter, diag=diag)
        cg_total += k
        Q = Yl * mm(X, P)
        t = np.array([_line_search(np, lam, n, W[:, j], P[:, q], Z[:, j], Q[:, q], S[:, j])
                      if not flat[q] else 0.0 for q, j in enumerate(live)])
        W[:, live] += t * P
        Z[:, live] = Y[:, live] * mm(X, W[:, live])          # exact margins for the certificate
        n_iter[live] += 1
        p_l, d_l, a_l = certify(live)
        primal[live], dual[live], alpha[:, live] = p_l, d_l, a_l
        gap[live] = p_l - d_l
        live = live[~((gap[live] <= tols[live]) | flat)]
    return dict(w=W, primal=primal, dual=dual, gap=primal - dual, alpha=alpha, n_iter=n_iter,
                cg_iter=cg_total, products=counts[0], product_columns=counts[1])


#: newton_block multiplies by a dense copy of X (BLAS) when it has at most this many columns
#: and at least this fill: letter (16 columns, all filled), not a9a (123 columns, 11 % filled)
DENSE_COLUMNS = 256
DENSE_FILL = 0.5
#: ... and when that copy takes at most this many bytes
DENSE_BYTES = 1 << 28


def _matmat(A, B):
    """``A @ B`` for a sparse or dense ``A`` and a dense float64 block ``B`` (SciPy's
    compiled loop over the rows, the ``M`` entries of a row of ``B`` side by side; BLAS for
    an array)."""
    return np.asarray(A @ np.ascontiguousarray(B, dtype=np.float64))


def _cg_block(hess, rhs, eta, max_iter, diag=None):
    """:func:`_cg` on the columns of ``rhs`` at once (``hess(P, cols)`` multiplies the
    columns ``cols``); a column stops at ``||r|| <= eta ||rhs||``.  With ``diag`` (the
    Hessians' diagonals, one column per output) the iteration is Jacobi-preconditioned
    (preconditioned CG, Saad 2003, Alg. 9.1), the residual test unchanged.  Returns ``P``
    and the number of block iterations."""
    P = np.zeros_like(rhs)
    R = rhs.copy()
    Zr = R / diag if diag is not None else R
    Dr = Zr.copy()
    rz = np.einsum("ij,ij->j", R, Zr)
    rr = np.einsum("ij,ij->j", R, R)
    stop = eta * eta * rr
    live = np.flatnonzero(rr > stop)
    k = 0
    while k < max_iter and live.size:
        Dl = Dr[:, live]
        Hd = hess(Dl, live)
        step = rz[live] / np.einsum("ij,ij->j", Dl, Hd)
        P[:, live] += step * Dl
        R[:, live] -= step * Hd
        Rl = R[:, live]
        Zl = Rl / diag[:, live] if diag is not None else Rl
        rz_new = np.einsum("ij,ij->j", Rl, Zl)
        Dr[:, live] = Zl + (rz_new / rz[live]) * Dl
        rz[live] = rz_new
        rr_new = np.einsum("ij,ij->j", Rl, Rl)
        live = live[rr_new > stop[live]]
        k += 1
    return P, k


__all__ = ["newton", "newton_block", "primal_dual", "DEFAULT_MAX_ITER"]
