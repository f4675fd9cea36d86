"""Compiled row passes of the primal Newton solver on the CPU (no solver logic).

:func:`line_searches` finds the exact steps of every output as ``solvers.newton._line_search``
does for one (the same breakpoints and segment, the minimiser ``-a / b`` of its ``phi'(t) = a
+ b t``), but by quickselect (a three-way partition around the median of three, the slope at
each pivot from the partition's sums): expected ``O(events)``, no sort.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import _compile_nb  # noqa: F401  (the collector paused while this compiles)


@njit(cache=True, nogil=True)
def line_searches(Z, Q, S, zcols, scols, wp, pp, c, out):  # pragma: no cover (compiled)
    """``out[q]``: the exact minimiser ``t`` of ``P_2(w_j + t p_q)`` for every live output ``q``
    (``Z`` (n, M): margins ``y <w_j, x>``; ``Q = y <p_q, x>``; ``S`` (n, K): row weights;
    ``zcols``, ``scols``: output ``q``'s columns of ``Z`` and ``S``; ``wp = lam <w, p>``,
    ``pp = lam ||p||^2``; ``c = 2 / n``).  With
    ``r_i = 1 - z_i``, row ``i`` is active just right of ``t = 0`` when ``r_i > 0``, or ``r_i = 0
    < -q_i``; it leaves at ``t_i = r_i / q_i`` when active with ``q_i > 0``, and enters there
    when inactive with ``q_i < 0``.  ``phi'`` is continuous and increasing, so the minimiser
    follows the last breakpoint with ``phi'(t_i) < 0``: the events of a pivot with ``phi'(t_p)
    < 0`` (and all before it) apply to ``a``, ``b``, the others are discarded.  ``phi'(1)``
    tells which side of 1 to select from (near the optimum, few rows)."""
    n = Z.shape[0]
    L = Q.shape[1]
    a = wp.copy()
    b = pp.copy()
    one = wp + pp                                        # phi'(1), at the full Newton step
    # each output's breakpoint rows before 1 (lo) and from 1 on (hi)
    lo_rows = np.empty((L, n), dtype=np.int32)
    hi_rows = np.empty((L, n), dtype=np.int32)
    n_lo = np.zeros(L, dtype=np.int64)
    n_hi = np.zeros(L, dtype=np.int64)
    for i in range(n):                                   # one row-major pass
        for q in range(L):
            s = c * S[i, scols[q]]
            qi = Q[i, q]
            r = 1.0 - Z[i, zcols[q]]
            active = (r > 0.0) | ((r == 0.0) & (qi < 0.0))
            a[q] -= s * qi * max(r, 0.0)                 # (no branch on the data: a select)
            b[q] += s * qi * qi * active
            one[q] -= s * qi * max(r - qi, 0.0)
            if s != 0.0 and ((r > 0.0 and qi > 0.0) or (not active and qi < 0.0)):
                if (r < qi) if qi > 0.0 else (r > qi):   # t = r / q < 1
                    lo_rows[q, n_lo[q]] = i
                    n_lo[q] += 1
                else:
                    hi_rows[q, n_hi[q]] = i
                    n_hi[q] += 1
    m = 0
    for q in range(L):
        m = max(m, n_lo[q], n_hi[q])
    T = np.empty(m)
    DA = np.empty(m)
    DB = np.empty(m)
    for q in range(L):
        aq = a[q]
        bq = b[q]
        j = zcols[q]
        sj = scols[q]
        if one[q] < 0.0:                                 # after 1: the events before 1 apply
            for k in range(n_lo[q]):
                i = lo_rows[q, k]
                s = c * S[i, sj]
                qi = Q[i, q]
                r = 1.0 - Z[i, j]
                sign = 1.0 if r > 0.0 else -1.0          # leaves, or enters
                aq += sign * s * qi * r
                bq -= sign * s * qi * qi
            rows, hi = hi_rows[q], n_hi[q]
        else:
            rows, hi = lo_rows[q], n_lo[q]
        for k in range(hi):
            i = rows[k]
            s = c * S[i, sj]
            qi = Q[i, q]
            r = 1.0 - Z[i, j]
            sign = 1.0 if r > 0.0 else -1.0
            T[k] = r / qi
            DA[k] = sign * s * qi * r
            DB[k] = -sign * s * qi * qi
        lo = 0                                           # quickselect of the segment
        while hi > lo:
            mid = lo + (hi - lo) // 2
            x, y, z = T[lo], T[mid], T[hi - 1]
            tp = max(min(x, y), min(max(x, y), z))       # median of three
            # three-way partition of [lo, hi): < tp, == tp, > tp (Dijkstra)
            lt = lo
            gt = hi
            k = lo
            while k < gt:
                tk = T[k]
                if tk < tp:
                    T[k], T[lt] = T[lt], tk
                    DA[k], DA[lt] = DA[lt], DA[k]
                    DB[k], DB[lt] = DB[lt], DB[k]
                    lt += 1
                    k += 1
                elif tk > tp:
                    gt -= 1
                    T[k], T[gt] = T[gt], tk
                    DA[k], DA[gt] = DA[gt], DA[k]
                    DB[k], DB[gt] = DB[gt], DB[k]
                else:
                    k += 1
            sa = 0.0
            sb = 0.0
            for k in range(lo, lt):
                sa += DA[k]
                sb += DB[k]
            if (aq + sa) + (bq + sb) * tp >= 0.0:        # phi'(tp) >= 0: the root is at or before tp
                hi = lt
            else:                                        # after tp: its events apply
                for k in range(lt, gt):
                    sa += DA[k]
                    sb += DB[k]
                aq += sa
                bq += sb
                lo = gt
        # phi'' >= lam ||p||^2 on every segment: a smaller bq is the rounding of a sum of
        # curvatures far larger than lam ||p||^2 (huge C or weights), which the events took
        # back to 0 or below (a division by zero); p = 0 takes no step
        bq = max(bq, pp[q])
        out[q] = -aq / bq if bq > 0.0 else 0.0


@njit(cache=True, nogil=True)
def certificate_terms(Z, Y, S, zcols, scols, A, AY, loss, asum):  # pragma: no cover
    """A certificate's row sums (``newton._certify``) in one pass: ``r_i = max(0, 1 - z_i)``,
    ``A[i, q] = 2 s_i r_i``, ``AY = A y``, ``loss = sum_i s_i r_i^2``, ``asum = sum_i A``."""
    n = Z.shape[0]
    L = A.shape[1]
    for q in range(L):
        loss[q] = 0.0
        asum[q] = 0.0
    for i in range(n):
        for q in range(L):
            j = zcols[q]
            r = 1.0 - Z[i, j]
            if r > 0.0:
                sr = S[i, scols[q]] * r
                loss[q] += sr * r
                a = 2.0 * sr
                asum[q] += a
                A[i, q] = a
                AY[i, q] = a * Y[i, j]
            else:
                A[i, q] = 0.0
                AY[i, q] = 0.0


@njit(cache=True, nogil=True)
def hessian_weights(Z, S, zcols, scols, c, SA):  # pragma: no cover
    """``SA[i, q] = c s_i`` where ``z_i < 1``, else 0 (Hessian's ``D``); the rows active in any."""
    n = Z.shape[0]
    L = SA.shape[1]
    rows = np.empty(n, dtype=np.int64)
    k = 0
    for i in range(n):
        hit = False
        for q in range(L):
            if Z[i, zcols[q]] < 1.0:
                SA[i, q] = c * S[i, scols[q]]
                hit = True
            else:
                SA[i, q] = 0.0
        if hit:
            rows[k] = i
            k += 1
    return rows[:k]
