"""Compiled sparse kernels and cache hints of the numba backend (no solver logic).

Row gathers and scatters go straight through ``indptr``/``indices``/``data`` of
the CSR matrix; nothing of ``X`` is copied, and a float32 ``X`` is never upcast
(products in the data's dtype where the reference forms them so, sums in
float64).  ``V`` (d, M) is row-major, so one nonzero ``x_ij`` reads and writes
the ``M`` contiguous entries ``V[j, :]``; a batch of several rows is summed
per column in a compact scratch (``slot[j]`` is the column's row of ``acc``,
first-touch order) before ``V`` is written once per column and output.

Each kernel with an ``M`` loop also has an ``M = 1`` form that keeps one
running value in registers (four interleaved partial sums for a row's dot
product): the same source, a branch the compiler takes once.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from ._counter_nb import batch

#: batches ahead whose rows are prefetched (rows of a shuffled epoch are cold in the cache)
PREFETCH_DISTANCE = 2
#: rows ahead prefetched when the loop reads an epoch's order
ORDER_PREFETCH = 4
RING = PREFETCH_DISTANCE + 1


@intrinsic
def prefetch(typingctx, arr, idx):
    """``llvm.prefetch`` (read, high locality) of ``&arr[idx]``: a hint, no effect on values."""
    sig = types.void(arr, idx)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]], wraparound=False)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = builder.module.declare_intrinsic("llvm.prefetch", [i8p], fnty)
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, inline="always")
def prefetch_row(indptr, indices, data, r):
    """Ask for the cache lines of row ``r`` of ``X`` (8 values / 16 indices per 64-byte line)."""
    lo = indptr[r]
    hi = indptr[r + 1]
    for p in range(lo, hi, 8):
        prefetch(data, p)
    for p in range(lo, hi, 16):
        prefetch(indices, p)


@njit(cache=True, inline="always")
def prefetch_v_row(indptr, indices, vf, M, r):
    """Ask for the lines of ``V[j, :]`` of every nonzero ``x_rj`` (``vf``: ``V`` flattened
    row-major).  A ``V`` beyond the L2 cache is cold: without the hint each nonzero
    waits on its line in turn (3-4x slower on news20)."""
    step = max(1, 64 // vf.itemsize)
    for p in range(indptr[r], indptr[r + 1]):
        if M == 1:
            prefetch(vf, indices[p])
        else:
            base = indices[p] * M
            for o in range(0, M, step):
                prefetch(vf, base + o)
            prefetch(vf, base + M - 1)


@njit(cache=True, inline="always")
def prefetch_v(indptr, indices, vf, M, rows):
    """:func:`prefetch_v_row` for every row of ``rows``."""
    for i in range(rows.size):
        prefetch_v_row(indptr, indices, vf, M, rows[i])


@njit(cache=True, inline="always")
def prefetch_duals(af, yf, inv_q, M, r):
    """Ask for the lines of ``alpha[r, :]``, ``Y[r, :]`` and ``1/||x_r||^2`` (flattened
    row-major): a shuffled epoch visits them cold."""
    base = r * M
    for o in range(0, M, 8):
        prefetch(af, base + o)
    for o in range(0, M, 16):
        prefetch(yf, base + o)
    if M > 1:
        prefetch(af, base + M - 1)
        prefetch(yf, base + M - 1)
    prefetch(inv_q, r)


@njit(cache=True)
def fill_ring(sam, bt0):
    """Draw the batches ``bt0 .. bt0 + PREFETCH_DISTANCE - 1`` into the ring of ``sam``."""
    smp, ring, ringf, ringh, rk, ecache, stamp = sam[:7]
    for bt in range(bt0, bt0 + PREFETCH_DISTANCE):
        sl = bt % RING
        ringh[sl] = batch(smp[0], smp[1], smp[2], smp[3], smp[4], smp[5], bt, ring[sl],
                          ringf[sl], rk, ecache, stamp)


@njit(cache=True, inline="always")
def draw_ahead(indptr, indices, data, vf, M, sam, bt, pref_v):
    """Before the iteration on batch ``bt``: draw batch ``bt + PREFETCH_DISTANCE`` into the
    ring (``sam``: the sampler's ``(smp, ring, ringf, ringh, rk, ecache, stamp, ...)``,
    ``smp = (code, n, k, seed, half, mask)``), ask for its rows' lines and, when
    ``pref_v``, for the lines of ``V`` that batch ``bt + 1`` will touch."""
    smp, ring, ringf, ringh, rk, ecache, stamp = sam[:7]
    nxt = bt + PREFETCH_DISTANCE
    sl = nxt % RING
    ringh[sl] = batch(smp[0], smp[1], smp[2], smp[3], smp[4], smp[5], nxt, ring[sl],
                      ringf[sl], rk, ecache, stamp)
    rows = ring[sl]
    for i in range(rows.size):
        prefetch_row(indptr, indices, data, rows[i])
    if pref_v:
        prefetch_v(indptr, indices, vf, M, ring[(bt + 1) % RING])


# ---------------------------------------------------------------------- rows
@njit(cache=True, nogil=True)
def localize_columns(indices, d):
    """``(cols, local)``: the sorted columns ``indices`` use (int64), and ``indices`` re-indexed
    to their positions in ``cols`` (int32); two passes over ``indices``, one over ``d``
    (a dask block's columns: a third of NumPy's scatter, search and gather)."""
    at = np.zeros(d, dtype=np.int32)              # 1 where used, then the position + 1
    for p in range(indices.size):
        at[indices[p]] = 1
    k = 0
    for j in range(d):
        if at[j]:
            k += 1
            at[j] = k
    cols = np.empty(k, dtype=np.int64)
    for j in range(d):
        if at[j]:
            cols[at[j] - 1] = j
    local = np.empty(indices.size, dtype=np.int32)
    for p in range(indices.size):
        local[p] = at[indices[p]] - 1
    return cols, local


@njit(cache=True, nogil=True, fastmath=True)
def round_sums(Wb, U, W, out):
    """``W = Wb`` in float64 and, per output ``c``, ``out[:, c] = (||W_c||^2, <W_c, U_c>,
    ||U_c||^2)``: one pass where NumPy makes five (the dask driver's round: the gap's norm
    and the line search's products)."""
    m, M = W.shape
    if M == 1:                                   # flat: the loop vectorises
        wbf, uf, wf = Wb.reshape(-1), U.reshape(-1), W.reshape(-1)
        ww = wu = uu = 0.0
        for j in range(m):
            w = np.float64(wbf[j])
            u = uf[j]
            wf[j] = w
            ww += w * w
            wu += w * u
            uu += u * u
        out[0, 0], out[1, 0], out[2, 0] = ww, wu, uu
        return
    for k in range(3):
        for c in range(M):
            out[k, c] = 0.0
    for j in range(m):
        for c in range(M):
            w = np.float64(Wb[j, c])
            u = U[j, c]
            W[j, c] = w
            out[0, c] += w * w
            out[1, c] += w * u
            out[2, c] += u * u


@njit(cache=True, nogil=True)
def add_scaled(W, U, step):
    """``W[:, c] += step[c] U[:, c]`` (the dask driver's step along the round's change)."""
    m, M = W.shape
    if M == 1:                                   # flat: the loop vectorises
        wf, uf, g = W.reshape(-1), U.reshape(-1), step[0]
        for j in range(m):
            wf[j] += g * uf[j]
        return
    for j in range(m):
        for c in range(M):
            W[j, c] += step[c] * U[j, c]


@njit(cache=True, nogil=True)
def add_rows_at(out, pos, part):
    """``out[pos[i], :] += part[i, :]`` for distinct ``pos`` (a dense scatter-add: the dask
    driver's sum of the blocks' ``(d_k, M)`` parts, a quarter of NumPy's fancy-index add)."""
    M = out.shape[1]
    if M == 1:
        of, pf = out.reshape(-1), part.reshape(-1)
        for i in range(pos.size):
            of[pos[i]] += pf[i]
        return
    for i in range(pos.size):
        j = pos[i]
        for c in range(M):
            out[j, c] += part[i, c]


@njit(cache=True)
def row_sq_norms(indptr, data, out):
    """``out_i = ||x_i||^2`` in float64, without a copy of ``X``."""
    for i in range(indptr.size - 1):
        acc = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            x = np.float64(data[p])
            acc += x * x
        out[i] = acc


@njit(cache=True, inline="always")
def row_dot(indptr, indices, data, x, r):
    """``<x_r, x>`` as four interleaved float64 partial sums (products in the operands' own
    type); four sums break the chain of dependent additions (~20% faster on imdb), a
    reassociation that changes the result only at the rounding level."""
    lo = indptr[r]
    hi = indptr[r + 1]
    z0 = 0.0
    z1 = 0.0
    z2 = 0.0
    z3 = 0.0
    p = lo
    while p + 4 <= hi:
        z0 += data[p] * x[indices[p]]
        z1 += data[p + 1] * x[indices[p + 1]]
        z2 += data[p + 2] * x[indices[p + 2]]
        z3 += data[p + 3] * x[indices[p + 3]]
        p += 4
    while p < hi:
        z0 += data[p] * x[indices[p]]
        p += 1
    return (z0 + z1) + (z2 + z3)


@njit(cache=True, inline="always")
def add_row(indptr, indices, data, vf, uf, u_scale, use_u, r, ci):
    """``v += ci x_r`` for one row of a canonical CSR and one output (flat ``vf``), in place
    (``u += u_scale ci x_r`` when ``use_u``); returns the exact change of ``||v||^2``,
    ``(new - old)(new + old)`` per column of the values as stored.  Zero products are
    skipped, as the reference drops them."""
    dn = 0.0
    if ci == 0.0:
        return dn
    for p in range(indptr[r], indptr[r + 1]):
        x = data[p] * ci
        if x == 0.0:
            continue
        c = indices[p]
        old = np.float64(vf[c])
        vf[c] = old + x
        new = np.float64(vf[c])
        if use_u:
            uf[c] += u_scale * x
        dn += (new - old) * (new + old)
    return dn


@njit(cache=True, inline="always")
def add_exact(V, U, u_scale, use_u, j, c, g):
    """``V[j, c] += g`` (``U[j, c] += u_scale[c] g`` when ``use_u``); the exact change of
    ``V[j, c]^2`` as stored."""
    old = np.float64(V[j, c])
    V[j, c] = old + g
    new = np.float64(V[j, c])
    if use_u:
        U[j, c] += u_scale[c] * g
    return (new - old) * (new + old)


@njit(cache=True, inline="always")
def add_row_to_columns(indices, data, lo, hi, V, U, u_scale, use_u, cols, cc, nmov, dn):
    """``V[:, cols[q]] += cc[q] x`` for ``q < nmov`` and the row ``x`` stored at ``lo:hi``;
    ``dn[cols[q]]`` gets the exact ``d||v_c||^2``.  A nonzero at a time with its moving
    outputs inside (they share the lines of ``V[j, :]``); each output's additions run in
    the row's order."""
    for q in range(nmov):
        dn[cols[q]] = 0.0
    for p in range(lo, hi):
        j = indices[p]
        x = data[p]
        for q in range(nmov):
            c = cols[q]
            dn[c] += add_exact(V, U, u_scale, use_u, j, c, x * cc[q])


@njit(cache=True, inline="always")
def sum_rows(indptr, indices, data, rows, coef, M, slot, acc, touched, skip_still):
    """``acc[q, c] = sum_i coef_ic x_{rows_i, touched[q]}`` (first-touch column order);
    returns the number of columns ``nt``.  ``skip_still``: rows whose coefficients are
    all 0 are passed over.  The caller resets ``slot`` of the touched columns to -1."""
    nt = 0
    for i in range(rows.size):
        if skip_still:
            moves = False
            for c in range(M):
                if coef[i, c] != 0.0:
                    moves = True
            if not moves:
                continue
        r = rows[i]
        ci = coef[i, 0]                 # M = 1: the coefficient in a register
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
            if M == 1:
                acc[q, 0] += x * ci
            else:
                for c in range(M):
                    acc[q, c] += x * coef[i, c]
    return nt


@njit(cache=True, inline="always")
def add_rows(indptr, indices, data, V, vf, U, uf, u_scale, use_u, rows, coef, M, slot, acc,
             touched, dn):
    """``V[:, c] += sum_i coef_ic x_{rows_i}`` (``U[:, c] += u_scale_c *`` the same) for a
    batch, summed per column first; the exact ``d||v_c||^2`` into ``dn`` (``vf``, ``uf``:
    ``V`` and ``U`` flattened, written through when ``M = 1``)."""
    for c in range(M):
        dn[c] = 0.0
    nt = sum_rows(indptr, indices, data, rows, coef, M, slot, acc, touched, True)
    if M == 1:                          # one output: the change of ||v||^2 in a register
        d0 = 0.0
        for q in range(nt):
            j = touched[q]
            g = acc[q, 0]
            if g != 0.0:
                old = np.float64(vf[j])
                vf[j] = old + g
                new = np.float64(vf[j])
                if use_u:
                    uf[j] += u_scale[0] * g
                d0 += (new - old) * (new + old)
            slot[j] = -1
        dn[0] = d0
        return
    for q in range(nt):
        j = touched[q]
        for c in range(M):
            g = acc[q, c]
            if g != 0.0:
                dn[c] += add_exact(V, U, u_scale, use_u, j, c, g)
        slot[j] = -1


@njit(cache=True, inline="always")
def sum_sq_norms(indptr, indices, data, rows, coef, M, slot, acc, touched, out):
    """``out_c = ||sum_i coef_ic x_{rows_i}||^2`` (scratch left clean)."""
    nt = sum_rows(indptr, indices, data, rows, coef, M, slot, acc, touched, False)
    if M == 1:                          # one output: the sum in a register
        o = 0.0
        for q in range(nt):
            o += acc[q, 0] * acc[q, 0]
            slot[touched[q]] = -1
        out[0] = o
        return
    for c in range(M):
        out[c] = 0.0
    for q in range(nt):
        for c in range(M):
            out[c] += acc[q, c] * acc[q, c]
        slot[touched[q]] = -1


# ---------------------------------------------------------------------- whole matrix
@njit(cache=True, nogil=True)
def csr_matvec(indptr, indices, data, w, b, out, pref):
    """:func:`csr_matmat` for one column ``w`` (flat): four partial sums per row, and a
    binary fit compiles no ``M`` loop."""
    n = indptr.size - 1
    for i in range(n):
        if pref and i + 1 < n:
            for p in range(indptr[i + 1], indptr[i + 2]):
                prefetch(w, indices[p])
        out[i] = row_dot(indptr, indices, data, w, i) + b


@njit(cache=True, nogil=True)
def csr_matmat(indptr, indices, data, W, wf, b, out, z, pref):
    """``out[i, c] = <x_i, w_c> + b_c`` in float64, one pass over ``X`` (``W`` row-major, ``wf``
    the same array flat; ``z``: scratch of ``M`` float64, a row of ``out`` kept local;
    ``pref``: prefetch the lines of ``W`` the next row reads).  The caller makes the flat
    view and the scratch: numba's ``reshape`` and ``np.empty`` would add about 0.4 s to a
    cold compilation."""
    n = indptr.size - 1
    M = W.shape[1]
    for i in range(n):
        if pref and i + 1 < n:
            prefetch_v_row(indptr, indices, wf, M, i + 1)
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
def csr_rmatvec(indptr, indices, data, alpha, y, out, pref):
    """``out += X^T (alpha * y)`` for one output (flat ``alpha``, ``y`` and ``out``), the
    product of :func:`dual_weights`: a binary fit compiles no ``M`` loop."""
    n = indptr.size - 1
    for i in range(n):
        if pref and i + 1 < n and alpha[i + 1] != 0.0:
            for p in range(indptr[i + 1], indptr[i + 2]):
                prefetch(out, indices[p])
        c = alpha[i] * np.float64(y[i])
        if c == 0.0:                      # alpha_i = 0 (every non-support vector)
            continue
        for p in range(indptr[i], indptr[i + 1]):
            out[indices[p]] += np.float64(data[p]) * c


@njit(cache=True, nogil=True)
def dual_weights(indptr, indices, data, alpha, Y, lamn, out, of, V, vsq, nz, coef, pref):
    """``out = X^T (alpha * Y) / lamn`` in float64 (``out`` zero on entry), then ``V = out``
    (rounded to ``V``'s dtype) and ``vsq_c = ||V[:, c]||^2`` of the rounded values.

    The product visits only the (row, output) pairs whose ``alpha`` is not 0, all of a
    row's outputs per nonzero (they share the lines of ``out[j, :]``); each entry of
    ``out`` receives its rows' terms in row order.  ``of``: ``out`` flat; ``nz`` (int64)
    and ``coef`` (float64): scratch of ``M`` (as :func:`csr_matmat`'s).  The scaling,
    copy and norms are one pass over ``d x M`` instead of four, in the same function (a
    compiled function costs about 0.1 s of compilation on its own).
    """
    n = indptr.size - 1
    d, M = out.shape
    for i in range(n):
        if pref and i + 1 < n:
            prefetch_v_row(indptr, indices, of, M, i + 1)
        k = 0
        for c in range(M):
            cf = alpha[i, c] * np.float64(Y[i, c])
            if cf != 0.0:
                nz[k] = c
                coef[k] = cf
                k += 1
        if k == 0:
            continue
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            x = np.float64(data[p])
            for q in range(k):
                out[j, nz[q]] += x * coef[q]
    for c in range(M):
        vsq[c] = 0.0
    for j in range(d):
        for c in range(M):
            w = out[j, c] / lamn
            out[j, c] = w
            V[j, c] = w
            x = np.float64(V[j, c])
            vsq[c] += x * x


def max_row_nnz(indptr) -> int:
    """The longest row's number of nonzeros (sizes the compact scratch of a batch)."""
    return int(np.max(np.diff(indptr))) if indptr.size > 1 else 0
