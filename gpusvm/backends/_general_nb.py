"""Compiled loops of the general path (M outputs, example weights, the squared hinge).

The numba counterparts of :mod:`gpusvm.backends._general`'s segment and
evaluation primitives, used by :class:`~gpusvm.backends.numba_.NumbaBackend`.
They follow the reference line by line: the same formulas, the products of a
row's gather in the data's dtype and the sums in float64, and the additions of
a batch aggregated per column before ``V`` is written (the reference's
``np.unique`` + ``np.add.at``), so the iterates agree with the reference to
rounding (sums in another order).

Layout: ``V`` is ``(d, M)`` row-major, so one nonzero ``x_ij`` of a batch row
reads and writes the ``M`` contiguous entries ``V[j, :]``: one gather of the
row serves all ``M`` margins, one pass all ``M`` updates.  A batch of several
rows aggregates per column in a compact scratch (``slot[j]`` is the column's
row in ``acc``, ``(touched columns, M)``), never in a ``d x M`` one.

The binary unweighted hinge never comes here: it keeps the specialised loops
of :mod:`gpusvm.backends.numba_`, whose per-iteration cost this path leaves
untouched.

Work vectors (float64, ``(N_WORK, M)``, rows named ``W_*``) hold the per-output
scratch of one iteration.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._state import (S_A, S_ASUM, S_ASUMD, S_B, S_BETA, S_BSUM, S_DNORM, S_LOSS, S_NACT,
                     S_NAVG, S_NREJ, S_TMP0, S_VSQ, S_YACT)
from ._counter_nb import epoch_advance, epoch_position
from .numba_ import (ORDER_PREFETCH, PREFETCH_DISTANCE, _draw_ahead, _fill_ring, _prefetch,
                     _prefetch_row, _step_size)

_EPS64 = float(np.finfo(np.float64).eps)

# rows of the per-output work array (a row's dot products live in an array of the loop's own)
W_DN = 0       # exact change of ||v_c||^2 of an addition
W_DN2 = 1      # ... of the undo of a rejected step
W_ANEW = 2     # Pegasos: a_c (1 - eta_t lam)
W_YACT = 3     # Pegasos: sum of s_i g_i y_ic over the active rows
W_DEN = 4      # Alg. 2: sum_i delta_ic^2 ||x_i||^2
W_NUM = 5      # Alg. 2: ||sum_i delta_ic y_ic x_i||^2
W_GAIN = 6     # n times the separable part of Delta D_c
W_DABS = 7     # sum_i |delta_ic|
W_VSQ0 = 8     # ||v_c||^2 before the step
W_OK = 9       # 1.0 when output c's step is kept
N_WORK = 10


@njit(cache=True, inline="always")
def _prefetch_v_m(indptr, indices, vflat, M, rows):
    """Ask for the cache lines of ``V[j, :]`` of every nonzero ``x_ij`` of the rows (``vflat``
    is ``V`` (d, M) flattened row-major; nothing when it is empty, ``V`` within the L2
    cache).  A ``V`` of many outputs is megabytes: without the hint each nonzero of a
    row waits on its line in turn (the binary loops' ``prefetch_v``, M lines wide)."""
    if vflat.size == 0:
        return
    step = max(1, 64 // vflat.itemsize)
    for i in range(rows.size):
        r = rows[i]
        for p in range(indptr[r], indptr[r + 1]):
            base = indices[p] * M
            for o in range(0, M, step):
                _prefetch(vflat, base + o)
            _prefetch(vflat, base + M - 1)


@njit(cache=True, inline="always")
def _prefetch_duals_m(aflat, yflat, inv_q, row_sq, M, rows):
    """Ask for the lines of ``alpha[r, :]``, ``Y[r, :]``, ``1/||x_r||^2`` and ``||x_r||^2``
    of the rows (``aflat``, ``yflat``: the row-major arrays flattened): a shuffled epoch
    visits them cold, a few lines per row that each step would otherwise wait on."""
    for i in range(rows.size):
        r = rows[i]
        base = r * M
        for o in range(0, M, 8):
            _prefetch(aflat, base + o)
        _prefetch(aflat, base + M - 1)
        for o in range(0, M, 16):
            _prefetch(yflat, base + o)
        _prefetch(yflat, base + M - 1)
        _prefetch(inv_q, r)
        _prefetch(row_sq, r)


@njit(cache=True, inline="always")
def _margins_m(indptr, indices, data, Y, V, sm, rows, m, z):
    """``m_ic = y_ic (a_c <v_c, x_i> + b_c)`` for the batch: one gather per row for all M.

    ``z`` (M,) holds a row's dot products: the loops pass an array of their own, which the
    compiler knows no other argument aliases, so the sums stay in vector registers
    (a row of the shared work array costs a store per nonzero and output).
    """
    M = V.shape[1]
    for i in range(rows.size):
        r = rows[i]
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
def _sum_rows_m(indptr, indices, data, rows, coef, slot, acc, touched, skip_still):
    """``acc[q, c] = sum_i coef_ic x_{rows_i, touched[q]}``: the batch summed per column.

    The columns are numbered in first-touch order (``touched[:nt]``, ``slot[j] = q``);
    returns ``nt``.  ``skip_still``: rows whose coefficients are all zero are passed
    over.  The caller resets ``slot`` of the touched columns to -1 when done.
    """
    M = coef.shape[1]
    nt = 0
    for i in range(rows.size):
        if skip_still:
            moves = False
            for c in range(M):
                if coef[i, c] != 0.0:
                    moves = True
                    break
            if not moves:
                continue
        r = rows[i]
        for p in range(indptr[r], indptr[r + 1]):
            j = indices[p]
            q = slot[j]
            if q < 0:
                q = nt
                slot[j] = nt
                touched[nt] = j
                nt += 1
                for c in range(M):
                    acc[q, c] = 0.0
            x = data[p]
            for c in range(M):
                acc[q, c] += x * coef[i, c]
    return nt


@njit(cache=True, inline="always")
def _add_exact(V, U, u_scale, use_u, j, c, g):
    """``V[j, c] += g`` (``U[j, c] += u_scale[c] g`` when ``use_u``); returns the exact change
    of ``V[j, c]^2``, ``(new - old)(new + old)`` of the values as stored."""
    old = np.float64(V[j, c])
    V[j, c] = old + g
    new = np.float64(V[j, c])
    if use_u:
        U[j, c] += u_scale[c] * g
    return (new - old) * (new + old)


@njit(cache=True, inline="always")
def _add_row_to_columns(indices, data, lo, hi, V, U, u_scale, use_u, cols, cc, nmov, dn):
    """``V[:, cols[q]] += cc[q] x`` for ``q < nmov`` and the row ``x`` stored at ``lo:hi``
    (``U[:, c] += u_scale[c] cc[q] x`` when ``use_u``); ``dn[cols[q]]`` is set to the exact
    ``d||v_c||^2``.

    A nonzero at a time, its moving outputs inside: they share the cache lines of
    ``V[j, :]``, so a row costs one pass over its entries of ``V`` however many
    outputs move.  Each output's additions and its ``dn`` run in the row's order, as
    they would an output at a time (bit for bit).  The entries are independent
    read-modify-writes (no branch: a zero product leaves ``V[j, c]`` as it is).
    """
    if nmov == 1:                     # one output: the sum in a register, the same order
        c = cols[0]
        g = cc[0]
        acc = 0.0
        for p in range(lo, hi):
            acc += _add_exact(V, U, u_scale, use_u, indices[p], c, data[p] * g)
        dn[c] = acc
        return
    for q in range(nmov):
        dn[cols[q]] = 0.0
    for p in range(lo, hi):
        j = indices[p]
        x = data[p]
        for q in range(nmov):
            c = cols[q]
            dn[c] += _add_exact(V, U, u_scale, use_u, j, c, x * cc[q])


@njit(cache=True, inline="always")
def _add_rows_m(indptr, indices, data, V, U, u_scale, use_u, rows, coef, single, slot, acc,
                touched, dn):
    """``V[:, c] += sum_i coef_ic x_{rows_i}`` (``U[:, c] += u_scale_c *`` the same); exact
    ``d||v_c||^2`` into ``dn``.

    ``single``: one row of a canonical CSR adds in place, visiting only the outputs
    whose coefficient is nonzero (listed in ``touched``).  Otherwise the batch is
    summed per column in ``acc`` (first-touch order) and ``V`` is written once per
    column and output.  Zero contributions leave ``V`` alone.
    """
    M = V.shape[1]
    for c in range(M):
        dn[c] = 0.0
    if single:
        nmov = 0                              # the outputs that move (touched[:nmov])
        for c in range(M):
            if coef[0, c] != 0.0:
                touched[nmov] = c
                acc[0, nmov] = coef[0, c]
                nmov += 1
        if nmov == 0:
            return
        r = rows[0]
        _add_row_to_columns(indices, data, indptr[r], indptr[r + 1], V, U, u_scale, use_u,
                            touched, acc[0], nmov, dn)
        return
    nt = _sum_rows_m(indptr, indices, data, rows, coef, slot, acc, touched, True)
    for q in range(nt):
        j = touched[q]
        for c in range(M):
            g = acc[q, c]
            if g != 0.0:
                dn[c] += _add_exact(V, U, u_scale, use_u, j, c, g)
        slot[j] = -1


@njit(cache=True, inline="always")
def _sum_sq_norms_m(indptr, indices, data, rows, coef, slot, acc, touched, out):
    """``out_c = ||sum_i coef_ic x_{rows_i}||^2`` (scratch left clean)."""
    M = coef.shape[1]
    nt = _sum_rows_m(indptr, indices, data, rows, coef, slot, acc, touched, False)
    for c in range(M):
        out[c] = 0.0
    for q in range(nt):
        for c in range(M):
            out[c] += acc[q, c] * acc[q, c]
        slot[touched[q]] = -1


# ---------------------------------------------------------------------- Pegasos
@njit(cache=True, inline="always")
def _optimal_bias_m(Y, sw, weighted, rows, m, sm, yb, sc, bp, wt):
    """Per output, the weighted batch-optimal bias (``optimal_bias_weighted``); ``m`` shifted."""
    k = rows.size
    M = m.shape[1]
    for c in range(M):
        tot_pos = 0.0
        for i in range(k):
            r = rows[i]
            yb[i] = Y[r, c]
            sc[i] = yb[i] * m[i, c] - sm[S_B, c]
            bp[i] = yb[i] - sc[i]
            wt[i] = sw[r, c] if weighted else 1.0
            if yb[i] > 0:
                tot_pos += wt[i]
        order = np.argsort(bp[:k], kind="mergesort")
        neg_le = 0.0
        pos_le = 0.0
        b = bp[order[0]]
        for jj in range(k):
            o = order[jj]
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
def _reset_scale_m(V, U, use_u, sm):
    """``W = 0`` for every output (``U -= A V``)."""
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
def _renormalize_m(V, U, use_u, sm, threshold, tmp):
    """Fold ``a_c`` into column ``c`` for each output with ``|a_c| < threshold``."""
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
def _pegasos_step_m(indptr, indices, data, Y, sw, weighted, V, U, use_u, sm, rows, m, coef,
                    eta, shrink, k, unreg_bias, radius, average, squared, single, slot, acc,
                    touched, wk):
    """Steps 4-5 of Fig. 1 for every output (``GeneralPath.pegasos_step_m``)."""
    M = V.shape[1]
    for c in range(M):
        wk[W_ANEW, c] = sm[S_A, c] * shrink
        wk[W_YACT, c] = 0.0
        sm[S_NACT, c] = 0.0
        sm[S_LOSS, c] = 0.0
    for i in range(rows.size):
        r = rows[i]
        for c in range(M):
            si = sw[r, c] if weighted else 1.0
            mi = m[i, c]
            sl = max(0.0, 1.0 - mi)
            if squared:
                gi = 2.0 * si * sl                                  # -d loss_i / d m_i
                sm[S_LOSS, c] += si * sl * sl
            else:
                gi = si
                sm[S_LOSS, c] += si * sl
            if mi < 1.0:
                gy = gi * np.float64(Y[r, c])
                sm[S_NACT, c] += 1.0
                coef[i, c] = gy * (eta / (k * wk[W_ANEW, c]))
                wk[W_YACT, c] += gy
            else:
                coef[i, c] = 0.0
    _add_rows_m(indptr, indices, data, V, U, sm[S_ASUM], use_u, rows, coef, single, slot, acc,
                touched, wk[W_DN])
    for c in range(M):
        a = wk[W_ANEW, c]
        sm[S_DNORM, c] = wk[W_DN, c]
        sm[S_VSQ, c] += wk[W_DN, c]
        sm[S_A, c] = a
        if unreg_bias:
            sm[S_YACT, c] = wk[W_YACT, c]
            sm[S_B, c] += eta * sm[S_YACT, c] / k
        if radius > 0.0:
            wsq = a * a * sm[S_VSQ, c]
            if wsq > radius * radius:
                sm[S_A, c] = a * (radius / np.sqrt(wsq))
        if average:
            sm[S_ASUM, c] += sm[S_A, c]
            sm[S_NAVG, c] += 1.0
            sm[S_BSUM, c] += sm[S_B, c]


def _make_pegasos_loop_m(by_epoch, optimal):
    """:func:`pegasos_loop_m` compiled for rows read from the epoch's order (``by_epoch``:
    one-row batches of ``"epoch"`` sampling on a canonical CSR) or drawn by the sampler, with
    or without the batch-optimal bias (``optimal``): each fit compiles only what it runs."""

    @njit(cache=True, nogil=True)
    def pegasos_loop_m(indptr, indices, data, Y, sw, weighted, V, U, use_u, sm, smp, ring, ringf,
                       ringh, rk, ecache, stamp, order, table, t0, t1, lam, k, schedule, eta0,
                       norma_p, unreg_bias, radius, averaged, t_avg, renorm, squared,
                       canonical, m, coef, slot, acc, touched, wk, tmp, vflat, yb, sc, bp, wt):
        """Iterations ``t0 + 1 .. t1`` of Pegasos on the general path, batches drawn in place
        (``GeneralPath.pegasos_segment_m``).  ``order`` and ``table``: the epoch order's arrays
        when the backend made them (``"epoch"`` sampling of one row per batch), from which the
        rows are read as the binary loop reads them (the same rows, a quarter of the sampler's
        cost), else empty."""
        single = True if by_epoch else (canonical and k == 1)   # (a constant when by_epoch)
        z = np.empty(V.shape[1])                  # a row's dot products (_margins_m)
        n = smp[1]
        e, q = 0, 0
        if by_epoch:
            e, q = epoch_position(t0, n, smp, rk, ecache, table, order)  # batch t0 (b = 1)
        else:
            _fill_ring(smp, t0, ring, ringf, ringh, rk, ecache, stamp)
        for t in range(t0 + 1, t1 + 1):
            if by_epoch:
                if q + ORDER_PREFETCH < n:
                    _prefetch_row(indptr, indices, data, order[q + ORDER_PREFETCH])
                if q + 1 < n:
                    _prefetch_v_m(indptr, indices, vflat, V.shape[1], order[q + 1:q + 2])
                rows = ring[0]                    # a copy: the next epoch's order overwrites order
                rows[0] = order[q]                                                # step 1: A_t
                e, q = epoch_advance(e, q, n, smp, rk, ecache, table, order)
            else:
                _draw_ahead(indptr, indices, data, vflat, smp, t - 1, ring, ringf, ringh, rk,
                            ecache, stamp, False)
                _prefetch_v_m(indptr, indices, vflat, V.shape[1],
                              ring[t % (PREFETCH_DISTANCE + 1)])
                rows = ring[(t - 1) % (PREFETCH_DISTANCE + 1)]                    # step 1: A_t
            _margins_m(indptr, indices, data, Y, V, sm, rows, m, z)               # step 2
            if optimal:
                _optimal_bias_m(Y, sw, weighted, rows, m, sm, yb, sc, bp, wt)     # Sec. 4
            eta, shrink = _step_size(schedule, t, lam, eta0, norma_p)             # step 3
            if shrink == 0.0:
                _reset_scale_m(V, U, use_u, sm)
                shrink = 1.0
            _pegasos_step_m(indptr, indices, data, Y, sw, weighted, V, U, use_u, sm, rows, m, coef,
                            eta, shrink, k, unreg_bias, radius, averaged and t >= t_avg, squared,
                            single, slot, acc, touched, wk)                       # steps 4-5
            _renormalize_m(V, U, use_u, sm, renorm, tmp)

    return pegasos_loop_m


#: the Pegasos loop of the general path by ``(by_epoch, optimal)``: rows in the epoch's order
#: (``"epoch"`` sampling, one row a batch), batch-optimal bias
PEGASOS_LOOP_M = {(by, opt): _make_pegasos_loop_m(by, opt)
                  for by in (False, True) for opt in (False, True)}

# ---------------------------------------------------------------------- SDCA
@njit(cache=True, inline="always")
def _sdca_deltas_m(Y, sw, weighted, alpha, inv_q, row_sq, sm, rows, m, lamn, first, has_first,
                   squared, delta):
    """Eq. (15) per output, weighted, per loss (``GeneralPath.sdca_deltas_m``)."""
    M = m.shape[1]
    for i in range(rows.size):
        r = rows[i]
        if has_first and not first[i]:
            for c in range(M):
                delta[i, c] = 0.0
            continue
        q = row_sq[r]
        for c in range(M):
            si = sw[r, c] if weighted else 1.0
            a = alpha[r, c]
            if squared:
                x = (2.0 * si * (1.0 - m[i, c]) - a) / (1.0 + 2.0 * si * sm[S_BETA, c] * q / lamn)
                delta[i, c] = x if x > -a else -a
            elif q == 0.0:
                delta[i, c] = si - a
            else:
                raw = (lamn / sm[S_BETA, c]) * (1.0 - m[i, c]) * inv_q[r]
                lo = -a
                hi = si - a
                x = raw if raw > lo else lo
                delta[i, c] = x if x < hi else hi


@njit(cache=True, inline="always")
def _sdca_adapt_beta_m(indptr, indices, data, Y, row_sq, sm, rows, delta, coef, beta_b, theta,
                       slot, acc, touched, wk):
    """Alg. 2 per output (``GeneralPath.sdca_adapt_beta_m``)."""
    M = delta.shape[1]
    for c in range(M):
        wk[W_DEN, c] = 0.0
    for i in range(rows.size):
        r = rows[i]
        for c in range(M):
            wk[W_DEN, c] += delta[i, c] * delta[i, c] * row_sq[r]
            coef[i, c] = delta[i, c] * np.float64(Y[r, c])
    _sum_sq_norms_m(indptr, indices, data, rows, coef, slot, acc, touched, wk[W_NUM])
    for c in range(M):
        den = wk[W_DEN, c]
        if den > 0.0:
            rho = min(max(wk[W_NUM, c] / den, 1.0), beta_b)
            sm[S_TMP0, c] = rho
            beta = sm[S_BETA, c] ** theta * rho ** (1.0 - theta)
            sm[S_BETA, c] = min(max(beta, 1.0), beta_b)


@njit(cache=True, inline="always")
def _sdca_apply_m(indptr, indices, data, Y, sw, weighted, V, sm, alpha, rows, delta, coef, lam,
                  n, check, squared, single, eps, no_u, slot, acc, touched, wk):
    """Alpha and ``W`` step per output, each output's step undone alone when ``check`` finds
    that it lowers its dual (``GeneralPath.sdca_apply_m``)."""
    M = delta.shape[1]
    for c in range(M):
        wk[W_VSQ0, c] = sm[S_VSQ, c]
        wk[W_GAIN, c] = 0.0
        wk[W_DABS, c] = 0.0
        wk[W_OK, c] = 1.0
    for i in range(rows.size):
        r = rows[i]
        for c in range(M):
            si = sw[r, c] if weighted else 1.0
            dl = delta[i, c]
            coef[i, c] = dl * np.float64(Y[r, c]) * (1.0 / (lam * n * sm[S_A, c]))
            if check:
                if squared:
                    quad = dl * (2.0 * alpha[r, c] + dl) / (4.0 * si) if si > 0.0 else 0.0
                    wk[W_GAIN, c] += dl - quad
                else:
                    wk[W_GAIN, c] += dl
                wk[W_DABS, c] += abs(dl)
    _add_rows_m(indptr, indices, data, V, no_u, wk[W_OK], False, rows, coef, single, slot, acc,
                touched, wk[W_DN])
    rejected = False
    for c in range(M):
        sm[S_DNORM, c] = wk[W_DN, c]
        if check:
            a = sm[S_A, c]
            tau = 4.0 * (eps * lam * a * a * wk[W_VSQ0, c] + _EPS64 * wk[W_DABS, c] / n)
            if wk[W_GAIN, c] / n - 0.5 * lam * a * a * wk[W_DN, c] < -tau:
                wk[W_OK, c] = 0.0
                rejected = True
    if rejected:
        for i in range(rows.size):
            for c in range(M):
                coef[i, c] = 0.0 if wk[W_OK, c] == 1.0 else -coef[i, c]
        _add_rows_m(indptr, indices, data, V, no_u, wk[W_OK], False, rows, coef, single, slot,
                    acc, touched, wk[W_DN2])
        for c in range(M):
            if wk[W_OK, c] == 0.0:
                wk[W_DN, c] += wk[W_DN2, c]
                sm[S_NREJ, c] += 1.0
    for c in range(M):
        sm[S_VSQ, c] += wk[W_DN, c]
    for i in range(rows.size):
        r = rows[i]
        for c in range(M):
            if wk[W_OK, c] == 1.0:
                alpha[r, c] += delta[i, c]
                sm[S_ASUMD, c] += delta[i, c]


@njit(cache=True, inline="always")
def _sdca_row_m(indptr, indices, data, Y, sw, weighted, V, sm, alpha, inv_q, row_sq, r, lam,
                n, squared, touched, wk, z):
    """One safe/naive step on the one-row batch ``{r}``: :func:`_margins_m`,
    :func:`_sdca_deltas_m` and :func:`_sdca_apply_m` (without the check) fused, with the
    same arithmetic, and the bookkeeping of the outputs whose ``delta`` is 0 skipped.

    ``z`` holds the row's dot products (:func:`_margins_m`), ``wk[W_ANEW]`` the deltas and
    ``wk[W_YACT]`` the coefficients of the outputs that move (``touched[:nmov]``).
    """
    M = V.shape[1]
    lamn = lam * n
    lo = indptr[r]
    hi = indptr[r + 1]
    if M == 1:                        # one output: the sum in a register, the same order
        acc = 0.0
        for p in range(lo, hi):
            acc += data[p] * V[indices[p], 0]
        z[0] = acc
    else:
        for c in range(M):
            z[c] = 0.0
        for p in range(lo, hi):                                # one gather serves all M
            x = data[p]
            j = indices[p]
            for c in range(M):
                z[c] += x * V[j, c]
    q = row_sq[r]
    nmov = 0
    for c in range(M):                                         # eq. (15) per output
        si = sw[r, c] if weighted else 1.0
        yc = np.float64(Y[r, c])
        m = yc * (sm[S_A, c] * z[c] + sm[S_B, c])
        a = alpha[r, c]
        if squared:
            x = (2.0 * si * (1.0 - m) - a) / (1.0 + 2.0 * si * sm[S_BETA, c] * q / lamn)
            dl = x if x > -a else -a
        elif q == 0.0:
            dl = si - a
        else:
            raw = (lamn / sm[S_BETA, c]) * (1.0 - m) * inv_q[r]
            x = raw if raw > -a else -a
            dl = x if x < si - a else si - a
        sm[S_DNORM, c] = 0.0
        if dl != 0.0:
            touched[nmov] = c
            wk[W_ANEW, nmov] = dl
            wk[W_YACT, nmov] = dl * yc * (1.0 / (lam * n * sm[S_A, c]))
            nmov += 1
    if nmov == 0:
        return
    _add_row_to_columns(indices, data, lo, hi, V, V, sm[S_DNORM], False, touched,  # w step
                        wk[W_YACT], nmov, sm[S_DNORM])
    for qc in range(nmov):
        c = touched[qc]
        sm[S_VSQ, c] += sm[S_DNORM, c]
        alpha[r, c] += wk[W_ANEW, qc]
        sm[S_ASUMD, c] += wk[W_ANEW, qc]


@njit(cache=True, nogil=True)
def _sdca_epochs_single_m(indptr, indices, data, Y, sw, weighted, V, sm, alpha, inv_q, row_sq,
                          smp, rk, ecache, order, table, t0, t1, lam, n, squared, touched, wk,
                          vflat, aflat, yflat):
    """:func:`sdca_loop_m`'s safe/naive steps on one-row batches of ``"epoch"`` sampling, the
    rows read from the epoch's order (:func:`gpusvm.backends._counter_nb.epoch_order`, as the
    binary loop reads them) instead of drawn one at a time: the same rows in the same order,
    at about a quarter of the sampler's cost (25 ns a row against 100 on a9a)."""
    M = V.shape[1]
    z = np.empty(M)                           # a row's dot products (_margins_m)
    e, q = epoch_position(t0, n, smp, rk, ecache, table, order)     # batch t0 (b = 1)
    for _ in range(t0, t1):
        qa = q + ORDER_PREFETCH
        if qa < n:                                # the row ahead, its duals and labels
            _prefetch_row(indptr, indices, data, order[qa])
            _prefetch_duals_m(aflat, yflat, inv_q, row_sq, M, order[qa:qa + 1])
        if q + 1 < n:
            _prefetch_v_m(indptr, indices, vflat, M, order[q + 1:q + 2])
        r = order[q]                                                          # A_t = {r}
        e, q = epoch_advance(e, q, n, smp, rk, ecache, table, order)
        _sdca_row_m(indptr, indices, data, Y, sw, weighted, V, sm, alpha, inv_q, row_sq, r,
                    lam, n, squared, touched, wk, z)


@njit(cache=True, nogil=True)
def sdca_loop_m(indptr, indices, data, Y, sw, weighted, V, sm, alpha, inv_q, row_sq, smp, ring,
                ringf, ringh, rk, ecache, stamp, order, table, t0, t1, lam, n, beta_b, theta,
                aggressive, squared, canonical, eps, m, delta, coef, no_u, slot, acc, touched,
                wk, vflat, aflat, yflat):
    """Iterations ``t0 + 1 .. t1`` of mini-batch SDCA on the general path, batches drawn in
    place (``GeneralPath.sdca_segment_m``; ``vflat``, ``aflat`` and ``yflat`` are ``V``,
    ``alpha`` and ``Y`` flattened by the caller, for the prefetches: flattening them here
    costs seconds of compilation).  ``order`` and ``table``: the epoch order's arrays when
    the backend made them (``"epoch"`` sampling of one row per batch), else empty.  The safe
    and naive steps on one row at a time of ``"epoch"`` sampling run
    :func:`_sdca_epochs_single_m` instead (the caller picks, so that a fit compiles only the
    loop it runs)."""
    single = canonical and smp[2] == 1
    lamn = lam * n
    z = np.empty(V.shape[1])                  # a row's dot products (_margins_m)
    _fill_ring(smp, t0, ring, ringf, ringh, rk, ecache, stamp)
    for bt in range(t0, t1):
        _draw_ahead(indptr, indices, data, vflat, smp, bt, ring, ringf, ringh, rk, ecache,
                    stamp, False)
        ahead = ring[(bt + 1) % (PREFETCH_DISTANCE + 1)]
        _prefetch_v_m(indptr, indices, vflat, V.shape[1], ahead)
        _prefetch_duals_m(aflat, yflat, inv_q, row_sq, V.shape[1], ahead)
        sl = bt % (PREFETCH_DISTANCE + 1)
        rows = ring[sl]                                                       # A_t
        if single and not aggressive:
            _sdca_row_m(indptr, indices, data, Y, sw, weighted, V, sm, alpha, inv_q, row_sq,
                        rows[0], lam, n, squared, touched, wk, z)
            continue
        first = ringf[sl]
        has_first = ringh[sl]
        _margins_m(indptr, indices, data, Y, V, sm, rows, m, z)               # y_ic <w_c, x_i>
        _sdca_deltas_m(Y, sw, weighted, alpha, inv_q, row_sq, sm, rows, m, lamn, first,
                       has_first, squared, delta)                             # eq. (15)
        if aggressive:                                                        # Alg. 2
            _sdca_adapt_beta_m(indptr, indices, data, Y, row_sq, sm, rows, delta, coef, beta_b,
                               theta, slot, acc, touched, wk)
            _sdca_deltas_m(Y, sw, weighted, alpha, inv_q, row_sq, sm, rows, m, lamn, first,
                           has_first, squared, delta)
        _sdca_apply_m(indptr, indices, data, Y, sw, weighted, V, sm, alpha, rows, delta, coef,
                      lam, n, aggressive, squared, single, eps, no_u, slot, acc, touched, wk)


# ---------------------------------------------------------------------- evaluation
@njit(cache=True, nogil=True)
def csr_matmat(indptr, indices, data, W, b, out):
    """``out[i, c] = <x_i, w_c> + b_c`` in float64 (one pass over ``X``, ``W`` row-major)."""
    n = indptr.size - 1
    M = W.shape[1]
    z = np.empty(M)                      # a local row: no store to ``out`` per nonzero
    wflat = W.reshape(-1)
    ahead = np.empty(1, dtype=np.int64)
    for i in range(n):
        if i + 1 < n:                    # W's lines of the next row (W is megabytes)
            ahead[0] = i + 1
            _prefetch_v_m(indptr, indices, wflat, M, ahead)
        for c in range(M):
            z[c] = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            x = np.float64(data[p])
            j = indices[p]
            for c in range(M):
                z[c] += x * W[j, c]
        for c in range(M):
            out[i, c] = z[c] + b[c]


@njit(cache=True, nogil=True)
def csr_rmatmat(indptr, indices, data, alpha, Y, out):
    """``out += X^T (alpha * Y)`` in float64, visiting only the (row, output) pairs whose
    ``alpha`` is not 0 (one-vs-rest on text: a few of a row's M outputs), all of them per
    nonzero (they share the cache lines of ``out[j, :]``); each entry of ``out`` receives
    its rows' terms in row order."""
    n = indptr.size - 1
    M = out.shape[1]
    nz = np.empty(M, dtype=np.int64)
    coef = np.empty(M, dtype=np.float64)
    oflat = out.reshape(-1)
    ahead = np.empty(1, dtype=np.int64)
    for i in range(n):
        if i + 1 < n:                    # out's lines of the next row (out is megabytes)
            ahead[0] = i + 1
            _prefetch_v_m(indptr, indices, oflat, M, ahead)
        k = 0
        for c in range(M):
            cf = alpha[i, c] * np.float64(Y[i, c])
            if cf != 0.0:
                nz[k] = c
                coef[k] = cf
                k += 1
        if k == 0:
            continue
        for p in range(indptr[i], indptr[i + 1]):   # a nonzero at a time: one line of out
            j = indices[p]
            x = np.float64(data[p])
            for q in range(k):
                out[j, nz[q]] += x * coef[q]


@njit(cache=True, inline="always")
def _col_dot1(A, a, B, b):
    """``<A[:, a], B[:, b]>`` in float64 as four interleaved partial sums (one column each: the
    general loops below chain every addition of a column through ``out``, 13x slower at M = 1)."""
    d = A.shape[0]
    z0 = 0.0
    z1 = 0.0
    z2 = 0.0
    z3 = 0.0
    j = 0
    while j + 4 <= d:
        z0 += np.float64(A[j, a]) * np.float64(B[j, b])
        z1 += np.float64(A[j + 1, a]) * np.float64(B[j + 1, b])
        z2 += np.float64(A[j + 2, a]) * np.float64(B[j + 2, b])
        z3 += np.float64(A[j + 3, a]) * np.float64(B[j + 3, b])
        j += 4
    while j < d:
        z0 += np.float64(A[j, a]) * np.float64(B[j, b])
        j += 1
    return (z0 + z1) + (z2 + z3)


@njit(cache=True)
def col_dots(A, a_cols, B, out):
    """``out_q = <A[:, a_cols[q]], B[:, q]>`` in float64, one row-major pass over both."""
    Q = a_cols.size
    if Q == 1:
        out[0] = _col_dot1(A, a_cols[0], B, 0)
        return
    for q in range(Q):
        out[q] = 0.0
    for j in range(A.shape[0]):
        for q in range(Q):
            out[q] += A[j, a_cols[q]] * B[j, q]


@njit(cache=True)
def mix_columns(dst, dst_cols, src, t):
    """``dst[:, dst_cols[q]] += t_q (src[:, q] - dst[:, dst_cols[q]])``, a row at a time;
    ``t_q = 1`` copies, ``t_q = 0`` skips (both row-major)."""
    if dst_cols.size == 1:                  # one column: the branch taken once, not per row
        c = dst_cols[0]
        t0 = t[0]
        if t0 == 1.0:
            for j in range(dst.shape[0]):
                dst[j, c] = src[j, 0]
        elif t0 > 0.0:
            for j in range(dst.shape[0]):
                old = dst[j, c]
                dst[j, c] = old + t0 * (src[j, 0] - old)
        return
    for j in range(dst.shape[0]):
        for q in range(dst_cols.size):
            tq = t[q]
            if tq == 1.0:
                dst[j, dst_cols[q]] = src[j, q]
            elif tq > 0.0:
                old = dst[j, dst_cols[q]]
                dst[j, dst_cols[q]] = old + tq * (src[j, q] - old)


@njit(cache=True)
def col_sq_norms(W, out):
    """``out_c = ||W[:, c]||^2`` in float64, one row-major pass over ``W``."""
    d, M = W.shape
    if M == 1:
        out[0] = _col_dot1(W, 0, W, 0)
        return
    for c in range(M):
        out[c] = 0.0
    for j in range(d):
        for c in range(M):
            x = np.float64(W[j, c])
            out[c] += x * x


@njit(cache=True)
def scale_copy_sq_m(W, lamn, V, vsq):
    """``W /= lamn``, ``V = W`` (rounded to ``V``'s dtype) and ``vsq_c = ||V[:, c]||^2`` of the
    rounded values, in float64: one pass instead of four over a ``d x M`` array."""
    d, M = W.shape
    for c in range(M):
        vsq[c] = 0.0
    for j in range(d):
        for c in range(M):
            w = W[j, c] / lamn
            W[j, c] = w
            V[j, c] = w
            x = np.float64(V[j, c])
            vsq[c] += x * x


def max_row_nnz(indptr) -> int:
    """The longest row's number of nonzeros (sizes the compact scratch of a batch)."""
    return int(np.max(np.diff(indptr))) if indptr.size > 1 else 0
