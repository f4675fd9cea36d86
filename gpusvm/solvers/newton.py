"""Primal truncated Newton for the squared-hinge (L2) SVM, with a duality-gap certificate.

Newton-CG on the generalised Hessian of ``P_2`` (docs/algorithms.md, "Weights, and the squared
hinge": the gradient, ``H v`` as two sparse products over the active rows ``I``, the dual
point ``alpha_i = 2 s_i max(0, 1 - y_i <w, x_i>)``, taken at its best multiple ``t alpha``
(:func:`_certify`), whose gap bounds ``P_2(w) - P_2*``; Keerthi
& DeCoste 2005, eqs. 3-5; Chapelle 2007, Sec. 4.2).  Each iteration solves ``H p = -g`` by
Jacobi-preconditioned CG to the relative residual ``min(0.1, sqrt(||g|| / ||g_0||))``
(Eisenstat & Walker's forcing term, as in LIBLINEAR's TRON, Lin, Weng & Keerthi 2008, Alg. 2,
which takes a trust region where this solver searches the line), then minimises ``P_2``
exactly along ``p`` (Keerthi & DeCoste 2005, Sec. 3).  An output stops at a gap ``<= tol``.

:func:`_iterate` runs ``M`` problems on the same rows side by side (every product a sparse
matrix times an ``M``-column block); :func:`newton` runs a backend's outputs as blocks of
one, :func:`newton_block` the folds of one ``C`` as one block.  Products run in float64 in
the backend's array module (SciPy, or cuSPARSE through CuPy); :func:`newton` on a sparse CPU
matrix runs the compiled passes of :class:`_ThreadedProducts` instead, which read ``X`` in its
own dtype, the bias column implicit (no copy of ``X``).  On the CPU the row passes
(line searches, certificates, a block's Hessian weights) are compiled
(:mod:`gpusvm.backends._newton_nb`; :func:`_line_search` is the readable form of the exact
step); on a device backend :mod:`gpusvm.solvers._newton_device` runs the same iterations with
every iterate on the device and a fixed number of host reads per Newton iteration.  A CPU
matrix with a quarter or more nonzeros is copied dense (BLAS), and with at most 128 columns
:func:`newton` then solves each step by Cholesky.
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
import time
from typing import Callable

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from threadpoolctl import ThreadpoolController

from .._arrays import append_constant_column, col_dots
from .. import _threads
from .._threads import BlockPool, fit_threads
from ..backends.base import on_backend_stream
from . import _newton_device
from ._common import SolverResult, retire

#: outer iterations when none is given (Newton converges in tens at most)
DEFAULT_MAX_ITER = 100
#: cap of the CG iterations of one Newton step
MAX_CG_ITER = 250
#: a CPU matrix with at least this fraction of nonzeros and at most :data:`DENSE_MAX_ENTRIES`
#: entries is multiplied as a dense float64 copy (BLAS; no larger than the CSR arrays)
DENSE_MIN_DENSITY = 0.25
DENSE_MAX_ENTRIES = 20_000_000
#: the active rows of a Newton step are copied compactly when they hold at most this fraction
#: of the nonzeros (the copy's bytes), else read in place
GATHER_MAX_FRACTION = 0.25
#: with a dense copy and at most this many columns, :func:`newton` solves ``H p = -g`` by
#: Cholesky: forming ``H`` costs ``|I| d^2``, about ``d / 2`` CG steps of ``2 |I| d``
DIRECT_MAX_FEATURES = 128
#: the line search sorts only the breakpoints of a bracket of the minimiser, bisected on
#: ``phi'`` until it holds at most this many (sorting them all dominated a step on w8a)
LINE_SEARCH_EVENTS = 1024
#: what the compilation notice says the CPU passes cost once, in wall time: ``wait s`` of
#: ``benchmarks/bench_compile.py --cpus 0,1`` (the fitting thread compiles 1.4-1.9 s of CPU on
#: its Newton paths, more where the passes compile for several outputs)
NEWTON_COMPILE_SECONDS = "1-3 s"


def _host(a):
    """A small array of per-output values as a NumPy array."""
    return a.get() if hasattr(a, "get") else np.asarray(a)


def _cols(xp, live, m):
    """Index of the columns ``live`` of an ``m``-column array: a slice (a view) if all."""
    return slice(None) if live.size == m else xp.asarray(live)


class _Products:
    """``X B`` and ``X^T U`` in float64 for dense ``M``-column blocks on the backend's matrix
    (``X^T`` read as CSC: no transposed copy); counts the products and their columns."""

    def __init__(self, X, xp=np, direct=True):
        if X.dtype != np.float64:
            X = X.astype(np.float64)
        n, d = X.shape
        if xp is np and sp.issparse(X) and n * d <= DENSE_MAX_ENTRIES \
                and X.nnz >= DENSE_MIN_DENSITY * n * d:
            X = X.toarray()
        # a device multiplies an explicit transpose (a CSR of X^T: cuSPARSE's transposed
        # product of a CSR matrix scatters with atomics, the slow form)
        self.xp, self.X, self.n, self.d = xp, X, n, d
        self.XT = X.T if xp is np else X.T.tocsr()
        self.direct = direct and isinstance(X, np.ndarray) and d <= DIRECT_MAX_FEATURES
        self.counts = [0, 0]
        self._sqT = None

    def _mul(self, A, B):
        self.counts[0] += 1
        self.counts[1] += B.shape[1]
        if B.shape[1] == 1:          # SciPy's matrix-vector loop: a third faster for X^T u
            return (A @ B[:, 0]).reshape(-1, 1)
        return A @ B

    def mm(self, B):
        return self._mul(self.X, B)

    def rmm(self, U):
        return self._mul(self.XT, U)

    def sq_rmm(self, U):
        """``(X * X)^T U``, the squares elementwise."""
        return self._mul(self.squares(), U)

    def squares(self):
        """``(X * X)^T``, made on first use."""
        if self._sqT is None:
            if self.xp is not np:
                self._sqT = self.XT.multiply(self.XT).tocsr()
            else:
                self._sqT = (self.X * self.X if isinstance(self.X, np.ndarray)
                             else self.X.multiply(self.X)).T
        return self._sqT

    def counted(self):
        """The same products (the matrices shared, not copied) with counts of their own: one
        per thread of a search."""
        own = _Products.__new__(_Products)
        own.__dict__.update(self.__dict__, counts=[0, 0])
        return own

    def rows(self, index):
        """The products of the rows ``index`` only (the active rows of a Newton step)."""
        sub = _Products.__new__(_Products)
        sub.__dict__.update(self.__dict__, X=self.X[index])
        sub.XT, sub.n = sub.X.T, sub.X.shape[0]
        return sub


class _ThreadedProducts(_Products):
    """:class:`_Products` on a :class:`gpusvm._threads.BlockPool`: the compiled row-block
    passes of :class:`gpusvm.backends._threaded.ThreadedCSR` read the CSR ``X`` as it is
    (float32 or float64, no float64 copy of the whole); :meth:`rows` copies the active rows
    on the threads.  ``X B`` equals SciPy's bit for bit, ``X^T U`` adds the blocks' partial
    sums in block order (the same for the same number of threads)."""

    def __init__(self, X, pool, bias=None):
        from ..backends._threaded import ThreadedCSR  # noqa: PLC0415  (threads only)
        self.xp, self.X, self.XT = np, X, None
        self.direct = False
        self.counts = [0, 0]
        self._sqT = None
        self._csr = ThreadedCSR(X, pool, bias)      # bias: a constant last column, not stored
        self.n, self.d = X.shape[0], self._csr.d
        self._index = self._bounds = None

    def _count(self, B):
        self.counts[0] += 1
        self.counts[1] += B.shape[1]

    def mm(self, B):
        self._count(B)
        return self._csr.mm(B, self._index, self._bounds)

    def rmm(self, U):
        self._count(U)
        return self._csr.rmm(U, self._index, self._bounds)

    def sq_rmm(self, U):
        """``(X * X)^T U``, the squares taken on the fly."""
        self._count(U)
        return self._csr.rmm(U, self._index, self._bounds, square=True)

    def rows(self, index):
        """The products of the rows ``index`` only: a compact copy in ``X``'s dtype made on
        the threads when they hold at most :data:`GATHER_MAX_FRACTION` of the nonzeros (a
        product over a few scattered rows reads far more than their bytes), else the rows
        read in place (no copy: the active rows are most of ``X`` far from the optimum, and
        read nearly in order).  Both give the same numbers."""
        sub = _ThreadedProducts.__new__(_ThreadedProducts)
        sub.__dict__.update(self.__dict__)
        ptr = self._csr.indptr
        index = np.ascontiguousarray(index, dtype=np.int64)
        if int((ptr[index + 1] - ptr[index]).sum()) <= GATHER_MAX_FRACTION * int(ptr[-1]):
            sub._csr = self._csr.gather(index)
            sub.n = sub._csr.n
        else:
            sub._index = np.ascontiguousarray(index, dtype=np.int64)
            sub._bounds = self._csr.bounds(sub._index)
            sub.n = sub._index.size
        return sub


def _direct_step(sub, D, lam, g):
    """``p = -H^{-1} g``, ``H = lam I + X_I^T diag(D) X_I`` formed (dense ``X_I``, few
    columns) and solved by Cholesky (``H`` is positive definite for ``lam > 0``)."""
    H = (sub.X.T * D) @ sub.X
    H[np.diag_indices_from(H)] += lam
    try:
        return scipy.linalg.cho_solve(scipy.linalg.cho_factor(H, lower=True, check_finite=False),
                                      -g, check_finite=False)
    except np.linalg.LinAlgError:   # lam lost in the rounding of X_I^T D X_I (huge C or
        # weights, fewer active rows than columns): the least-squares step, a descent direction
        return scipy.linalg.lstsq(H, -g, check_finite=False)[0]


def _line_search(xp, lam, n, w, p, z, q, s):
    """Exact minimiser ``t > 0`` of ``P_2(w + t p)`` (a convex piecewise quadratic in ``t``).

    ``z_i = y_i <w, x_i>``, ``q_i = y_i <p, x_i>``, ``r_i = 1 - z_i``: between breakpoints
    ``phi'(t) = a + b t``, ``a = lam <w, p> - (2/n) sum_active s_i q_i r_i``, ``b = lam ||p||^2
    + (2/n) sum_active s_i q_i^2``; row ``i`` leaves the active set at ``t_i = r_i / q_i``
    when ``q_i > 0 < r_i`` and enters there when ``q_i < 0``, ``r_i <= 0``.  ``phi'``
    increases: the root lies in the first segment whose right end has ``phi' >= 0``.  Only
    the breakpoints of a bracket ``(lo, hi]`` are sorted (``hi`` the first of ``1, 2, 4,
    ...`` with ``phi'(hi) >= 0``, bisected while it holds more than
    :data:`LINE_SEARCH_EVENTS`), with ``a``, ``b`` taken at ``lo``.
    """
    r = 1.0 - z
    active = r > 0
    c = 2.0 / n
    wp, pp = lam * float(w @ p), lam * float(p @ p)
    sqr, sqq = s * q * r, s * q * q
    leave = active & (q > 0)
    events = leave | ((~active) & (q < 0))

    def slope(t):                               # phi'(t), from its definition
        return wp + pp * t - c * float(xp.sum(s * q * xp.maximum(0.0, r - t * q)))

    def coefficients(lo):                       # a, b of the segment just right of lo
        u = r - lo * q
        act = (u > 0) | ((u == 0) & (q < 0))
        return wp - c * float(xp.sum(sqr[act])), pp + c * float(xp.sum(sqq[act]))

    if not bool(events.any()):
        a0, b0 = coefficients(0.0)
        return -a0 / b0 if b0 > 0 else 0.0
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
        return -a0 / b0 if b0 > 0 else 0.0
    sel = idx[keep]
    t_ev = t_ev[keep]
    sign = xp.where(leave[sel], 1.0, -1.0)     # +1: the row leaves the active set
    order = xp.argsort(t_ev)
    t_ev, da, db = t_ev[order], (sign * c * sqr[sel])[order], (-sign * c * sqq[sel])[order]
    a = a0 + xp.concatenate([xp.zeros(1), xp.cumsum(da)])
    b = b0 + xp.concatenate([xp.zeros(1), xp.cumsum(db)])
    ok = a + b * xp.concatenate([t_ev, xp.full(1, np.inf)]) >= 0   # phi'(segment end) >= 0
    ok[-1] = True
    k = int(xp.argmax(ok))
    curvature = max(float(b[k]), pp)            # phi'' >= lam ||p||^2 (rounding at huge C)
    return float(-a[k] / curvature) if curvature > 0 else 0.0


def _line_searches(xp, lam, n, W, P, Z, Q, S, live):
    """The exact steps of the outputs ``live`` (columns of ``W``, ``Z``, ``S``; ``P``, ``Q``
    hold only theirs): on the CPU by the compiled pass
    :func:`gpusvm.backends._newton_nb.line_searches`, elsewhere by :func:`_line_search`."""
    zcols, scols = _live_columns(live, W.shape[1], S.shape[1])
    if xp is not np:
        return xp.asarray([_line_search(xp, lam, n, W[:, j], P[:, q], Z[:, j], Q[:, q],
                                        S[:, k]) for q, (j, k) in enumerate(zip(zcols, scols))])
    wp = lam * col_dots(np, W[:, _cols(np, live, W.shape[1])], P)
    pp = lam * col_dots(np, P, P)
    out = np.empty(live.size)
    _compiled("line_searches", np.ascontiguousarray(Z), np.ascontiguousarray(Q),
              np.ascontiguousarray(S), zcols, scols, np.ascontiguousarray(wp),
              np.ascontiguousarray(pp), 2.0 / n, out)
    return out


def _certify(prod, Y, S, lam, W, Z, ix):
    """``P_2``, ``D_2`` (host arrays), ``alpha`` and ``w(alpha)`` of the columns ``ix`` at the
    margins ``Z``.  ``w(alpha)`` is the product the gradient there needs, ``g = lam (w -
    w(alpha))``: :func:`_iterate` takes it from here."""
    xp, n = prod.xp, prod.n
    if xp is np:                    # one compiled pass over the margins of every output
        zcols, scols = _live_columns(ix, Z.shape[1], S.shape[1])
        A, AY = np.empty((n, zcols.size)), np.empty((n, zcols.size))
        loss, asum = np.empty(zcols.size), np.empty(zcols.size)
        _compiled("certificate_terms", np.ascontiguousarray(Z), np.ascontiguousarray(Y),
                  np.ascontiguousarray(S), zcols, scols, A, AY, loss, asum)
    else:
        R = xp.maximum(0.0, 1.0 - Z[:, ix])
        SR = S[:, ix] * R
        loss = col_dots(xp, SR, R)                               # sum_i s_i r_i^2
        A = 2.0 * SR                                            # alpha_i = 2 s_i r_i
        AY, asum = A * Y[:, ix], A.sum(axis=0)
    Wa = prod.rmm(AY) / (lam * n)
    primal = 0.5 * lam * col_dots(xp, W[:, ix], W[:, ix]) + loss / n
    # alpha_i^2 / (4 s_i) = s_i r_i^2: the dual's quadratic term is the loss again
    # the dual at t alpha, t >= 0 (feasible: the squared hinge's alpha has no upper bound), is
    # D(t) = t L - t^2 Q; the certificate takes its best multiple t* = L / (2 Q), D(t*) =
    # L^2 / (4 Q) >= D(1): the same near the optimum, far tighter while a few rows carry a
    # large C's loss (a separable set of a9a's dimensions, C = 100: 21 Newton iterations to
    # certify 1e-4 with t = 1, where the primal was within 2e-5 of P* after 6)
    L = asum / n
    Q = loss / n + 0.5 * lam * col_dots(xp, Wa, Wa)
    positive = Q > 0
    t = xp.where(positive, L / (2.0 * xp.where(positive, Q, 1.0)), 1.0)
    dual = t * L - t * t * Q
    return _host(primal), _host(dual), A * t, Wa


def _compiled(name, *args):
    """Call the compiled pass ``name`` of :mod:`gpusvm.backends._newton_nb` (imported when a
    CPU Newton fit first needs it; one compilation notice for the three passes)."""
    from ..backends import _newton_nb  # noqa: PLC0415
    from ..backends.numba_ import call_compiled  # noqa: PLC0415
    return call_compiled(getattr(_newton_nb, name), np.dtype(np.float64), *args, stacklevel=5,
                         what="the Newton solver's CPU passes", seconds=NEWTON_COMPILE_SECONDS,
                         group="newton")


def _live_columns(ix, m, s_columns):
    """int64 indices of the columns ``ix`` (a slice of all ``m``, or an index array) and the
    matching columns of a weight array with ``s_columns`` columns (one: shared)."""
    zcols = np.arange(m, dtype=np.int64) if isinstance(ix, slice) else \
        np.ascontiguousarray(ix, dtype=np.int64)
    return zcols, (zcols if s_columns > 1 else np.zeros_like(zcols))


def _hessian_weights(xp, Z, S, ix, c):
    """``D`` of the generalised Hessian for the columns ``ix``, ``c s_i`` on the rows active
    per output (``z_i < 1``) and 0 elsewhere, and the rows active in any of them.  On the CPU
    a block of several outputs takes the compiled pass; one output (every step of
    :func:`newton`) the array expressions, the same numbers, which spares a first Newton fit
    one compilation."""
    if xp is np:
        zcols, scols = _live_columns(ix, Z.shape[1], S.shape[1])
        if zcols.size == 1:
            A = Z[:, zcols] < 1.0
            return S[:, scols] * A * c, np.flatnonzero(A[:, 0])
        SA = np.empty((Z.shape[0], zcols.size))
        rows = _compiled("hessian_weights", np.ascontiguousarray(Z), np.ascontiguousarray(S),
                         zcols, scols, c, SA)
        return SA, rows
    A = Z[:, ix] < 1.0
    return S[:, ix] * A * c, xp.flatnonzero(A.any(axis=1))


def primal_dual(products, y, s, lam, w):
    """``P_2(w)``, ``D_2(alpha(w))`` and the margins ``z = y * (X w)`` of one problem."""
    z = y * products.mm(w.reshape(-1, 1))[:, 0]
    p, d, _, _ = _certify(products, y.reshape(-1, 1), s.reshape(-1, 1), lam,
                          w.reshape(-1, 1), z.reshape(-1, 1), slice(None))
    return float(p[0]), float(d[0]), z


def _iterate(prod, Y, S, lam, tols, W, max_iter, cg_max_iter, *, after=None, certify_first=True):
    """Newton-CG with exact line searches on the ``M`` problems ``Y[:, j]``, ``S[:, j]`` at
    once, ``W`` (d, M) updated in place: block products (``I`` the rows active in any output,
    ``D`` zero where a row is inactive for an output), CG and line-search scalars per output.
    An output leaves the block when its certificate is ``<= tol`` (before the first step too
    if ``certify_first``), its gradient is zero, or ``after(ran, live, n_iter, primal,
    dual)``, called after each iteration, returns a stop reason for the live ones."""
    xp, n, M = prod.xp, prod.n, Y.shape[1]
    c2 = 2.0 / n
    Z = Y * prod.mm(W)
    primal, dual, alpha, Wa = _certify(prod, Y, S, lam, W, Z, slice(None))
    n_iter = np.zeros(M, dtype=np.int64)
    g0 = np.zeros(M)
    reasons = np.full(M, "max_iter", dtype=object)
    done = (primal - dual <= tols) & certify_first
    reasons[done] = "tol"
    live = np.flatnonzero(~done)
    cg_total = 0
    for _ in range(max_iter):
        if live.size == 0:
            break
        ix = _cols(xp, live, M)
        # g = lam w - (2/n) X^T (S R Y) = lam (w - w(alpha)): the certificate of this very
        # point made the product (one pass over X an iteration fewer)
        G = lam * (W[:, ix] - Wa[:, ix])
        gnorm = np.sqrt(_host(col_dots(xp, G, G)))
        g0[live] = np.where(n_iter[live] == 0, gnorm, g0[live])
        if not gnorm.all():                                 # at the optimum: no step
            reasons[live[gnorm == 0]] = "tol"
            keep = xp.asarray(np.flatnonzero(gnorm))
            live, gnorm, G = live[gnorm > 0], gnorm[gnorm > 0], G[:, keep]
            if live.size == 0:
                break
            ix = _cols(xp, live, M)
        eta = np.minimum(0.1, np.sqrt(gnorm / g0[live]))
        SA, rows = _hessian_weights(xp, Z, S, ix, c2)      # 2 s_i / n on the active rows
        sub = prod.rows(rows)
        D = xp.take(SA, rows, axis=0)
        if sub.direct:
            P = np.column_stack([_direct_step(sub, D[:, q], lam, G[:, q])
                                 for q in range(live.size)])
            k = 0
        else:           # Jacobi preconditioner: diag(H) = lam + (X * X)^T (2 S A / n)
            P, k = _cg(xp, lambda V, c: lam * V + sub.rmm(D[:, c] * sub.mm(V)), -G, eta,
                       cg_max_iter, 1.0 / (lam + prod.sq_rmm(SA)))
        cg_total += k
        Q = Y[:, ix] * prod.mm(P)
        step = _line_searches(xp, lam, n, W, P, Z, Q, S, live)
        W[:, ix] += step * P
        Z[:, ix] += step * Q            # y * X (w + t p), the margins without a pass over X
        n_iter[live] += 1
        primal[live], dual[live], alpha[:, ix], Wa[:, ix] = _certify(prod, Y, S, lam, W, Z, ix)
        live = retire(live, primal, dual, tols, reasons, n_iter, after)
    return primal, dual, alpha, n_iter, list(reasons), cg_total


def _cg(xp, hess, rhs, eta, max_iter, inv_diag):
    """Jacobi-preconditioned CG (Saad 2003, Alg. 9.1) for ``H P = rhs`` column by column
    from ``P = 0``, ``hess(V, cols)`` multiplying the columns ``cols``; column ``j`` stops at
    ``||r|| <= eta_j ||rhs_j||``.  Returns ``P`` and the number of block iterations."""
    m = rhs.shape[1]
    P = xp.zeros_like(rhs)
    R = rhs.copy()
    Zr = inv_diag * R
    Dr = Zr.copy()
    rz = _host(col_dots(xp, R, Zr))
    rr = _host(col_dots(xp, R, R))
    stop = eta * eta * rr
    live = np.flatnonzero(rr > stop)
    k = 0
    while k < max_iter and live.size:
        ix = _cols(xp, live, m)
        Dl = Dr[:, ix]
        Hd = hess(Dl, ix)
        step = xp.asarray(rz[live] / _host(col_dots(xp, Dl, Hd)))
        P[:, ix] += step * Dl
        R[:, ix] -= step * Hd
        Rl = R[:, ix]
        Zl = inv_diag[:, ix] * Rl
        rz_new = _host(col_dots(xp, Rl, Zl))
        Dr[:, ix] = Zl + xp.asarray(rz_new / rz[live]) * Dl
        rz[live] = rz_new
        live = live[_host(col_dots(xp, Rl, Rl)) > stop[live]]
        k += 1
    return P, k


class _OneBlasThread(contextlib.ContextDecorator):
    """BLAS on one thread while any solver call of any thread runs, restored after the last.

    The solvers' BLAS calls are products of ``d``-vectors, which a second thread does not
    speed up.  BLAS's thread count is the process's: two overlapping calls each saving and
    restoring what they found would leave it at 1 for good, so the first call in sets it
    and the last one out restores the original, under a lock."""

    def __init__(self):
        self._lock = threading.Lock()
        self._depth = 0
        self._limiter = None

    def __enter__(self):
        with self._lock:
            if self._depth == 0:
                self._limiter = _threadpools().limit(limits=1, user_api="blas")
            self._depth += 1

    def __exit__(self, *exc):
        with self._lock:
            self._depth -= 1
            if self._depth == 0:
                self._limiter.restore_original_limits()
                self._limiter = None


_BLAS_ONE_THREAD = _OneBlasThread()


@functools.lru_cache(maxsize=1)
def _threadpools() -> ThreadpoolController:
    """The process's thread pools, found once (about 10 ms a search)."""
    return ThreadpoolController()


@_BLAS_ONE_THREAD
@on_backend_stream
def newton(backend, *, lam: float, tol: float = 1e-3, max_iter: int = DEFAULT_MAX_ITER,
           y=None, sample_weight=None, w0=None, max_time: float | None = None,
           callback: Callable | None = None, progress=None, cg_max_iter: int = MAX_CG_ITER,
           products: _Products | None = None, n_jobs: int = 1,
           bias: float | None = None) -> SolverResult:
    """Minimise the squared-hinge SVM objective by primal truncated Newton (Newton-CG).

    Parameters
    ----------
    backend : Backend
        Supplies the CSR matrix ``backend.X`` (bias column included) and, unless ``y`` is
        given, the labels ``backend.y``.
    lam : float
        Regularisation ``lambda > 0``.
    tol : float or array of shape (M,), default=1e-3
        Stop when the duality gap ``P_2(w) - D_2(alpha(w))`` is ``<= tol`` (per output).
    max_iter, cg_max_iter : int, default=100, 250
        Newton iterations (0: ``w0`` certified, no step), and CG iterations of one step.
    y, sample_weight : arrays of shape (n,) or (n, M), optional
        Labels in {-1, +1} (M columns: M problems on the same rows, one after the other,
        sharing the products) and row weights ``s_i >= 0`` (None: all 1; one column: shared).
    w0 : array of shape (d,) or (d, M), optional
        Starting point (warm start); zeros by default.
    max_time : float or None
        Time budget in seconds (checked after every Newton iteration).
    callback, progress : callable or None
        After every Newton iteration, ``callback(iteration, primal, elapsed)`` (``False``
        stops) and ``progress(iteration, primal, gap)`` (iterations counted over the outputs).
    products : _Products, optional
        Reuse the float64 products of an earlier call on the same backend.
    n_jobs : int, default=1
        Threads (resolved, ``>= 1``).  Above 1, on the CPU with a sparse ``X`` of at
        least :data:`gpusvm._threads.THREAD_MIN_NNZ` nonzeros (and numba), the sparse
        products are compiled passes over ``n_jobs`` fixed row blocks
        (:class:`_ThreadedProducts`); below that they run on one thread (the same passes
        where numba imports and ``X`` is multiplied as sparse, else SciPy's).  The same
        ``n_jobs`` gives the same result bit for bit; ``X^T u`` is summed by blocks, so the
        iterates differ from one thread's by rounding (each certified to ``tol``).
        ``extra["threads"]``: the threads used.
    bias : float, optional
        ``backend.X`` lacks the bias column: the products add a constant last column of this
        value without copying ``X`` (the same numbers as the column appended), and ``w`` has
        ``d + 1`` entries.  Products other than the compiled ones append it (a copy).

    Returns
    -------
    SolverResult
        ``w`` (``(d,)`` or ``(d, M)``), ``b = 0``, ``n_iter`` (the most Newton iterations of
        any output), ``history`` with rows ``(iteration, P, D, gap, elapsed)`` (a list of
        them per output for M > 1), ``extra``: ``primal``, ``dual``, ``gap`` (floats, or
        arrays of shape ``(M,)``), ``alpha`` (the dual point, y's shape), ``cg_iter``
        (total CG iterations), ``n_iters`` and ``stop_reasons`` (per output), ``products``.
    """
    if not lam > 0:
        raise ValueError(f"lam must be > 0, got {lam!r}")
    if not (isinstance(max_iter, (int, np.integer)) and max_iter >= 0):
        raise ValueError(f"max_iter must be a non-negative integer, got {max_iter!r}")
    xp = getattr(backend, "xp", np)
    if xp is not np and products is None:
        _newton_device.check_memory(backend)
    threads, pool = 1, None
    compiled = products is None and _compiled_products(backend.X, xp, bias)
    if n_jobs > 1 and compiled and backend.X.nnz >= _threads.THREAD_MIN_NNZ:
        threads = fit_threads(n_jobs, backend.X.nnz, "numba")
    elif products is None and not compiled and xp is np and sp.issparse(backend.X) and _numba():
        from ..backends._threaded import ask_ahead  # noqa: PLC0415
        ask_ahead(backend.X, gather=True)   # what a fit at size runs, cached meanwhile
    if compiled:
        # closed at the end (an exception leaves it to the collector)
        pool = BlockPool(threads)
        prod = _ThreadedProducts(sp.csr_matrix(backend.X), pool, bias)
    elif products is None and bias is not None:
        prod = _Products(append_constant_column(sp.csr_matrix(backend.X), bias), xp)
    else:
        prod = products if products is not None else _Products(backend.X, xp)
    Y = xp.asarray(backend.y if y is None else y, dtype=np.float64)
    multi = Y.ndim == 2
    Y = Y.reshape(prod.n, -1)
    M = Y.shape[1]
    S = xp.ones((prod.n, 1)) if sample_weight is None else \
        xp.asarray(sample_weight, dtype=np.float64).reshape(prod.n, -1)
    tols = np.broadcast_to(np.asarray(tol, dtype=np.float64), (M,))
    # weights above 1 scaled to at most 1, their scale moved to lam (the same minimiser):
    # the squares of CG's residuals and of the dual point, of the weights' size, overflowed
    # at sample_weight = 1e200 (CG returned p = 0, the fit stayed at w = 0); the objectives
    # are reported in the caller's units
    scale = float(_host(S.max())) if S.size else 1.0
    if scale > 1.0:
        S, lam, tols = S / scale, lam / scale, tols / scale
    else:
        scale = 1.0
    W0 = None if w0 is None else xp.asarray(w0, dtype=np.float64).reshape(prod.d, -1)
    run = _iterate if xp is np else functools.partial(_newton_device.iterate,
                                                       read=backend.to_host)
    start = time.perf_counter()
    ws, alphas, histories, out = [], [], [], np.zeros((5, M))
    reasons, done = [], 0
    for c in range(M):              # one output after the other, each a block of one
        history = []

        def after(ran, live, n_iter, primal, dual, history=history):
            elapsed = time.perf_counter() - start
            it, p, gap = (int(n_iter[0]), scale * float(primal[0]),
                          scale * float(primal[0] - dual[0]))
            history.append((it, p, scale * float(dual[0]), gap, elapsed))
            if progress is not None:
                progress(done + it, p, gap)
            if live.size and callback is not None and callback(it, p, elapsed) is False:
                return "callback"
            if live.size and max_time is not None and elapsed >= max_time:
                return "max_time"
            return None

        w = xp.zeros((prod.d, 1)) if W0 is None else \
            W0[:, min(c, W0.shape[1] - 1)].reshape(-1, 1).copy()
        primal, dual, alpha, n_iter, why, k = run(
            prod, xp.ascontiguousarray(Y[:, c:c + 1]), S[:, min(c, S.shape[1] - 1)][:, None],
            lam, tols[c:c + 1], w, max_iter, cg_max_iter, after=after, certify_first=False)
        primal, dual = scale * primal, scale * dual
        if not history:
            history.append((0, float(primal[0]), float(dual[0]), float(primal[0] - dual[0]),
                            time.perf_counter() - start))
        out[:, c] = primal[0], dual[0], primal[0] - dual[0], n_iter[0], k
        ws.append(w)
        alphas.append(alpha * scale if scale != 1.0 else alpha)
        histories.append(history)
        reasons += why
        done += int(n_iter[0])
    primal, dual, gap, n_iters, cg = out
    n_iters = [int(i) for i in n_iters]
    W, alpha = xp.concatenate(ws, axis=1), xp.concatenate(alphas, axis=1)
    if multi:
        extra = dict(primal=primal, dual=dual, gap=gap, alpha=alpha)
        history, reason = histories, next((r for r in reasons if r != "tol"), "tol")
    else:
        W, alpha = W[:, 0], alpha[:, 0]
        extra = dict(primal=primal[0], dual=dual[0], gap=gap[0], alpha=alpha)
        history, reason = histories[0], reasons[0]
    if pool is not None:
        pool.close()
    extra.update(cg_iter=int(cg.sum()), n_iters=n_iters, stop_reasons=reasons,
                 histories=histories, products=prod, threads=threads)
    if xp is not np and hasattr(backend, "to_host"):
        W, extra["alpha"] = backend.to_host(W), backend.to_host(extra["alpha"])
    return SolverResult(w=np.asarray(W), b=0.0, n_iter=max(n_iters), history=history,
                        stop_reason=reason, extra=extra)


def _compiled_products(X, xp, bias=None) -> bool:
    """Whether :func:`newton` multiplies ``X`` by the compiled passes of
    :class:`_ThreadedProducts` (on one thread or more): a sparse CPU matrix multiplied as
    sparse (``bias``: counting the implicit column), with numba.  They read ``X`` in its own
    dtype with float64 sums, where SciPy's products would need a float64 copy of a float32
    ``X``, the squares' and the active rows' copies (8x the CSR's bytes at the peak of a fit
    in ``benchmarks/bench_memory.py``, against 1.4x).  From :data:`gpusvm._threads.THREAD_MIN_NNZ`
    nonzeros on: below, the copies are small and SciPy's products need no compilation (a
    first fit would wait for the passes' compilation, which the compiling process does
    meanwhile for a later fit at size)."""
    return xp is np and sp.issparse(X) and X.nnz >= _threads.THREAD_MIN_NNZ and \
        not _dense_copy(X, bias is not None) and _numba()


def _dense_copy(X, bias=False) -> bool:
    """Whether :class:`_Products` multiplies ``X`` (``bias``: with a column of ones more) as
    a dense copy (BLAS)."""
    n, d = X.shape
    d, nnz = d + bias, X.nnz + n * bias
    return n * d <= DENSE_MAX_ENTRIES and nnz >= DENSE_MIN_DENSITY * n * d


def _numba() -> bool:
    from ..backends import numba_available  # noqa: PLC0415
    return numba_available()


def block_products(X) -> _Products:
    """The products :func:`newton_block` runs on ``X`` (float64 CSR, ``(X * X)^T`` made now):
    pass it as ``products=`` to every block of a search on the same rows, from any thread
    (each block counts its products apart)."""
    products = _Products(sp.csr_matrix(X, dtype=np.float64), direct=False)
    products.squares()
    return products


def device_block_products(backend) -> _Products:
    """The products :func:`newton_block` runs on a device backend's matrix (a float64 copy on
    the device, cuSPARSE through CuPy), reading the host through the backend's counted
    ``to_host``: pass it as ``products=`` and the block runs on the device."""
    _newton_device.check_memory(backend)
    with backend.activate():
        products = _Products(backend.X, backend.xp, direct=False)
        products.squares()
    products.read = backend.to_host
    products.activate = backend.activate
    return products


@_BLAS_ONE_THREAD
def newton_block(X, Y, S, lam: float, tol, *, W0=None, max_iter: int = DEFAULT_MAX_ITER,
                 cg_max_iter: int = MAX_CG_ITER, products=None) -> dict:
    """:func:`newton` on ``M`` outputs at once: every product reads ``X`` once for all of them.

    An output leaves the block when its certificate is ``<= tol``.  Used by the one-pass
    search (:class:`~gpusvm.estimators.cv.SDCASVCCV`), whose outputs are the folds of one
    ``C``, warm-started from the previous ``C``.  Every step is taken by CG (no direct
    solves), so the products counted are those a device would run.

    Parameters
    ----------
    X : scipy.sparse.csr_matrix of shape (n, d) or None
        Not read when ``products`` (:func:`block_products` of ``X``, or
        :func:`device_block_products` of a device backend: the block then runs on the
        device, :mod:`gpusvm.solvers._newton_device`) are given.
    Y, S : ndarray of shape (n, M)
        Labels in {-1, +1} and each output's row weights (``>= 0``; 0 leaves a row out).
    lam : float
    tol : float or ndarray of shape (M,)
        Duality gap at which each output stops.
    W0 : ndarray of shape (d, M), optional
        Starting points.
    max_iter, cg_max_iter, products
        As in :func:`newton`.

    Returns
    -------
    dict
        ``w`` (d, M), ``primal``, ``dual``, ``gap`` (M,), ``alpha`` (n, M; in the products'
        array module: left on the device by :func:`device_block_products`), ``n_iter`` (M,)
        Newton iterations per output, ``cg_iter`` (total block CG iterations),
        ``products`` and ``product_columns`` (the sparse-times-block products this call
        made and their columns summed, for the performance model).
    """
    prod = block_products(X) if products is None else products.counted()
    M = np.shape(Y)[1]
    tols = np.broadcast_to(np.asarray(tol, dtype=np.float64), (M,))
    if prod.xp is not np:           # device_block_products: the block runs on the device
        xp = prod.xp
        with prod.activate():
            Y, S = (xp.asarray(np.asarray(a, dtype=np.float64)) for a in (Y, S))
            W = xp.zeros((prod.d, M)) if W0 is None else \
                xp.asarray(np.array(W0, dtype=np.float64).reshape(-1, M))
            primal, dual, alpha, n_iter, _, cg = _newton_device.iterate(
                prod, Y, S, lam, tols, W, max_iter, cg_max_iter, read=prod.read)
            W = prod.read(W)
    else:
        Y = np.asarray(Y, dtype=np.float64)
        S = np.asarray(S, dtype=np.float64)
        W = np.zeros((prod.d, M)) if W0 is None else \
            np.array(W0, dtype=np.float64).reshape(-1, M)
        primal, dual, alpha, n_iter, _, cg = _iterate(prod, Y, S, lam, tols, W, max_iter,
                                                      cg_max_iter)
    return dict(w=W, primal=primal, dual=dual, gap=primal - dual, alpha=alpha, n_iter=n_iter,
                cg_iter=cg, products=prod.counts[0], product_columns=prod.counts[1])


__all__ = ["newton", "newton_block", "block_products", "device_block_products", "primal_dual",
           "DEFAULT_MAX_ITER"]
