"""The segment loops of the numba backend: one Pegasos source and one SDCA source.

Each runs iterations ``t0 + 1 .. t1`` on the state of :mod:`gpusvm.backends._general` with the
arithmetic of the reference ``NumpyBackend`` (products in the data's dtype, sums in float64), so the
iterates agree with it to rounding; batches are drawn two iterations ahead (their rows
prefetched).  :func:`pegasos_loop` and :func:`sdca_loop` compile the loop for flags that are
closure constants, so numba prunes what they rule out: ``one`` (``M = 1``, slots in
registers), ``row`` (one row of a canonical CSR per batch, added in place), ``by_epoch``
(rows read from orders the host makes: ``"epoch"``'s epochs, ``NumbaBackend._nb_orders``,
and for batches of several rows the drawn batches' rows, ``NumbaBackend._nb_drawn``),
``optimal``, ``aggressive`` (Pegasos' batch-optimal bias, SDCA's Alg. 2).  Weights, the squared hinge and shrinking are runtime arguments in ``prm``:
one compiled loop serves all.

Compile time (a cold first fit waits for it): numba inlines an ``inline="always"`` helper by
copying its IR with every helper it calls, before the flags prune the copy, so a choice made
by a flag goes in the loop's own body (``if row: _add_row(..) else: add_rows(..)``), never in
a helper that receives the flag; the optimal bias sorts with :func:`_stable_order` rather
than ``np.argsort`` (numba's sort compiled about 0.7 s more).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import njit

from . import _compile_nb  # noqa: F401  (the collector paused, the cache stamped)
from ._csr_nb import (ORDER_PREFETCH, PREFETCH_DISTANCE, RING, add_exact, add_row, add_row_to_columns, add_rows,
                      draw_ahead, draw_ahead_row, draw_ahead_row_wr, prefetch, prefetch_duals,
                      prefetch_row, prefetch_v_row, row_dot, unliteral)
from ._state import (S_A, S_ASUM, S_ASUMD, S_B, S_BETA, S_BSUM, S_DNORM, S_LOSS, S_NACT,
                     S_NAVG, S_NREJ, S_TMP0, S_VSQ, S_YACT)

_EPS64 = float(np.finfo(np.float64).eps)
# numpy_.SHRINK_EPS and UPPER_SLACK spelled out (numba caches by file; a test compares)
SHRINK_EPS = 0.1
UPPER_SLACK = 4 * _EPS64

#: step-size schedules as the int codes the loop takes (order of pegasos.SCHEDULES)
SCHEDULE_CODES = {"pegasos": 0, "norma": 1, "constant": 2}

# rows of the per-output work array ``wk`` (N_WORK, M)
W_DN = 0       # exact change of ||v_c||^2 of an addition
W_DN2 = 1      # ... of the undo of a rejected step (then of the step and its undo)
W_ANEW = 2     # Pegasos: a_c (1 - eta_t lam); SDCA one-row: the deltas that move
W_YACT = 3     # Pegasos: sum of g_i y_ic over the active rows; SDCA one-row: their coefs
W_DEN = 4      # Alg. 2: sum_i delta_ic^2 ||x_i||^2
W_NUM = 5      # Alg. 2: ||sum_i delta_ic y_ic x_i||^2
W_GAIN = 6     # n times the separable part of Delta D_c
W_DABS = 7     # sum_i |delta_ic|
W_VSQ0 = 8     # ||v_c||^2 before the step
W_OK = 9       # 1.0 when output c's step is kept
W_DSUM = 10    # sum_i delta_ic
N_WORK = 11


@njit(cache=True, inline="always")
def _margins(indptr, indices, data, Y, V, vf, sm, rows, m, z, one):
    """``m_ic = y_ic (a_c <v_c, x_i> + b_c)``: one gather per row for all ``M``."""
    for i in range(rows.size):
        r = rows[i]
        if one:
            m[i, 0] = np.float64(Y[r, 0]) * (sm[S_A, 0] * row_dot(indptr, indices, data, vf, r)
                                             + sm[S_B, 0])
            continue
        M = V.shape[1]
        for c in range(M):
            z[c] = 0.0
        for p in range(indptr[r], indptr[r + 1]):
            x = data[p]
            j = indices[p]
            for c in range(M):
                z[c] += x * V[j, c]
        for c in range(M):
            m[i, c] = np.float64(Y[r, c]) * (sm[S_A, c] * z[c] + sm[S_B, c])


@njit(cache=True, inline="always")
def _add_to_columns(indices, data, lo, hi, V, U, u_scale, use_u, cols, cc, nmov, dn):
    """``V[:, cols[q]] += cc[q] x`` for one row ``x`` and ``q < nmov``; ``d||v_c||^2`` into ``dn``."""
    if nmov == 1:                     # one output moves: its sum in a register, same order
        c = cols[0]
        g = cc[0]
        acc = 0.0
        for p in range(lo, hi):
            acc += add_exact(V, U, u_scale, use_u, indices[p], c, data[p] * g)
        dn[c] = acc
    elif nmov > 1:
        add_row_to_columns(indices, data, lo, hi, V, U, u_scale, use_u, cols, cc, nmov, dn)


@njit(cache=True, inline="always")
def _add_one_row(indices, data, lo, hi, V, U, u_scale, use_u, coef, M, touched, cc, dn):
    """``V[:, c] += coef_c x`` in place for one row and the outputs whose ``coef_c != 0``."""
    nmov = 0
    for c in range(M):
        dn[c] = 0.0
        if coef[c] != 0.0:
            touched[nmov] = c
            cc[nmov] = coef[c]
            nmov += 1
    _add_to_columns(indices, data, lo, hi, V, U, u_scale, use_u, touched, cc, nmov, dn)


@njit(cache=True, inline="always")
def _add_row(indptr, indices, data, V, vf, U, uf, u_scale, use_u, rows, coef, M, slot, acc,
             touched, dn):
    """:func:`~gpusvm.backends._csr_nb.add_rows` for a batch of one row of a canonical CSR
    (added in place).  A loop calls one or the other under its closure flag ``row``, in its
    own body: numba prunes the other before inlining (a helper that chose by an argument had
    both copied in, and compiled, before the choice was pruned)."""
    r = rows[0]
    _add_one_row(indices, data, indptr[r], indptr[r + 1], V, U, u_scale, use_u, coef[0], M,
                 touched, acc[0], dn)


@njit(cache=True, inline="always")
def _step_size(schedule, t, lam, eta0, norma_p):
    """``(eta_t, 1 - eta_t lam)`` exactly as :func:`gpusvm.backends.base.step_size`."""
    if schedule == 0:
        return 1.0 / (lam * t), 1.0 - 1.0 / t
    if schedule == 1:
        return norma_p / (lam * math.sqrt(t)), 1.0 - norma_p / math.sqrt(t)
    return eta0, 1.0 - eta0 * lam


@njit(cache=True, inline="always")
def _stable_order(key, k, so):
    """The positions ``0 .. k - 1`` sorted by ``key`` (finite), ties in position order: NumPy's
    stable ``argsort``, as a bottom-up merge sort in ``so`` (2k int64, no views); returns the
    offset of the sorted positions in ``so`` (0 or ``k``)."""
    for i in range(k):
        so[i] = i
    a = 0                                           # the runs to merge, from so[a:]
    b = k                                           # into so[b:]
    width = 1
    while width < k:
        lo = 0
        while lo < k:
            mid = lo + width if lo + width < k else k
            hi = lo + 2 * width if lo + 2 * width < k else k
            i = lo
            j = mid
            for o in range(lo, hi):
                if j < hi and (i >= mid or key[so[a + j]] < key[so[a + i]]):
                    so[b + o] = so[a + j]
                    j += 1
                else:
                    so[b + o] = so[a + i]
                    i += 1
            lo += 2 * width
        a, b = b, a
        width *= 2
    return a


@njit(cache=True, inline="always")
def _optimal_bias(Y, sw, weighted, rows, m, sm, opt, so):
    """Per output, the weighted batch-optimal bias (Pegasos Sec. 4); ``m`` shifted to it."""
    k = rows.size
    yb, sc, bp, wt = opt[0], opt[1], opt[2], opt[3]
    for c in range(m.shape[1]):
        tot_pos = 0.0
        for i in range(k):
            r = rows[i]
            yb[i] = Y[r, c]
            sc[i] = yb[i] * m[i, c] - sm[S_B, c]
            bp[i] = yb[i] - sc[i]
            wt[i] = sw[r, c] if weighted else 1.0
            if yb[i] > 0:
                tot_pos += wt[i]
        off = _stable_order(bp, k, so)
        neg_le = 0.0
        pos_le = 0.0
        b = bp[so[off]]
        for jj in range(k):
            o = so[off + jj]
            if yb[o] < 0:
                neg_le += wt[o]
            if yb[o] > 0:
                pos_le += wt[o]
            if neg_le - (tot_pos - pos_le) >= 0:
                b = bp[o]
                break
        for i in range(k):
            m[i, c] = 1.0 + yb[i] * (b - (yb[i] - sc[i]))
        sm[S_B, c] = b


@njit(cache=True, inline="always")
def _reset_scale(V, U, use_u, sm):
    """``W = 0`` for every output, the running averages kept (``U -= A V``)."""
    d, M = V.shape
    if use_u:
        for j in range(d):
            for c in range(M):
                U[j, c] -= sm[S_ASUM, c] * V[j, c]
    V[:, :] = 0
    for c in range(M):
        sm[S_VSQ, c] = 0.0
        sm[S_A, c] = 1.0


@njit(cache=True, inline="always")
def _renormalize(V, U, use_u, sm, threshold, tmp):
    """Fold ``a_c`` into ``V[:, c]`` where ``|a_c| < threshold``, the running sum into ``U`` alone."""
    d, M = V.shape
    for c in range(M):
        a = sm[S_A, c]
        if abs(a) < threshold:
            if use_u:
                asum = sm[S_ASUM, c]
                for j in range(d):
                    U[j, c] -= asum * np.float64(V[j, c])
            tmp[0] = a                                  # a rounded to V's dtype first
            af = tmp[0]
            for j in range(d):
                V[j, c] *= af
            sm[S_VSQ, c] *= a * a
            sm[S_ASUM, c] = 0.0
            sm[S_A, c] = 1.0


@njit(cache=True, inline="always")
def _pegasos_out(a, dn, vsq, b, asum, navg, bsum, yact, eta, k, unreg_bias, radius, average):
    """The end of steps 4-5 of Fig. 1 for one output: bias step, projection, average."""
    vsq += dn
    sa = a
    if unreg_bias:
        b += eta * yact / k
    if radius > 0.0:
        wsq = a * a * vsq
        if wsq > radius * radius:
            sa = a * (radius / np.sqrt(wsq))
    if average:
        asum += sa
        navg += 1.0
        bsum += b
    return sa, vsq, b, asum, navg, bsum


@njit(cache=True, inline="always")
def _subgradient(m, si, squared):
    """``(-d loss_i / d m_i, loss_i)`` of a row with weight ``si``."""
    sl = max(0.0, 1.0 - m)
    if squared:
        return 2.0 * si * sl, si * sl * sl
    return si, si * sl


@njit(cache=True, inline="always")
def _pegasos_coefs(Y, sw, weighted, sm, rows, m, coef, eta, shrink, k, squared, M, wk):
    """Step 4 of Fig. 1 for every output (``NumpyBackend.pegasos_step_m``): the rows'
    coefficients of the ``V`` step; the loop adds them, then :func:`_pegasos_finish`."""
    for c in range(M):
        wk[W_ANEW, c] = sm[S_A, c] * shrink
        wk[W_YACT, c] = 0.0
        sm[S_NACT, c] = 0.0
        sm[S_LOSS, c] = 0.0
    for i in range(rows.size):
        r = rows[i]
        for c in range(M):
            gi, li = _subgradient(m[i, c], sw[r, c] if weighted else 1.0, squared)
            sm[S_LOSS, c] += li
            if m[i, c] < 1.0:
                gy = gi * np.float64(Y[r, c])
                sm[S_NACT, c] += 1.0
                coef[i, c] = gy * (eta / (k * wk[W_ANEW, c]))
                wk[W_YACT, c] += gy
            else:
                coef[i, c] = 0.0


@njit(cache=True, inline="always")
def _pegasos_finish(sm, eta, k, unreg_bias, radius, average, M, wk):
    """Step 5 of Fig. 1 for every output, after the ``V`` step of :func:`_pegasos_coefs`."""
    for c in range(M):
        sm[S_DNORM, c] = wk[W_DN, c]
        sa, vsq, b, asum, navg, bsum = _pegasos_out(
            wk[W_ANEW, c], wk[W_DN, c], sm[S_VSQ, c], sm[S_B, c], sm[S_ASUM, c], sm[S_NAVG, c],
            sm[S_BSUM, c], wk[W_YACT, c], eta, k, unreg_bias, radius, average)
        sm[S_A, c], sm[S_VSQ, c] = sa, vsq
        if unreg_bias:                      # the slots that do not move are not written
            sm[S_YACT, c], sm[S_B, c] = wk[W_YACT, c], b
        if average:
            sm[S_ASUM, c], sm[S_NAVG, c], sm[S_BSUM, c] = asum, navg, bsum


@functools.lru_cache(maxsize=None)
def pegasos_loop(one, row, by_epoch, optimal, wr=False):
    """The Pegasos loop compiled for these flags (module docstring; ``wr``: one-row batches
    drawn with replacement), made once per process."""
    scalar = one and row and not optimal            # the output's slots in registers

    @njit(cache=True, nogil=True, no_cfunc_wrapper=True)
    def loop(csr, lab, st, sam, t0, t1, prm, wrk):
        """Pegasos iterations ``t0 + 1 .. t1`` (Shalev-Shwartz et al. 2007, Fig. 1)."""
        indptr, indices, data = csr
        Y, yf, sw = lab
        V, vf, U, uf, sm = st
        smp, ring, ringf, ringh, rk, ecache, stamp, order, table = sam
        (lam, k, schedule, eta0, norma_p, unreg_bias, radius, averaged, t_avg, renorm, pref_v,
         weighted, squared) = prm
        m, coef, slot, acc, touched, wk, tmp, z, opt, so = wrk
        use_u = U.shape[0] > 0
        M = 1 if one else V.shape[1]
        n = indptr.size - 1
        sa, sb, vsq = sm[S_A, 0], sm[S_B, 0], sm[S_VSQ, 0]
        asum, navg, bsum = sm[S_ASUM, 0], sm[S_NAVG, 0], sm[S_BSUM, 0]
        nact, loss, dnorm, yact = sm[S_NACT, 0], sm[S_LOSS, 0], sm[S_DNORM, 0], sm[S_YACT, 0]
        q = 0
        if by_epoch:                        # batch t0 starts at position q of epoch e, whose
            e = t0 * k // n                 # rows are order[e - ecache[2]] (made by the host)
            q = t0 * k - e * n
            eo = e - ecache[2]
        t_first = t0 + 1 if by_epoch else t0 + 1 - PREFETCH_DISTANCE     # (the ring filled
        for t in range(t_first, t1 + 1):                                # by the first draws)
            if by_epoch and not row:        # the batch's k positions, the next batch's rows
                rows = ring[0]              # prefetched (read from the order as they come)
                nxt = q + k
                ne = eo + 1 if nxt >= n else eo
                nxt = nxt - n if nxt >= n else nxt
                for j in range(k):
                    rows[j] = order[eo, q]
                    q += 1
                    if q == n:
                        q = 0
                        eo += 1
                    if ne < order.shape[0]:
                        ra = order[ne, nxt]
                        prefetch_row(indptr, indices, data, ra)
                        if pref_v:
                            prefetch_v_row(indptr, indices, vf, M, ra)
                        nxt += 1
                        if nxt == n:
                            nxt = 0
                            ne += 1
                r = rows[0]
            elif by_epoch:
                qa = q + ORDER_PREFETCH
                if qa < n:
                    prefetch_row(indptr, indices, data, order[eo, qa])
                    prefetch(yf, order[eo, qa] * M)
                if pref_v and q + 1 < n:
                    prefetch_v_row(indptr, indices, vf, M, order[eo, q + 1])
                r = order[eo, q]                                                  # step 1: A_t
                rows = ring[0]                                  # the batch as an array
                if not scalar:
                    rows[0] = r
                q += 1
                if q == n:                                      # the next epoch's rows
                    q = 0
                    eo += 1
            else:
                if row and wr:
                    draw_ahead_row_wr(indptr, indices, data, vf, M, sam, t - 1, pref_v)
                elif row:
                    draw_ahead_row(indptr, indices, data, vf, M, sam, t - 1, pref_v)
                else:
                    draw_ahead(indptr, indices, data, vf, M, sam, t - 1, pref_v)
                if t <= t0:
                    continue
                rows = ring[(t - 1) % RING]                                       # step 1: A_t
                r = rows[0]
            eta, shrink = _step_size(schedule, t, lam, eta0, norma_p)             # step 3
            if scalar:                                  # M = 1, one row: the same steps on
                yi = np.float64(yf[r])                      # scalars, the slots in registers
                mi = yi * (sa * row_dot(indptr, indices, data, vf, r) + sb)          # step 2
                if shrink == 0.0:
                    sm[S_ASUM, 0] = asum
                    _reset_scale(V, U, use_u, sm)
                    sa, vsq = sm[S_A, 0], sm[S_VSQ, 0]
                    shrink = 1.0
                a = sa * shrink                                                       # step 4
                gi, loss = _subgradient(mi, sw[r, 0] if weighted else 1.0, squared)
                loss = 0.0 + loss
                active = mi < 1.0
                nact = 1.0 if active else 0.0
                gy = gi * yi
                ci = gy * (eta / (k * a)) if active else 0.0
                yact = (0.0 + gy) if active else 0.0
                dnorm = add_row(indptr, indices, data, vf, uf, asum, use_u, r, ci)
                sa, vsq, sb, asum, navg, bsum = _pegasos_out(                          # step 5
                    a, dnorm, vsq, sb, asum, navg, bsum, yact, eta, k, unreg_bias, radius,
                    averaged and t >= t_avg)
                if abs(sa) < renorm:
                    sm[S_A, 0], sm[S_VSQ, 0], sm[S_ASUM, 0] = sa, vsq, asum
                    _renormalize(V, U, use_u, sm, renorm, tmp)
                    sa, vsq, asum = sm[S_A, 0], sm[S_VSQ, 0], sm[S_ASUM, 0]
            else:
                _margins(indptr, indices, data, Y, V, vf, sm, rows, m, z, one)   # step 2
                if optimal:
                    _optimal_bias(Y, sw, weighted, rows, m, sm, opt, so)          # Sec. 4
                if shrink == 0.0:
                    _reset_scale(V, U, use_u, sm)
                    shrink = 1.0
                _pegasos_coefs(Y, sw, weighted, sm, rows, m, coef, eta, shrink, k, squared, M,
                               wk)                                                # step 4
                if row:
                    _add_row(indptr, indices, data, V, vf, U, uf, sm[S_ASUM], use_u, rows, coef,
                             M, slot, acc, touched, wk[W_DN])
                else:
                    add_rows(indptr, indices, data, V, vf, U, uf, sm[S_ASUM], use_u, rows, coef,
                             M, slot, acc, touched, wk[W_DN], unliteral(False))
                _pegasos_finish(sm, eta, k, unreg_bias, radius, averaged and t >= t_avg, M,
                                wk)                                               # step 5
                _renormalize(V, U, use_u, sm, renorm, tmp)
        if scalar:
            sm[S_A, 0], sm[S_B, 0], sm[S_VSQ, 0] = sa, sb, vsq
            sm[S_ASUM, 0], sm[S_NAVG, 0], sm[S_BSUM, 0] = asum, navg, bsum
            sm[S_NACT, 0], sm[S_LOSS, 0], sm[S_DNORM, 0] = nact, loss, dnorm
            if unreg_bias:
                sm[S_YACT, 0] = yact

    return loop


@njit(cache=True, inline="always")
def _coord(m, a, si, row_sq, inv_qs, r, beta, cfac, lamn, squared):
    """Eq. (15) for one coordinate of weight ``si`` (docs/algorithms.md, "Weights, and the squared
    hinge"): the hinge step clipped to ``[-a, si - a]``, the squared one's kept ``>= -a``."""
    if squared:
        x = (2.0 * si * (1.0 - m) - a) / (1.0 + 2.0 * si * beta * row_sq[r] / lamn)
        return x if x > -a else -a
    inv_q = inv_qs[r]                   # (||x_r||^2 is read only by the squared hinge)
    if inv_q == np.inf:                 # a zero row
        return si - a
    raw = cfac * (1.0 - m) * inv_q
    x = raw if raw > -a else -a
    return x if x < si - a else si - a


@njit(cache=True, inline="always")
def _gain(dl, a, si, squared):
    """``n`` times the change of the separable part of ``D`` for the step ``dl``."""
    if squared:
        return dl - (dl * (2.0 * a + dl) / (4.0 * si) if si > 0.0 else 0.0)
    return dl


@njit(cache=True, inline="always")
def _dual_drops(gain, dabs, dn, vsq, a, lam, n, eps):
    """Alg. 2's test: ``Delta D < -tau``, ``tau`` the rounding of ``Delta D``."""
    return (gain / n - 0.5 * lam * a * a * dn
            < -4.0 * (eps * lam * a * a * vsq + _EPS64 * dabs / n))


@njit(cache=True, inline="always")
def _rho_beta(num, den, beta, beta_b, theta):
    """Alg. 2: ``rho`` clipped to ``[1, beta_b]`` and the new ``beta``."""
    rho = min(max(num / den, 1.0), beta_b)
    return rho, min(max(beta ** theta * rho ** (1.0 - theta), 1.0), beta_b)


@njit(cache=True, inline="always")
def _sdca_deltas(Y, sw, weighted, alpha, inv_q, row_sq, sm, rows, m, lamn, first, has_first,
                 squared, M, delta):
    """Eq. (15) per output (``NumpyBackend.sdca_deltas_m``); 0 for a repeated row."""
    for c in range(M):
        beta = sm[S_BETA, c]
        cfac = lamn / beta
        for i in range(rows.size):
            r = rows[i]
            if has_first and not first[i]:
                delta[i, c] = 0.0
            else:
                delta[i, c] = _coord(m[i, c], alpha[r, c], sw[r, c] if weighted else 1.0,
                                     row_sq, inv_q, r, beta, cfac, lamn, squared)


@njit(cache=True, inline="always")
def _sdca_adapt_beta(indptr, indices, data, Y, V, vf, row_sq, sm, rows, delta, coef, beta_b,
                     theta, M, row, slot, acc, touched, wk):
    """Alg. 2 per output (``NumpyBackend.sdca_adapt_beta_m``); one row is summed in place."""
    moves = False
    for c in range(M):
        den = 0.0
        for i in range(rows.size):
            r = rows[i]
            den += delta[i, c] * delta[i, c] * row_sq[r]
            coef[i, c] = delta[i, c] * np.float64(Y[r, c])
        wk[W_DEN, c] = den
        wk[W_NUM, c] = 0.0
        moves = moves or den > 0.0
    if not moves:
        return
    if row:
        r = rows[0]
        for p in range(indptr[r], indptr[r + 1]):
            for c in range(M):
                x = data[p] * coef[0, c]
                wk[W_NUM, c] += x * x
    else:
        add_rows(indptr, indices, data, V, vf, V, vf, wk[W_OK], False, rows, coef, M, slot,
                 acc, touched, wk[W_NUM], unliteral(True))
    for c in range(M):
        if wk[W_DEN, c] > 0.0:
            sm[S_TMP0, c], sm[S_BETA, c] = _rho_beta(wk[W_NUM, c], wk[W_DEN, c], sm[S_BETA, c],
                                                     beta_b, theta)


@njit(cache=True, inline="always")
def _sdca_coefs(Y, sw, weighted, sm, alpha, rows, delta, coef, lam, n, check, squared, M, wk):
    """The ``W`` step's coefficients per output (and, for ``check``, Alg. 2's sums); the loop
    adds them, then :func:`_sdca_rejects` (Alg. 2) and :func:`_sdca_commit`."""
    for c in range(M):                  # an output at a time: its sums in registers
        g = 1.0 / (lam * n * sm[S_A, c])
        gain = 0.0
        dabs = 0.0
        dsum = 0.0
        for i in range(rows.size):
            r = rows[i]
            dl = delta[i, c]
            coef[i, c] = dl * np.float64(Y[r, c]) * g
            dsum += dl
            if check:
                gain += _gain(dl, alpha[r, c], sw[r, c] if weighted else 1.0, squared)
                dabs += abs(dl)
        wk[W_VSQ0, c] = sm[S_VSQ, c]
        wk[W_GAIN, c] = gain
        wk[W_DABS, c] = dabs
        wk[W_DSUM, c] = dsum
        wk[W_OK, c] = 1.0


@njit(cache=True, inline="always")
def _sdca_rejects(sm, rows, coef, lam, n, M, eps, wk):
    """Alg. 2: True when the step lowers some output's dual; their coefficients negated (the
    undo, which the loop adds; then :func:`_sdca_undone`), the others' set to 0."""
    rejected = False
    for c in range(M):
        if _dual_drops(wk[W_GAIN, c], wk[W_DABS, c], wk[W_DN, c], wk[W_VSQ0, c], sm[S_A, c],
                       lam, n, eps):
            wk[W_OK, c] = 0.0
            rejected = True
    if rejected:
        for i in range(rows.size):
            for c in range(M):
                coef[i, c] = 0.0 if wk[W_OK, c] == 1.0 else -coef[i, c]
    return rejected


@njit(cache=True, inline="always")
def _sdca_undone(sm, M, wk):
    """The undone outputs' change of ``||v_c||^2`` (step and undo, into ``W_DN2``) and count of
    rejections."""
    for c in range(M):
        if wk[W_OK, c] == 0.0:
            wk[W_DN2, c] = wk[W_DN, c] + wk[W_DN2, c]
            sm[S_NREJ, c] += 1.0


@njit(cache=True, inline="always")
def _sdca_commit(sm, alpha, rows, delta, M, wk):
    """Alpha step of the kept outputs, ``||v_c||^2`` and ``sum alpha`` kept up to date."""
    for c in range(M):
        sm[S_DNORM, c] = wk[W_DN, c]
        if wk[W_OK, c] == 1.0:
            sm[S_VSQ, c] += wk[W_DN, c]
            sm[S_ASUMD, c] += wk[W_DSUM, c]
        else:
            sm[S_VSQ, c] += wk[W_DN2, c]
    for i in range(rows.size):
        r = rows[i]
        for c in range(M):
            if wk[W_OK, c] == 1.0:
                alpha[r, c] += delta[i, c]


@njit(cache=True, inline="always")
def _sdca_row(indptr, indices, data, Y, sw, weighted, V, sm, alpha, inv_q, row_sq, r, lamn,
              squared, touched, wk, z):
    """A safe/naive step on the batch ``{r}`` for ``M`` outputs: margins, eq. (15), ``W`` step."""
    M = V.shape[1]
    for c in range(M):
        z[c] = 0.0
    for p in range(indptr[r], indptr[r + 1]):                 # one gather serves all M
        x = data[p]
        j = indices[p]
        for c in range(M):
            z[c] += x * V[j, c]
    nmov = 0
    for c in range(M):                                         # eq. (15) per output
        yc = np.float64(Y[r, c])
        beta = sm[S_BETA, c]
        dl = _coord(yc * (sm[S_A, c] * z[c] + sm[S_B, c]), alpha[r, c],
                    sw[r, c] if weighted else 1.0, row_sq, inv_q, r, beta, lamn / beta,
                    lamn, squared)
        sm[S_DNORM, c] = 0.0
        if dl != 0.0:              # most outputs stay: the others listed, nothing kept per M
            touched[nmov] = c
            wk[W_ANEW, nmov] = dl
            wk[W_YACT, nmov] = dl * yc * (1.0 / (lamn * sm[S_A, c]))
            nmov += 1
    if nmov == 0:
        return
    _add_to_columns(indices, data, indptr[r], indptr[r + 1], V, V, sm[S_DNORM], False, touched,
                    wk[W_YACT], nmov, sm[S_DNORM])
    for q in range(nmov):
        c = touched[q]
        sm[S_VSQ, c] += sm[S_DNORM, c]
        alpha[r, c] += wk[W_ANEW, q]
        sm[S_ASUMD, c] += wk[W_ANEW, q]


@njit(cache=True, inline="always")
def _shrink_test(af, active, shr, r, m):
    """LIBLINEAR's shrinking test (Hsieh et al. 2008, Sec. 3.2): True when ``r`` leaves."""
    g = m - 1.0
    a = af[r]
    if a <= 0.0:
        if g > shr[0]:
            active[r] = False
            return True
        pg = min(g, 0.0)
    elif a >= 1.0 - UPPER_SLACK:
        if g < shr[1]:
            active[r] = False
            return True
        pg = max(g, 0.0)
    else:
        pg = g
    shr[2] = max(shr[2], pg)
    shr[3] = min(shr[3], pg)
    return False


@njit(cache=True, inline="always")
def _shrink_epoch(active, shr):
    """At an epoch's end: roll the test's bounds over, or unshrink all within ``SHRINK_EPS``."""
    if shr[2] - shr[3] <= SHRINK_EPS:
        active[:] = True
        shr[0] = np.inf
        shr[1] = -np.inf
    else:
        shr[0] = shr[2] if shr[2] > 0.0 else np.inf
        shr[1] = shr[3] if shr[3] < 0.0 else -np.inf
    shr[2] = -np.inf
    shr[3] = np.inf


@functools.lru_cache(maxsize=None)
def sdca_loop(one, row, by_epoch, aggressive, wr=False):
    """The SDCA loop compiled for these flags (module docstring; ``wr``: one-row batches drawn
    with replacement), made once per process."""
    scalar = one and row                                # the output's slots in registers
    fused = row and not aggressive                      # M outputs, one row: _sdca_row

    @njit(cache=True, nogil=True, no_cfunc_wrapper=True)
    def loop(csr, lab, st, sam, t0, t1, prm, wrk):
        """SDCA iterations ``t0 + 1 .. t1`` (Takáč et al. 2013, eq. 15, Alg. 2); unread arrays: None."""
        indptr, indices, data = csr
        Y, yf, sw = lab
        V, vf, sm, alpha, af, inv_q, row_sq = st
        smp, ring, ringf, ringh, rk, ecache, stamp, order, table = sam
        lam, n, beta_b, theta, eps, pref_v, active, shr, weighted, squared, shrinking = prm
        m, delta, coef, slot, acc, touched, wk, z = wrk
        M = 1 if one else V.shape[1]
        lamn = lam * n
        a, b, beta = sm[S_A, 0], sm[S_B, 0], sm[S_BETA, 0]
        cfac = lamn / beta                                                # eq. (15) factor
        g = 1.0 / (lam * n * a)                                           # w step factor
        vsq, asumd, nrej = sm[S_VSQ, 0], sm[S_ASUMD, 0], sm[S_NREJ, 0]
        rho, dnorm = sm[S_TMP0, 0], sm[S_DNORM, 0]
        kb = ring.shape[1]                                # the batch size
        e = t0 * kb // n                                  # epoch and position of batch t0
        q = t0 * kb - e * n
        if by_epoch:                          # the rows of epoch e: order[e - ecache[2]], made
            eo = e - ecache[2]                # by the host for every epoch of the segment
        bt_first = t0 if by_epoch else t0 - PREFETCH_DISTANCE    # (the ring filled by the
        for bt in range(bt_first, t1):                            # first draws)
            if by_epoch and not row:            # the batch's kb positions (Pegasos' loop), and
                rows, first = ring[0], ringf[0]         # a row already in the batch (stamped
                tail = n - q                            # with bt: one of the next epoch's,
                has_first = tail < kb or smp[0] == 1    # or any drawn with replacement) is no first
                nxt = q + kb
                ne = eo + 1 if nxt >= n else eo
                nxt = nxt - n if nxt >= n else nxt
                for j in range(kb):
                    r = order[eo, q]
                    rows[j] = r
                    if has_first:
                        first[j] = stamp[r] != bt
                        stamp[r] = bt
                    q += 1
                    if q == n:
                        q = 0
                        eo += 1
                    if ne < order.shape[0]:                 # the next batch's row j
                        ra = order[ne, nxt]
                        prefetch_row(indptr, indices, data, ra)
                        prefetch_duals(af, yf, inv_q, M, ra)
                        if pref_v:
                            prefetch_v_row(indptr, indices, vf, M, ra)
                        nxt += 1
                        if nxt == n:
                            nxt = 0
                            ne += 1
                r = rows[0]
            elif by_epoch:
                qa = q + ORDER_PREFETCH
                if qa < n:                                # the row ahead, with its duals
                    ra = order[eo, qa]
                    if not shrinking or active[ra]:       # (a shrunk row is only looked at)
                        prefetch_row(indptr, indices, data, ra)
                        prefetch_duals(af, yf, inv_q, M, ra)
                        if squared or aggressive:
                            prefetch(row_sq, ra)
                if pref_v and q + 1 < n:
                    prefetch_v_row(indptr, indices, vf, M, order[eo, q + 1])
                r = order[eo, q]                                                  # A_t
                rows = ring[0]                                  # the batch as an array
                if not scalar:
                    rows[0] = r
                first, has_first = ringf[0], False
            else:
                if row and wr:
                    draw_ahead_row_wr(indptr, indices, data, vf, M, sam, bt, pref_v)
                elif row:
                    draw_ahead_row(indptr, indices, data, vf, M, sam, bt, pref_v)
                else:
                    draw_ahead(indptr, indices, data, vf, M, sam, bt, pref_v)
                if bt < t0:
                    continue
                ahead = ring[(bt + 1) % RING]
                for i in range(ahead.size):
                    prefetch_duals(af, yf, inv_q, M, ahead[i])
                sl = bt % RING
                rows, first, has_first = ring[sl], ringf[sl], ringh[sl]           # A_t
                r = rows[0]
            epoch_ends = False
            if row or not by_epoch:             # (read by shrinking, one row a batch)
                q += 1
                epoch_ends = q == n
                if epoch_ends:
                    q = 0
                    if by_epoch:
                        eo += 1
            if scalar:                          # M = 1, one row: scalars, slots in registers
                step = not shrinking or active[r]
                if step:
                    yr = np.float64(yf[r])
                    mr = yr * (a * row_dot(indptr, indices, data, vf, r) + b)    # y_r <w, x_r>
                    if shrinking and _shrink_test(af, active, shr, r, mr):
                        step = False
                if step:
                    si = sw[r, 0] if weighted else 1.0
                    ar = af[r]
                    dl = _coord(mr, ar, si, row_sq, inv_q, r, beta, cfac, lamn, squared)
                    if aggressive:                                                # Alg. 2
                        den = 0.0 + dl * dl * row_sq[r]
                        if den > 0.0:
                            cy = dl * yr
                            num = 0.0
                            for p in range(indptr[r], indptr[r + 1]):
                                x = data[p] * cy
                                num += x * x
                            rho, beta = _rho_beta(num, den, beta, beta_b, theta)
                            cfac = lamn / beta
                        dl = _coord(mr, ar, si, row_sq, inv_q, r, beta, cfac, lamn, squared)
                    ci = dl * yr * g                                              # alpha, w step
                    dnorm = add_row(indptr, indices, data, vf, vf, 0.0, False, r, ci)
                    if aggressive and _dual_drops(_gain(dl, ar, si, squared), 0.0 + abs(dl),
                                                  dnorm, vsq, a, lam, n, eps):
                        dn2 = add_row(indptr, indices, data, vf, vf, 0.0, False, r, -ci)  # undo
                        vsq += dnorm + dn2
                        nrej += 1.0
                    else:
                        vsq += dnorm
                        af[r] += dl
                        asumd += 0.0 + dl
                if shrinking and epoch_ends:
                    _shrink_epoch(active, shr)
            elif fused:
                _sdca_row(indptr, indices, data, Y, sw, weighted, V, sm, alpha, inv_q, row_sq,
                          r, lamn, squared, touched, wk, z)
            else:
                _margins(indptr, indices, data, Y, V, vf, sm, rows, m, z, one)   # y_ic <w_c, x_i>
                for rnd in range(2 if aggressive else 1):    # Alg. 2: again at the new beta
                    if rnd == 1:                             # (one copy of the inlined code)
                        _sdca_adapt_beta(indptr, indices, data, Y, V, vf, row_sq, sm, rows,
                                         delta, coef, beta_b, theta, M, row, slot, acc, touched,
                                         wk)
                    _sdca_deltas(Y, sw, weighted, alpha, inv_q, row_sq, sm, rows, m, lamn,
                                 first, has_first, squared, M, delta)              # eq. (15)
                _sdca_coefs(Y, sw, weighted, sm, alpha, rows, delta, coef, lam, n, aggressive,
                            squared, M, wk)                            # alpha and W step
                if row:
                    _add_row(indptr, indices, data, V, vf, V, vf, wk[W_OK], False, rows, coef, M,
                             slot, acc, touched, wk[W_DN])
                else:
                    add_rows(indptr, indices, data, V, vf, V, vf, wk[W_OK], False, rows, coef, M,
                             slot, acc, touched, wk[W_DN], unliteral(False))
                if aggressive and _sdca_rejects(sm, rows, coef, lam, n, M, eps, wk):  # undone
                    if row:
                        _add_row(indptr, indices, data, V, vf, V, vf, wk[W_OK], False, rows,
                                 coef, M, slot, acc, touched, wk[W_DN2])
                    else:
                        add_rows(indptr, indices, data, V, vf, V, vf, wk[W_OK], False, rows,
                                 coef, M, slot, acc, touched, wk[W_DN2], unliteral(False))
                    _sdca_undone(sm, M, wk)
                _sdca_commit(sm, alpha, rows, delta, M, wk)
        if scalar:
            sm[S_VSQ, 0], sm[S_ASUMD, 0], sm[S_NREJ, 0] = vsq, asumd, nrej
            sm[S_BETA, 0], sm[S_TMP0, 0], sm[S_DNORM, 0] = beta, rho, dnorm

    return loop
