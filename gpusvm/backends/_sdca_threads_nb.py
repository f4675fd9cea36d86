"""One-row SDCA on ``k`` threads of one process: each thread its row block and its own copy of
``v``, the copies combined at compiled barriers (no GIL held, no Python between rounds).

Thread ``t`` runs the one-row step of :func:`gpusvm.backends._loops_nb.sdca_loop` (Takáč et
al. 2013, eq. 15, ``b = 1``; the squared hinge's closed form, weights, LIBLINEAR's shrinking)
on the rows of its block (``rows[lo:lo + nb]``, a run of the host's permutation of the rows),
in an order shuffled every epoch (:func:`block_epoch`), against ``W[t]``, its own
copy of ``v``.  After every round (``cum[r] .. cum[r + 1]`` of its rows) the threads meet at
a barrier and combine their changes since the last combination: the ``H`` columns of ``hot``
(those most rows share, where the blocks' steps interact) after every round, every column
after every ``full_every``-th round and the last.  A combination sets, on every thread,

    v_j = (base_j + D_0j) + D_1j + ... + D_(k-1)j,   D_tj = W[t, j] - base_j   (float64)

with the sum in thread order, so every copy holds the same value and a fit is the same bit
for bit whatever the scheduler does: the rows, the rounds and the order of every sum are
functions of the data, the seed and ``k``.  Between combinations a thread's steps see the
others' changes to a column up to a round late (CoCoA+ with ``gamma = 1`` and
``sigma' = beta``; Ma et al. 2015): ``beta`` above 1 shortens every step.

The barrier is a counter and a generation in ``bar`` (int64, the two 64 bytes apart), read
and written with atomic acquire/release instructions; a waiting thread spins, then yields its
core (``sched_yield``) so that more threads than free cores still progress.

Memory traffic per round and thread: its rows' nonzeros twice (margin and step, as one thread
reads them), ``alpha``/``||x_i||^2`` once per row; a hot combination reads and writes
``3 H`` values, a full one ``3 d``.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from . import _compile_nb  # noqa: F401  (the collector paused, the cache stamped)
from ._csr_nb import prefetch, prefetch_row, row_dot
from ._loops_nb import _coord, _shrink_epoch, _shrink_test

#: spins of a waiting thread before it yields its core at each further check
SPINS = 2000


def _item_pointer(context, builder, aryty, arr, idx):
    ary = context.make_array(aryty)(context, builder, arr)
    return cgutils.get_item_pointer(context, builder, aryty, ary, [idx], wraparound=False)


@intrinsic
def load_acquire(typingctx, arr, idx):
    """``arr[idx]`` read with an atomic acquire load (int64 arrays)."""
    sig = arr.dtype(arr, idx)

    def codegen(context, builder, signature, args):
        ptr = _item_pointer(context, builder, signature.args[0], args[0], args[1])
        return builder.load_atomic(ptr, "acquire", 8)

    return sig, codegen


@intrinsic
def store_release(typingctx, arr, idx, val):
    """``arr[idx] = val`` written with an atomic release store (int64 arrays)."""
    sig = types.void(arr, idx, val)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ptr = _item_pointer(context, builder, aryty, args[0], args[1])
        v = context.cast(builder, args[2], signature.args[2], aryty.dtype)
        builder.store_atomic(v, ptr, "release", 8)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def fetch_add(typingctx, arr, idx, val):
    """``arr[idx] += val`` atomically (acq_rel); returns the value before (int64 arrays)."""
    sig = arr.dtype(arr, idx, val)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ptr = _item_pointer(context, builder, aryty, args[0], args[1])
        v = context.cast(builder, args[2], signature.args[2], aryty.dtype)
        return builder.atomic_rmw("add", ptr, v, "acq_rel")

    return sig, codegen


@intrinsic
def yield_core(typingctx):
    """``sched_yield()`` (POSIX): the waiting thread gives its core to another."""
    sig = types.void()

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.IntType(32), [])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "sched_yield")
        builder.call(fn, [])
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, inline="always")
def barrier(bar, k):
    """Wait until ``k`` threads have called it (``bar[0]`` the count, ``bar[8]`` the generation)."""
    gen = load_acquire(bar, 8)
    if fetch_add(bar, 0, 1) == k - 1:
        store_release(bar, 0, 0)
        store_release(bar, 8, gen + 1)
        return
    spins = 0
    while load_acquire(bar, 8) == gen:
        spins += 1
        if spins > SPINS:
            yield_core()


@njit(cache=True, inline="always")
def _is_hot(bits, j):
    """Bit ``j`` of the bitset ``bits`` (uint8): 1 for a hot column."""
    return (bits[j >> 3] >> (j & 7)) & 1 == 1


@njit(cache=True, inline="always")
def _combine(tid, k, W, base, D, inv_c, inv_h, bits, par, cols, ncols, every, bar):
    """Every thread's change of the columns ``cols[:ncols]`` (all ``d`` when ``every``), its
    copy's divided by the column's ``sigma'`` (``1 / inv_h`` for the hot columns, flagged in
    ``bits``, ``1 / inv_c`` for the others), added to the last combined ``base`` in thread
    order, on every thread (one barrier)."""
    w = W[tid]
    bs = base[tid]
    dt = D[tid, par]
    for q in range(ncols):
        j = q if every else cols[q]
        inv = inv_h if not every or _is_hot(bits, j) else inv_c
        dt[q] = (np.float64(w[j]) - np.float64(bs[j])) * inv
    barrier(bar, k)
    for q in range(ncols):
        j = q if every else cols[q]
        s = np.float64(bs[j])
        for u in range(k):
            s += D[u, par, q]
        w[j] = s
        bs[j] = w[j]


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


@njit(cache=True, inline="always")
def _splitmix(z):
    """SplitMix64's output function (Steele et al. 2014)."""
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


@njit(cache=True)
def block_epoch(perm, nb, key, e):
    """``perm[:nb]``: epoch ``e``'s order of a block's ``nb`` rows, a Fisher-Yates shuffle
    driven by SplitMix64 from ``key`` and ``e`` (a function of them only)."""
    state = _splitmix(np.uint64(key) ^ (np.uint64(e) * _GOLDEN))
    for i in range(nb):
        perm[i] = i
    for i in range(nb - 1, 0, -1):
        state += _GOLDEN
        z = _splitmix(state)
        j = ((z >> np.uint64(32)) * np.uint64(i + 1)) >> np.uint64(32)
        t = perm[i]
        perm[i] = perm[j]
        perm[j] = t


@njit(cache=True, nogil=True)
def sdca_block(tid, k, indptr, indices, data, yf, sw, af, inv_q, row_sq, rows, perm, key, cum, W,
               base, D, hot, bits, hot_sq, full_every, bar, fprm, active, shr, weighted,
               squared, shrinking):
    """Thread ``tid``'s rounds (module docstring): ``cum[r + 1] - cum[r]`` steps in round
    ``r``, ``len(cum) - 1`` rounds, through the block's epochs (:func:`block_epoch` of ``key``
    into ``perm``), step ``q`` of an epoch on row ``rows[lo + perm[q]]``.  ``fprm``:
    ``(lam n, a, b, sigma', block rows, the block's steps so far, its first position ``lo``
    in ``rows``, the hot columns' sigma')``, ``v``'s scale ``a`` and bias ``b`` fixed;
    ``bits`` flags the hot columns, ``hot_sq[i]`` is row ``i``'s sum of their ``x_ij^2``;
    ``shr`` this block's four shrinking bounds;
    ``sw`` the flat weights when ``weighted``.  Returns the block's change of ``sum alpha``."""
    lamn, a, b, sigma, nb = fprm[0], fprm[1], fprm[2], fprm[3], int(fprm[4])
    sig_h = fprm[7]                      # the hot columns' sigma' (>= sigma, the others')
    split = sig_h != sigma
    beta = sigma                         # eq. (15) with beta = sigma': CoCoA+'s subproblem
    p0, lo = int(fprm[5]), int(fprm[6])
    cfac = lamn / beta
    g = 1.0 / (lamn * a)
    w = W[tid]
    nr = cum.size - 1
    asumd = 0.0
    e = p0 // nb
    q = p0 - e * nb
    block_epoch(perm, nb, key, e)
    for rnd in range(nr):
        for _ in range(cum[rnd + 1] - cum[rnd]):
            if q + 4 < nb:                              # the row ahead, with its duals
                ra = rows[lo + perm[q + 4]]
                prefetch_row(indptr, indices, data, ra)
                prefetch(af, ra)
                prefetch(yf, ra)
                prefetch(inv_q, ra)
                if squared:
                    prefetch(row_sq, ra)
            r = rows[lo + perm[q]]
            step = not shrinking or active[r]
            if step:
                yr = np.float64(yf[r])
                mr = yr * (a * row_dot(indptr, indices, data, w, r) + b)     # y_r <w, x_r>
                if shrinking and _shrink_test(af, active, shr, r, mr):
                    step = False
            if step:
                si = sw[r] if weighted else 1.0
                if split and row_sq[r] > 0.0:       # eq. (15)'s beta: sum_j sigma_j x_j^2 over
                    br = sigma + (sig_h - sigma) * hot_sq[r] / row_sq[r]      # ||x||^2
                    dl = _coord(mr, af[r], si, row_sq, inv_q, r, br, lamn / br, lamn, squared)
                else:
                    dl = _coord(mr, af[r], si, row_sq, inv_q, r, beta, cfac, lamn, squared)
                if dl != 0.0:
                    ci = dl * yr * g                      # v_j += sigma_j ci x_rj (CoCoA+'s
                    cs = ci * sigma                       # local model)
                    if split:
                        ch = ci * sig_h
                        for p in range(indptr[r], indptr[r + 1]):
                            j = indices[p]
                            w[j] += data[p] * (ch if _is_hot(bits, j) else cs)
                    else:
                        for p in range(indptr[r], indptr[r + 1]):
                            j = indices[p]
                            w[j] += data[p] * cs
                    af[r] += dl
                    asumd += dl
            q += 1
            if q == nb:                                   # the block's epoch ends
                if shrinking:
                    _shrink_epoch(active, shr)
                q = 0
                e += 1
                block_epoch(perm, nb, key, e)
        every = (rnd + 1) % full_every == 0 or rnd == nr - 1
        _combine(tid, k, W, base, D, 1.0 / sigma, 1.0 / sig_h, bits, rnd & 1, hot, W.shape[1] if every else hot.size,
                 every, bar)
    return asumd


@njit(cache=True, nogil=True)
def column_counts(indices, d):
    """The nonzeros of each of the ``d`` columns (int64), one pass over ``indices`` (NumPy's
    ``bincount`` converts them to ``intp`` first: 25x slower on 1.9 x 10^7 int32)."""
    out = np.zeros(d, dtype=np.int64)
    for p in range(indices.size):
        out[indices[p]] += 1
    return out


@njit(cache=True, nogil=True)
def hot_row_sq(indptr, indices, data, bits, out):
    """``out[i] = sum_j x_ij^2`` over the hot columns ``j`` (flagged in ``bits``), float64."""
    for i in range(indptr.size - 1):
        acc = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            if _is_hot(bits, indices[p]):
                x = np.float64(data[p])
                acc += x * x
        out[i] = acc
