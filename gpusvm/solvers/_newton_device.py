"""The Newton iterations of :mod:`gpusvm.solvers.newton` on a device, with a fixed number of
host reads per Newton iteration.

The same method as :func:`gpusvm.solvers.newton._iterate` (Newton-CG on the generalised
Hessian of ``P_2``, Jacobi-preconditioned CG to Eisenstat & Walker's forcing term, the exact
line search, the duality-gap certificate), written for an array module whose arrays live on a
device (CuPy, or the CPU emulator's stand-in): every iterate, every product (the float64
matrix's sparse products, cuSPARSE through CuPy) and every scalar of CG and the line search
stays there, and the host reads only through ``read`` (the backend's
:meth:`~gpusvm.backends.device.backend.DeviceBackend.to_host`, which counts):

* one read per Newton iteration: the live outputs' primal and dual values (the stopping
  rule, the history) and gradient norms (an output at its optimum takes no step);
* CG's stopping test is evaluated on the device after every step: a column whose residual
  meets its forcing term is frozen there (its updates multiplied by zero, so its iterate is
  the one the host CG stops at); the host reads which columns are still live once per batch
  of steps: the first batch as long as the previous Newton step's CG (at least
  :data:`CG_FIRST_BATCH`), each further one half the steps so far, so that a solve of at
  most ``cg_max_iter`` steps makes at most :func:`cg_reads_bound` reads whatever its steps
  (10 for 250; typically one to three).  Converged columns leave the block at those reads.
  The last batch runs on past the step at which the last column converged, by less than a
  third of the steps (frozen columns cost their products but change nothing): on a9a and
  w8a the device ran 1.28 times the CG steps the CPU needed.  Projecting the next batch
  from the residual's rate over the last one saved no more (preconditioned CG's residual
  stalls, then falls), so the batches only grow.

Differences from the CPU form, none of them in the iterates beyond rounding: the Hessian
products run over all rows with ``D = 0`` on the inactive ones (no row gather, whose size the
host would have to read), and the line search sorts every breakpoint on the device (the CPU
sorts only a bracket found by host-side bisection) and walks the segments with cumulative
sums.  Products are float64 (the data's float32 copied once to float64), so CG accumulates in
float64 as on the CPU.
"""

from __future__ import annotations

import math

import numpy as np

from .._arrays import col_dots
from ._common import retire

#: the fewest CG steps of the first batch of a Newton step's solve (the later ones: half the
#: steps so far)
CG_FIRST_BATCH = 8


def cg_reads_bound(max_iter: int, first: int = CG_FIRST_BATCH) -> int:
    """The most host reads one CG solve of at most ``max_iter`` steps makes: one after each
    batch, the first ``first`` steps (at least), each further one half the steps so far."""
    reads, done = 1, max(1, first)
    while done < max_iter:
        done += max(1, math.ceil(done / 2))
        reads += 1
    return reads


def reads_per_iteration_bound(cg_max_iter: int) -> int:
    """The most host reads of one Newton iteration: the certificate's, and CG's."""
    return 1 + cg_reads_bound(cg_max_iter)


def device_bytes(n: int, d: int, nnz: int, m: int = 1, index_bytes: int = 4) -> int:
    """Device memory a Newton fit adds to the backend's: float64 CSR copies of ``X``, ``X^T``
    and its squares (12 bytes a nonzero each, 16 with int64 indices, and their row pointers),
    and about twelve float64 ``(n, m)`` arrays (margins, weights, the line search's sorted
    breakpoints and sums) and ten ``(d, m)`` ones (iterates, CG's vectors)."""
    return 3 * (8 + index_bytes) * nnz + 8 * (n + 2 * d + 3) \
        + 8 * m * (12 * n + 10 * d)


def check_memory(backend, m: int = 1) -> None:
    """Raise MemoryError with what to do when the device has too little free memory for a
    Newton fit of ``m`` outputs on ``backend``'s data (no check where the runtime reports
    none, as the emulated one)."""
    free = backend.runtime.free_bytes()
    need = device_bytes(backend.n, backend.d, backend.nnz, m,
                        np.dtype(getattr(backend, "csr_index", np.int32)).itemsize)
    if free is not None and need > free:
        mib = 2.0**20
        raise MemoryError(
            f"primal Newton on the {backend.name} backend needs about {need / mib:.0f} MiB of "
            f"device memory beside the data (float64 copies of X, X^T and its squares, and "
            f"per-row vectors) but only {free / mib:.0f} MiB are free; use dual=True "
            "(SDCA, which keeps one copy of the data), train on fewer rows, or use "
            "backend='numba' (Newton on the CPU)")


def _cols(xp, live, m):
    """Index of the columns ``live``: a slice (views) if all ``m``, else a device index."""
    return slice(None) if live.size == m else xp.asarray(live)


def certify(prod, Y, S, lam, W, Z):
    """``P_2``, ``D_2``, ``alpha`` and ``w(alpha)`` of every column at the margins ``Z``, all
    on the device (see :func:`gpusvm.solvers.newton._certify`)."""
    xp, n = prod.xp, prod.n
    R = xp.maximum(0.0, 1.0 - Z)
    SR = S * R
    loss = col_dots(xp, SR, R)                               # sum_i s_i r_i^2
    A = 2.0 * SR                                            # alpha_i = 2 s_i r_i
    Wa = prod.rmm(A * Y) / (lam * n)
    primal = 0.5 * lam * col_dots(xp, W, W) + loss / n
    # the best multiple t alpha of the dual point, as on the host (newton._certify)
    L = A.sum(axis=0) / n
    Q = loss / n + 0.5 * lam * col_dots(xp, Wa, Wa)
    positive = Q > 0
    t = xp.where(positive, L / (2.0 * xp.where(positive, Q, 1.0)), 1.0)
    dual = t * L - t * t * Q
    return primal, dual, A * t, Wa


def line_search(xp, lam, n, W, P, Z, Q, S):
    """The exact minimisers ``t`` of ``P_2(w + t p)`` of every column, on the device.

    The convex piecewise quadratic of :func:`gpusvm.solvers.newton._line_search`: ``phi'(t) =
    a + b t`` between breakpoints, ``a``, ``b`` at ``t = 0`` from the rows active there, each
    breakpoint ``t_i = r_i / q_i > 0`` (a row leaving, ``q_i > 0 < r_i``, or entering, ``q_i <
    0``, ``r_i <= 0``) changing them; every breakpoint sorted (``inf`` for the rows without
    one), the segments' ``a``, ``b`` as cumulative sums, and the step the root in the first
    segment whose right end has ``phi' >= 0``.  A zero direction gives ``t = 0``.
    """
    c = 2.0 / n
    R = 1.0 - Z
    SQ = S * Q
    sqr, sqq = SQ * R, SQ * Q
    act = (R > 0) | ((R == 0) & (Q < 0))
    a0 = lam * col_dots(xp, W, P) - c * xp.where(act, sqr, 0.0).sum(axis=0)
    b0 = lam * col_dots(xp, P, P) + c * xp.where(act, sqq, 0.0).sum(axis=0)
    leave = (R > 0) & (Q > 0)
    events = leave | ((R <= 0) & (Q < 0))
    T = xp.where(events, R / xp.where(events, Q, 1.0), np.inf)
    T = xp.where(T > 0, T, np.inf)
    order = xp.argsort(T, axis=0)
    sign = xp.where(leave, c, -c)                          # +c: the row leaves the active set
    da = xp.take_along_axis(xp.where(T < np.inf, sign * sqr, 0.0), order, axis=0)
    db = xp.take_along_axis(xp.where(T < np.inf, -sign * sqq, 0.0), order, axis=0)
    m = W.shape[1]
    zero = xp.zeros((1, m))
    a = a0 + xp.concatenate([zero, xp.cumsum(da, axis=0)])
    b = b0 + xp.concatenate([zero, xp.cumsum(db, axis=0)])
    ends = xp.concatenate([xp.take_along_axis(T, order, axis=0), xp.full((1, m), np.inf)])
    with np.errstate(invalid="ignore"):
        ok = a + b * ends >= 0                              # phi'(segment end) >= 0
    ok[-1] = True
    k = xp.argmax(ok, axis=0)[None, :]
    ak = xp.take_along_axis(a, k, axis=0)[0]
    bk = xp.take_along_axis(b, k, axis=0)[0]
    return xp.where(bk > 0, -ak / xp.where(bk > 0, bk, 1.0), 0.0)


def cg(xp, hess, rhs, eta, max_iter, inv_diag, read, first_batch):
    """Jacobi-preconditioned CG for ``H P = rhs`` column by column from ``P = 0`` (the
    iterates of :func:`gpusvm.solvers.newton._cg`), column ``j`` frozen on the device once
    ``||r|| <= eta_j ||rhs_j||``; the host reads the live columns and the steps taken once
    per batch of steps, the first ``first_batch`` long, each further one half the steps so
    far.  Returns ``P`` and the steps taken while a column was live (the CPU form's count)."""
    m = rhs.shape[1]
    P = xp.zeros_like(rhs)
    R = rhs.copy()
    Zr = inv_diag * R
    Dr = Zr.copy()
    rz = col_dots(xp, R, Zr)
    rr = col_dots(xp, R, R)
    stop = eta * eta * rr
    act = rr > stop
    ran = xp.zeros(1)
    live, k, steps = np.arange(m), 0, 0
    batch = max(int(first_batch), 1)
    while k < max_iter and live.size:
        ix = _cols(xp, live, m)
        Pl, Rl, Dl, inv = P[:, ix], R[:, ix], Dr[:, ix], inv_diag[:, ix]
        rzl, stopl, a = rz[ix], stop[ix], act[ix]
        for _ in range(min(batch, max_iter - k)):
            Hd = hess(Dl, ix)
            dhd = col_dots(xp, Dl, Hd)
            step = xp.where(a, rzl / xp.where(a, dhd, 1.0), 0.0)
            Pl = Pl + step * Dl
            Rl = Rl - step * Hd
            Zl = inv * Rl
            rz_new = col_dots(xp, Rl, Zl)
            Dl = xp.where(a, Zl + xp.where(a, rz_new / xp.where(a, rzl, 1.0), 0.0) * Dl, Dl)
            rzl = xp.where(a, rz_new, rzl)
            ran += a.any()
            a = a & (col_dots(xp, Rl, Rl) > stopl)
            k += 1
        P[:, ix], R[:, ix], Dr[:, ix] = Pl, Rl, Dl
        rz[ix], act[ix] = rzl, a
        got = read(xp.concatenate([ran, a.astype(np.float64)]))
        steps = int(got[0])
        live = live[got[1:] > 0]
        batch = math.ceil(k / 2)
    return P, steps


def iterate(prod, Y, S, lam, tols, W, max_iter, cg_max_iter, read, after=None,
            certify_first=True):
    """:func:`gpusvm.solvers.newton._iterate` on the device: the same arguments and results
    (``primal``, ``dual`` host arrays, ``alpha`` on the device), with ``read(a)`` the one
    way to the host."""
    xp, n, M = prod.xp, prod.n, Y.shape[1]
    c2 = 2.0 / n
    Z = Y * prod.mm(W)
    primal, dual, alpha, Wa = certify(prod, Y, S, lam, W, Z)
    got = read(xp.stack([primal, dual]))
    primal, dual = got[0].copy(), got[1].copy()
    n_iter = np.zeros(M, dtype=np.int64)
    g0 = xp.zeros(M)
    reasons = np.full(M, "max_iter", dtype=object)
    done = (primal - dual <= tols) & certify_first
    reasons[done] = "tol"
    live = np.flatnonzero(~done)
    cg_total, first_batch = 0, CG_FIRST_BATCH
    for _ in range(max_iter):
        if live.size == 0:
            break
        ix = _cols(xp, live, M)
        Sl = S[:, ix] if S.shape[1] > 1 else S
        Yl = Y[:, ix]
        G = lam * (W[:, ix] - Wa[:, ix])          # g = lam (w - w(alpha)), as on the CPU
        gnorm = xp.sqrt(col_dots(xp, G, G))
        g0l = xp.where(xp.asarray(n_iter[live] == 0), gnorm, g0[ix])
        g0[ix] = g0l
        eta = xp.minimum(0.1, xp.sqrt(gnorm / xp.where(g0l > 0, g0l, 1.0)))
        SA = Sl * (Z[:, ix] < 1.0) * c2            # 2 s_i / n on the active rows, else 0
        inv_diag = 1.0 / (lam + prod.sq_rmm(SA))

        def hess(V, c, SA=SA):
            return lam * V + prod.rmm(SA[:, c] * prod.mm(V))

        P, k = cg(xp, hess, -G, eta, cg_max_iter, inv_diag, read, first_batch)
        cg_total += k
        first_batch = max(k, CG_FIRST_BATCH)
        Q = Yl * prod.mm(P)
        Wl, Zl = W[:, ix], Z[:, ix]
        step = line_search(xp, lam, n, Wl, P, Zl, Q, Sl)
        Wl = Wl + step * P
        Zl = Zl + step * Q                        # y * X (w + t p), no pass over X
        W[:, ix], Z[:, ix] = Wl, Zl
        p, d, a, wa = certify(prod, Yl, Sl, lam, Wl, Zl)
        alpha[:, ix], Wa[:, ix] = a, wa
        got = read(xp.stack([p, d, gnorm]))
        stuck = got[2] == 0                       # at the optimum: no step was taken
        moved = live[~stuck]
        n_iter[moved] += 1
        primal[moved], dual[moved] = got[0][~stuck], got[1][~stuck]
        reasons[live[stuck]] = "tol"
        live = ran = moved
        if live.size == 0:
            break
        live = retire(ran, primal, dual, tols, reasons, n_iter, after)
    return primal, dual, alpha, n_iter, list(reasons), cg_total


__all__ = ["iterate", "check_memory", "device_bytes", "cg_reads_bound",
           "reads_per_iteration_bound", "CG_FIRST_BATCH"]
