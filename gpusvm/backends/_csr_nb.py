"""Compiled sparse kernels and cache hints of the numba backend (no solver logic).

``X`` is read through its CSR arrays, never copied nor upcast (products in the data's dtype
where the reference forms them so, sums in float64).  ``V`` (d, M) is row-major; a batch of
rows is summed per column in a compact scratch (``slot[j]``: the column's row of ``acc``)
before ``V`` is written.  A kernel's ``M = 1`` form keeps its sums in registers.

Compilation: a helper of a row is inlined into the loops (``inline="always"``); one that a
whole batch of rows calls once (:func:`add_rows`, Alg. 2's sums included, the ring's
``_counter_nb.batch`` for batches of several rows) is compiled apart, without the CPython and C
entries only Python callers need (``no_cpython_wrapper``: each unboxes every argument), so
that a loop compiles it only where its flags call it, once however many times it is called
(numba copies an inlined helper at every call site and compiles each copy; a cold first
fit on batches compiled 1.5-2x longer so).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from . import _compile_nb  # noqa: F401  (the collector paused, the cache stamped)
from ._counter_nb import batch, batch_perm, batch_with

PREFETCH_DISTANCE = 2      # batches ahead whose rows are prefetched (a shuffled epoch's are cold)
ORDER_PREFETCH = 4         # rows ahead prefetched when the loop reads an epoch's order
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


@intrinsic
def unliteral(typingctx, x):
    """``x`` typed as a run-time value, not a constant: a compiled helper that takes a flag
    (``add_rows``' ``norms``) is then compiled once for both values, not once for each."""
    sig = types.unliteral(x)(x)

    def codegen(context, builder, signature, args):
        return context.cast(builder, args[0], signature.args[0], signature.return_type)

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
    """Ask for the lines of ``V[j, :]`` of every nonzero ``x_rj`` (3-4x faster on news20)."""
    if M == 1:
        for p in range(indptr[r], indptr[r + 1]):
            prefetch(vf, indices[p])
        return
    step = max(1, 64 // vf.itemsize)
    if M <= 2 * step:                   # at most three lines: three hints and no inner loop
        mid = step if M > step else 0   # (news20's 20 classes: 1/3 fewer instructions)
        for p in range(indptr[r], indptr[r + 1]):
            base = indices[p] * M
            prefetch(vf, base)
            prefetch(vf, base + mid)
            prefetch(vf, base + M - 1)
        return
    lines = (M - 1) // step + 1         # once per row: a division per nonzero cost 1/6 of
    for p in range(indptr[r], indptr[r + 1]):   # a news20 20-class epoch's instructions
        base = indices[p] * M
        for q in range(lines):
            prefetch(vf, base + q * step)
        prefetch(vf, base + M - 1)


@njit(cache=True, inline="always")
def prefetch_v(indptr, indices, vf, M, rows):
    """:func:`prefetch_v_row` for every row of ``rows``."""
    for i in range(rows.size):
        prefetch_v_row(indptr, indices, vf, M, rows[i])


@njit(cache=True, inline="always")
def prefetch_duals(af, yf, inv_q, M, r):
    """Ask for the lines of ``alpha[r, :]``, ``Y[r, :]`` and ``1/||x_r||^2`` (flat)."""
    base = r * M
    for o in range(0, M, 8):
        prefetch(af, base + o)
    for o in range(0, M, 16):
        prefetch(yf, base + o)
    if M > 1:
        prefetch(af, base + M - 1)
        prefetch(yf, base + M - 1)
    prefetch(inv_q, r)


@njit(cache=True, inline="always")
def draw_ahead(indptr, indices, data, vf, M, sam, bt, pref_v):
    """Draw batch ``bt + PREFETCH_DISTANCE`` (a call), prefetch its rows (and ``V``'s of batch
    ``bt + 1``).  A loop that starts at batch ``t0`` calls it from ``bt = t0 -
    PREFETCH_DISTANCE`` on (the ring's first batches drawn at the same call site: one copy
    of the drawing code, no separate function to fill the ring)."""
    smp, ring, ringf, ringh, rk, ecache, stamp = sam[:7]
    nxt = bt + PREFETCH_DISTANCE
    sl = nxt % RING
    ringh[sl] = batch(smp[0], smp[1], smp[2], smp[3], smp[4], smp[5], nxt, ring[sl],
                      ringf[sl], rk, ecache, stamp)
    _prefetch_ahead(indptr, indices, data, vf, M, ring, sl, bt, pref_v)


@njit(cache=True, inline="always")
def draw_ahead_row(indptr, indices, data, vf, M, sam, bt, pref_v):
    """:func:`draw_ahead` for one-row batches drawn without replacement or by epochs: the
    draw inlined, not called (a loop picks among these in its own body, by its closure
    flags, so that numba never inlines the others)."""
    smp, ring, ringf, ringh, rk, ecache, stamp = sam[:7]
    nxt = bt + PREFETCH_DISTANCE
    sl = nxt % RING
    ringh[sl] = batch_perm(smp[0], smp[1], smp[2], smp[3], smp[4], smp[5], nxt, ring[sl],
                           ringf[sl], rk, ecache)
    _prefetch_ahead(indptr, indices, data, vf, M, ring, sl, bt, pref_v)


@njit(cache=True, inline="always")
def draw_ahead_row_wr(indptr, indices, data, vf, M, sam, bt, pref_v):
    """:func:`draw_ahead_row` for one-row batches drawn with replacement."""
    smp, ring, ringf, ringh, rk, ecache, stamp = sam[:7]
    nxt = bt + PREFETCH_DISTANCE
    sl = nxt % RING
    ringh[sl] = batch_with(smp[1], smp[2], smp[3], nxt, ring[sl], ringf[sl], stamp)
    _prefetch_ahead(indptr, indices, data, vf, M, ring, sl, bt, pref_v)


@njit(cache=True, inline="always")
def _prefetch_ahead(indptr, indices, data, vf, M, ring, sl, bt, pref_v):
    rows = ring[sl]
    for i in range(rows.size):
        prefetch_row(indptr, indices, data, rows[i])
    if pref_v:
        prefetch_v(indptr, indices, vf, M, ring[(bt + 1) % RING])


@njit(cache=True, nogil=True)
def localize_columns(indices, d):
    """``(cols, local)``: the sorted columns used (int64), ``indices`` as positions in ``cols``."""
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
    """``W = Wb`` in float64, ``out[:, c] = (||W_c||^2, <W_c, U_c>, ||U_c||^2)``: one pass."""
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
    """``out[pos[i], :] += part[i, :]`` for distinct ``pos`` (the dask driver's sum of parts)."""
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
    """``<x_r, x>`` as four interleaved float64 partial sums: ~20% faster on imdb, equal to rounding."""
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
    """``v += ci x_r`` (and ``u``) for one output; the exact change of ``||v||^2`` as stored."""
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
    """``V[j, c] += g`` (and ``U[j, c] += u_scale[c] g``); the exact change of ``V[j, c]^2``."""
    old = np.float64(V[j, c])
    V[j, c] = old + g
    new = np.float64(V[j, c])
    if use_u:
        U[j, c] += u_scale[c] * g
    return (new - old) * (new + old)


@njit(cache=True, inline="always")
def add_row_to_columns(indices, data, lo, hi, V, U, u_scale, use_u, cols, cc, nmov, dn):
    """``V[:, cols[q]] += cc[q] x`` for ``q < nmov``, the exact ``d||v_c||^2`` into ``dn``."""
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
    """``acc[q, c] = sum_i coef_ic x_{rows_i, touched[q]}``; returns the column count.

    ``slot`` (-1 on entry for every column) maps a column to its ``q``; the caller resets the
    touched columns' ``slot`` to -1.  ``skip_still``: rows whose coefficients are all 0 are
    passed over."""
    nt = 0
    if M == 1:      # one output: its own loop, ~12% fewer instructions (a9a, b = 64)
        for i in range(rows.size):
            ci = coef[i, 0]
            if skip_still and ci == 0.0:
                continue
            r = rows[i]
            for p in range(indptr[r], indptr[r + 1]):
                j = indices[p]
                q = slot[j]
                if q < 0:
                    slot[j] = nt
                    touched[nt] = j
                    acc[nt, 0] = 0.0 + data[p] * ci
                    nt += 1
                else:
                    acc[q, 0] += data[p] * ci
        return nt
    for i in range(rows.size):
        if skip_still:
            moves = False
            for c in range(M):
                if coef[i, c] != 0.0:
                    moves = True
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
def _sq_norms(M, slot, acc, touched, nt, out):
    """``out_c = ||acc[:nt, c]||^2`` after :func:`sum_rows` (scratch left clean)."""
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


@njit(cache=True, no_cpython_wrapper=True, no_cfunc_wrapper=True)
def add_rows(indptr, indices, data, V, vf, U, uf, u_scale, use_u, rows, coef, M, slot, acc,
             touched, dn, norms):
    """``V[:, c] += sum_i coef_ic x_{rows_i}`` (and ``U``); the exact ``d||v_c||^2`` into ``dn``.

    ``norms``: instead ``dn_c = ||sum_i coef_ic x_{rows_i}||^2``, ``V`` untouched (Alg. 2's
    sums; one compiled function serves both, 0.3-0.4 s less to compile than two)."""
    nt = sum_rows(indptr, indices, data, rows, coef, M, slot, acc, touched, not norms)
    if norms:
        _sq_norms(M, slot, acc, touched, nt, dn)
        return
    for c in range(M):
        dn[c] = 0.0
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


@njit(cache=True, nogil=True)
def csr_matvec(indptr, indices, data, w, b, out, pref):
    """:func:`csr_matmat` for one flat column ``w``, as four partial sums per row."""
    n = indptr.size - 1
    for i in range(n):
        if pref and i + 1 < n:
            for p in range(indptr[i + 1], indptr[i + 2]):
                prefetch(w, indices[p])
        out[i] = row_dot(indptr, indices, data, w, i) + b


@njit(cache=True, nogil=True)
def csr_matmat(indptr, indices, data, W, wf, b, out, z, pref):
    """``out[i, c] = <x_i, w_c> + b_c`` in float64; ``wf``: ``W`` flat, ``z``: scratch of ``M``
    float64, ``pref``: prefetch the next row's lines of ``W`` (the caller makes ``wf`` and
    ``z``: 0.4 s less compile)."""
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
    """``out += X^T (alpha * y)`` for one output (flat arrays): :func:`dual_weights`' product."""
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
    """``out = X^T (alpha * Y) / lamn`` in float64 (``out`` zero on entry; pairs with ``alpha !=
    0`` only, in row order), then ``V = out`` and ``vsq_c = ||V[:, c]||^2`` as rounded;
    ``of``: ``out`` flat, ``nz`` (int64) and ``coef`` (float64): scratch of ``M``."""
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



@njit(cache=True, inline="always")
def _pairwise_block(a, lo, n):
    """NumPy's float64 sum of ``a[lo:lo + n]``, ``n <= 128``: 8 running sums (sequential
    below 8)."""
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = lo + 8
    stop = lo + n - n % 8
    while i < stop:
        r0 += a[i]
        r1 += a[i + 1]
        r2 += a[i + 2]
        r3 += a[i + 3]
        r4 += a[i + 4]
        r5 += a[i + 5]
        r6 += a[i + 6]
        r7 += a[i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < lo + n:
        res += a[i]
        i += 1
    return res


@njit(cache=True)
def pairwise_sum(a, n, span, part):
    """``a[:n].sum()`` as NumPy sums float64, bit for bit: blocks of at most 128 summed by
    :func:`_pairwise_block`, longer spans cut in halves (at a multiple of 8) and the halves'
    sums added; its recursion walked with a stack (numba's disk cache and a recursive
    function do not mix): ``span`` (int64 (3, 64): start, length, halves done) and ``part``
    (float64 (64,): the finished halves' sums), the caller's scratch."""
    if n <= 128:
        return _pairwise_block(a, 0, n)
    span[0, 0], span[1, 0], span[2, 0] = 0, n, 0
    top, nv = 1, 0
    while top > 0:
        k = top - 1
        lo, m = span[0, k], span[1, k]
        if m <= 128:
            part[nv] = _pairwise_block(a, lo, m)
            nv += 1
            top -= 1
            continue
        half = m // 2
        half -= half % 8
        if span[2, k] == 2:                     # both halves summed: left + right
            part[nv - 2] = part[nv - 2] + part[nv - 1]
            nv -= 1
            top -= 1
            continue
        span[0, top] = lo if span[2, k] == 0 else lo + half
        span[1, top] = half if span[2, k] == 0 else m - half
        span[2, top] = 0
        span[2, k] += 1
        top += 1
    return part[0]


@njit(cache=True, inline="always")
def _clip(x, lo, hi):
    """``np.clip(x, lo, hi)`` of floats (NaN kept)."""
    if x != x:
        return x
    m = x if x > lo else lo
    return m if m < hi else hi


@njit(cache=True, inline="always")
def _segment_slope(nlam, q1, q2, c0, c1, t, ca, ce, cse, K, squared):
    """``n f'(t)`` of :func:`gpusvm.solvers.sdca.segment_minimum` for one output."""
    cross = 0.0
    for k in range(K):
        u = ca[k] + t * ce[k]
        g = 0.0
        if u < 1.0:
            g = -2.0 * (1.0 - u) * cse[k] if squared else -cse[k]
        cross += g
    return nlam * (q1 + q2 * t) + c0 + c1 * t + cross


_DIGIT = np.uint64(2047)
_SIGN = np.uint64(1 << 63)
_ALL = np.uint64((1 << 64) - 1)
_NAN = np.uint64(0x7FF8000000000000)


@njit(cache=True)
def stable_order(tau, K, keyf, keyu, bits2, idx, idx2, count):
    """``np.argsort(tau[:K], kind="stable")`` (NumPy's lexsort of :func:`segment_point_one`'s
    crossings) into ``idx`` or ``idx2`` (the one returned): a radix sort, 11 bits at a time
    from the lowest, of keys ordered as NumPy orders floats (``-0.0`` ties with ``0.0``,
    every NaN last and tied); stable, 4x faster than numba's merge sort on 9,000 crossings,
    and quick to compile.  Scratch: ``keyf`` (float64) and ``keyu`` (its ``uint64`` view),
    ``bits2`` (uint64), ``idx``, ``idx2`` (int64) of at least ``K``, ``count`` (int64 (6,
    2049))."""
    for k in range(K):
        keyf[k] = tau[k] + 0.0                      # -0.0 ties with 0.0, as in a comparison
        b = _NAN if tau[k] != tau[k] else keyu[k]   # one NaN: NaNs keep their order
        keyu[k] = b ^ _ALL if b & _SIGN else b ^ _SIGN      # unsigned order = float order
        idx[k] = k
    for p in range(6):
        for v in range(2049):
            count[p, v] = 0
    for k in range(K):                              # every digit's histogram in one pass
        b = keyu[k]
        for p in range(6):
            count[p, np.int64((b >> np.uint64(11 * p)) & _DIGIT) + 1] += 1
    bits, bits_to, src, dst = keyu, bits2, idx, idx2
    for p in range(6):
        single = False
        for v in range(2049):
            single = single or count[p, v] == K
        if single:                                   # one value of this digit: order kept
            continue
        for v in range(2048):
            count[p, v + 1] += count[p, v]
        shift = np.uint64(11 * p)
        for k in range(K):                           # keys carried along: read in order
            b = bits[k]
            v = np.int64((b >> shift) & _DIGIT)
            at = count[p, v]
            bits_to[at] = b
            dst[at] = src[k]
            count[p, v] = at + 1
        bits, bits_to = bits_to, bits
        src, dst = dst, src
    return src


@njit(cache=True)
def segment_point_one(A0, A1, s, weighted, squared, nlam, lam, q1, q2, sq0, At, F, U, I, count,
                      span, part):
    """:func:`gpusvm.solvers.sdca.segment_point` of one output, its numbers bit for bit (the
    same operations in the same order, NumPy's sums by :func:`pairwise_sum`): ``(t, ||w_t||^2,
    P_s(w_t))``, the margins ``A_t`` into ``At``.  ``A0``, ``A1``: both ends' signed margins;
    ``s``: the row weights (read when ``weighted``).  Scratch (nothing is allocated: a quick
    compile): ``F`` float64 (12, n) and ``U`` its ``uint64`` view, ``I`` int64 (2, n),
    ``count``, ``span``, ``part`` of :func:`stable_order` and :func:`pairwise_sum`."""
    n = A0.size
    buf, buf2, ca, ce, cse = F[0], F[1], F[2], F[3], F[4]
    tau, da, db, pa, pb = F[5], F[6], F[7], F[8], F[9]
    K = 0
    for i in range(n):                      # the rows below 1 at both ends, the crossings
        a0 = A0[i]
        e = A1[i] - a0
        in0 = a0 < 1.0
        in1 = a0 + e < 1.0
        se = e * s[i] if weighted else e
        both = in0 and in1
        if squared:
            buf[i] = (1.0 - a0) * se if both else 0.0
            buf2[i] = se * e if both else 0.0
        else:
            buf[i] = se if both else 0.0
        if in0 != in1:
            ca[K] = a0
            ce[K] = e
            cse[K] = se
            K += 1
    if squared:
        c0 = -2.0 * pairwise_sum(buf, n, span, part)
        c1 = 2.0 * pairwise_sum(buf2, n, span, part)
    else:
        c0 = -pairwise_sum(buf, n, span, part)
        c1 = 0.0
    rise_a = 0.0
    rise_b = 0.0
    for k in range(K):
        a, e, se = ca[k], ce[k], cse[k]
        ga = -2.0 * (1.0 - a) * se if squared else -se
        gb = 2.0 * e * se if squared else 0.0
        if e > 0.0:
            rise_a += ga
            rise_b += gb
            da[k] = -ga
            db[k] = -gb
        else:
            rise_a += 0.0
            rise_b += 0.0
            da[k] = ga
            db[k] = gb
        tau[k] = (1.0 - a) / e
    base_a = nlam * q1 + c0 + rise_a
    base_b = nlam * q2 + c1 + rise_b
    order = stable_order(tau, K, F[10], U[10], U[11], I[0], I[1], count)  # as NumPy's lexsort
    first_end = tau[order[0]] if K > 0 else 1.0
    in_first = base_a + base_b * first_end >= 0.0
    t = 1.0
    if K > 0:
        # the pieces after each crossing, in order of t: pa + pb t on [tau_k, end_k]
        before = 0.0                        # the pieces whose end the slope does not reach 0 by
        cum_a = cum_b = 0.0
        for k in range(K):
            o = order[k]
            cum_a = da[o] if k == 0 else cum_a + da[o]
            cum_b = db[o] if k == 0 else cum_b + db[o]
            pa[k] = base_a + cum_a - 0.0
            pb[k] = base_b + cum_b - 0.0
            end = 1.0 if k == K - 1 else tau[order[k + 1]]
            if not pa[k] + pb[k] * end >= 0.0:
                before += 1.0
        j = min(int(before), K - 1)
        aj, bj, tj = pa[j], pb[j], tau[order[j]]
        root_j = tj if aj + bj * tj >= 0.0 else -aj / (bj if bj > 0.0 else 1.0)
        t = _clip(root_j, tj, 1.0) if int(before) < K else 1.0
    root_0 = -base_a / (base_b if base_b > 0.0 else 1.0)
    if in_first:
        t = _clip(root_0, 0.0, first_end)
    if _segment_slope(nlam, q1, q2, c0, c1, 0.0, ca, ce, cse, K, squared) >= 0.0:
        t = 0.0
    if _segment_slope(nlam, q1, q2, c0, c1, 1.0, ca, ce, cse, K, squared) <= 0.0:
        t = 1.0
    for i in range(n):                      # P_s(w_t) from the margins A_0 + t E
        a0 = A0[i]
        at = a0 + t * (A1[i] - a0)
        At[i] = at
        v = 1.0 - at
        sl = 0.0 if 0.0 >= v else v
        if squared:
            sl = sl * sl
        if weighted:
            sl = sl * s[i]
        buf[i] = sl
    sqt = sq0 + t * (2.0 * q1 + t * q2)
    return t, sqt, 0.5 * lam * sqt + pairwise_sum(buf, n, span, part) / n
