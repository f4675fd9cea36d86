"""Compiled CPU backend: the NumPy reference primitives as numba loops, plus segment loops.

:class:`NumbaBackend` subclasses :class:`~gpusvm.backends.numpy_.NumpyBackend`
and replaces its hot primitives with ``@njit(cache=True)`` loops that follow the
reference line by line (same formulas, same order of the floating-point
operations wherever it matters for the iterates).  It adds two segment
primitives that run every iteration between two evaluations in one compiled
call:

``pegasos_segment(sampler, t0, t1, plan)``
    Iterations ``t0 + 1 .. t1`` of :func:`gpusvm.solvers.pegasos.pegasos`: the
    batch drawn from the counter (:mod:`gpusvm.backends._counter_nb`), margins,
    optimal bias, step size, reset, step, projection, averaging and
    renormalisation, exactly as the reference segment calls the primitives.
``sdca_segment(sampler, t0, t1, plan)``
    The same for :func:`gpusvm.solvers.sdca.sdca`: batch and first-occurrence
    mask, margins, deltas, Alg. 2's adaptation of beta, and the (checked) step.

No Python runs inside a segment: the batches are drawn two iterations ahead
(into a small ring) by the compiled sampler, so that their rows can be
prefetched.

The per-primitive methods call the same compiled pieces as the segment loops
(batches of one row of a canonical CSR take a specialised loop that performs
the same operations in the same order with scalars instead of one-element
arrays), so the two paths give bitwise the same iterates; a test checks it.
Against the NumPy backend they agree to rounding: sums are accumulated in
another order (``np.dot``/``np.sum``/``np.bincount`` against running sums, and
four interleaved partial sums for a row's dot product).  Nothing else differs:
the iterates are those of the algorithms.

Why compiled loops: an iteration of the NumPy backend pays 80-160 us of
interpreter and temporary-array overhead whatever the batch size, while one
row of a text data set holds ~100-400 nonzeros (well under a microsecond of
work).  At the batch sizes that are fastest on a CPU (``b = 1`` for SDCA, see
the solvers' Notes) only compiled loops can compete with LIBLINEAR.  The
loops are memory-bound; they prefetch the rows of the batches two iterations
ahead (a shuffled epoch visits cold rows) and, when ``v`` exceeds the L2
cache, the entries of ``v`` the next batch will read (BENCHMARKS.md).

Row gathers and scatters go straight through ``indptr``/``indices``/``data``
of the CSR matrix; nothing of ``X`` is copied (the row norms, the
certificate's ``X^T (alpha y)`` and the evaluation's ``X w`` are loops too, so
a float32 ``X`` is never upcast to a float64 copy as SciPy's mixed-type
products would do).  A batch of several rows aggregates its additions per
column in a float64 scratch vector (``acc``, with the list of touched columns)
exactly like the reference's ``np.unique`` + ``np.bincount``, so ``v`` is
written once per column per step.

What a first fit compiles: numba compiles a loop, with everything it calls,
for the argument types of its first call, and caches the machine code on disk
(``__pycache__`` beside the module, or ``NUMBA_CACHE_DIR``).  So that a cold
first fit compiles only what it runs, the backend calls the loop for the
case at hand (one row per batch, or a batch; rows from the epoch's order, or
drawn by the sampler; with or without the batch-optimal bias), each a
specialisation of one source (a factory whose flags are closure constants:
numba prunes the branches they rule out before typing).  The small helpers
of the loops stay ``inline="always"``: without it numba compiles each once
(half the compilation), but LLVM then leaves the per-row helpers as calls,
with reference counting around each.  :class:`CompilationNotice` says when a
loop is about to be compiled rather than loaded, and what that costs
(BENCHMARKS.md, "One-off compilation", measured by
``benchmarks/bench_compile.py``).

numba is a dependency of every install (``backend="auto"`` picks this backend
when no GPU is present); where it cannot be imported, building this backend
raises an ImportError that says what to install.
"""

from __future__ import annotations

import functools
import math
import warnings
from pathlib import Path

import numpy as np

from . import numba_available
from ._state import (N_SLOTS, S_A, S_ASUM, S_ASUMD, S_B, S_BETA, S_BSUM, S_DNORM, S_LOSS, S_NACT,
                     S_NAVG, S_NREJ, S_TMP0, S_VSQ, S_YACT)
from .base import Evaluation
from .numpy_ import NumpyBackend

try:
    import numba
    from numba import njit
except ImportError:  # pragma: no cover - exercised through a monkeypatched import in the tests
    numba = None

NUMBA_MISSING = ("backend='numba' needs numba, which cannot be imported; install it with "
                 "`pip install \"numba>=0.59\"` (a dependency of gpusvm), or use backend='numpy'")

#: step-size schedules as the int codes the compiled loop takes (order of pegasos.SCHEDULES)
SCHEDULE_CODES = {"pegasos": 0, "norma": 1, "constant": 2}

_EPS64 = float(np.finfo(np.float64).eps)
# shrinking's constants, spelled out (numba caches by file; a test checks they are
# gpusvm.backends.numpy_.SHRINK_EPS and UPPER_SLACK)
_SHRINK_EPS = 0.1
_UPPER_SLACK = 4 * _EPS64

#: batches ahead whose rows are prefetched (rows of a shuffled epoch are cold in the cache)
PREFETCH_DISTANCE = 2
ORDER_PREFETCH = 4

if numba is not None:
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    from ._counter_nb import batch as _nb_batch
    from ._counter_nb import epoch_advance as _nb_epoch_advance
    from ._counter_nb import epoch_order as _nb_epoch_order
    from ._counter_nb import epoch_position as _nb_epoch_position
    from ._counter_nb import sampler_state

    @intrinsic
    def _prefetch(typingctx, arr, idx):
        """``llvm.prefetch`` (read, high locality) of ``&arr[idx]``: a hint, no effect on values."""
        sig = types.void(arr, idx)

        def codegen(context, builder, signature, args):
            aryty = signature.args[0]
            ary = context.make_array(aryty)(context, builder, args[0])
            ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]],
                                           wraparound=False)
            i8p = ir.IntType(8).as_pointer()
            i32 = ir.IntType(32)
            fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
            fn = builder.module.declare_intrinsic("llvm.prefetch", [i8p], fnty)   # name mangled
            # for the LLVM at hand (p0i8 with typed pointers, p0 with opaque ones)
            builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])
            return context.get_dummy_value()

        return sig, codegen

    @njit(cache=True, inline="always")
    def _prefetch_row(indptr, indices, data, r):
        """Ask for the cache lines of row ``r`` of ``X`` (8 values / 16 indices per 64-byte line)."""
        lo = indptr[r]
        hi = indptr[r + 1]
        for p in range(lo, hi, 8):
            _prefetch(data, p)
        for p in range(lo, hi, 16):
            _prefetch(indices, p)

    @njit(cache=True, inline="always")
    def _draw_ahead(indptr, indices, data, v, smp, bt, ring, ringf, ringh, rk, ecache, stamp,
                    prefetch_v):
        """Before the iteration on batch ``bt``: draw batch ``bt + PREFETCH_DISTANCE`` into the
        ring, ask for the cache lines of its rows and, when ``prefetch_v``, for the entries of
        ``v`` that batch ``bt + PREFETCH_DISTANCE - 1`` will touch.

        ``smp = (code, n, k, seed, half, mask)`` of the counter-based sampler.  Rows of a
        shuffled epoch are cold, and so is a ``v`` larger than the L2 cache: without these
        hints an iteration waits on one memory access after another (3-4x slower on news20).
        """
        nxt = bt + PREFETCH_DISTANCE
        sl = nxt % (PREFETCH_DISTANCE + 1)
        ringh[sl] = _nb_batch(smp[0], smp[1], smp[2], smp[3], smp[4], smp[5], nxt, ring[sl],
                              ringf[sl], rk, ecache, stamp)
        rows = ring[sl]
        for i in range(rows.size):
            _prefetch_row(indptr, indices, data, rows[i])
        if prefetch_v:
            rows = ring[(nxt - 1) % (PREFETCH_DISTANCE + 1)]
            for i in range(rows.size):
                r = rows[i]
                for p in range(indptr[r], indptr[r + 1]):
                    _prefetch(v, indices[p])

    @njit(cache=True)
    def _fill_ring(smp, bt0, ring, ringf, ringh, rk, ecache, stamp):
        """Draw the batches ``bt0 .. bt0 + PREFETCH_DISTANCE - 1`` into the ring."""
        for bt in range(bt0, bt0 + PREFETCH_DISTANCE):
            sl = bt % (PREFETCH_DISTANCE + 1)
            ringh[sl] = _nb_batch(smp[0], smp[1], smp[2], smp[3], smp[4], smp[5], bt, ring[sl],
                                  ringf[sl], rk, ecache, stamp)

    @njit(cache=True, inline="always")
    def _order_ahead(indptr, indices, data, v, order, q, n, prefetch_v):
        """:func:`_draw_ahead` for a whole epoch drawn at once (one row per batch): before the
        iteration on position ``q`` of the epoch, ask for the cache lines of the row
        ``PREFETCH_DISTANCE`` positions ahead and, when ``prefetch_v``, for the entries of
        ``v`` the next row will touch (within the epoch: its last rows go unprefetched)."""
        qa = q + ORDER_PREFETCH
        if qa < n:
            _prefetch_row(indptr, indices, data, order[qa])
        if prefetch_v and q + 1 < n:
            r = order[q + 1]
            for p in range(indptr[r], indptr[r + 1]):
                _prefetch(v, indices[p])

    # ------------------------------------------------------------------ data, evaluation
    @njit(cache=True)
    def _row_sq_norms(indptr, data, out):
        """``out_i = ||x_i||^2`` in float64, without a copy of ``X``."""
        for i in range(indptr.size - 1):
            acc = 0.0
            for p in range(indptr[i], indptr[i + 1]):
                x = np.float64(data[p])
                acc += x * x
            out[i] = acc

    @njit(cache=True, inline="always")
    def _row_dot(indptr, indices, data, x, r):
        """``<x_r, x>`` as four interleaved float64 partial sums.

        The products are formed in the operands' own type (float32 x float32
        stays float32, as in the reference's ``vals * v[cols]``); four sums
        instead of one running sum break the chain of dependent additions
        (~20% faster on imdb), a reassociation that changes the result only at
        the rounding level.
        """
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

    @njit(cache=True)
    def _prefetch_columns(indptr, indices, x, i):
        """Prefetch ``x[indices of row i]`` (row ``i`` must exist)."""
        for p in range(indptr[i], indptr[i + 1]):
            _prefetch(x, indices[p])

    @njit(cache=True)
    def _csr_matvec(indptr, indices, data, w, b, out, prefetch_w):
        """``out_i = <x_i, w> + b`` in float64 (``w`` is float64, so are the products)."""
        n = indptr.size - 1
        for i in range(n):
            if prefetch_w and i + 1 < n:
                _prefetch_columns(indptr, indices, w, i + 1)
            out[i] = _row_dot(indptr, indices, data, w, i) + b

    @njit(cache=True)
    def _csr_rmatvec(indptr, indices, data, alpha, y64, out, prefetch_out):
        """``out += X^T (alpha y)`` (float64; SciPy's ``csc_matvec`` order on ``X.T``)."""
        n = indptr.size - 1
        for i in range(n):
            if prefetch_out and i + 1 < n and alpha[i + 1] != 0.0:
                _prefetch_columns(indptr, indices, out, i + 1)
            c = alpha[i] * y64[i]
            if c == 0.0:                  # alpha_i = 0 (every non-support vector): adds nothing
                continue
            for p in range(indptr[i], indptr[i + 1]):
                out[indices[p]] += np.float64(data[p]) * c

    @njit(cache=True)
    def _scale_copy_sq(w, div, v):
        """``w /= div``, ``v[:] = w`` (in ``v``'s dtype) and return ``||v||^2`` (float64)."""
        acc = 0.0
        for c in range(w.size):
            x = w[c] / div
            w[c] = x
            v[c] = x
            vc = np.float64(v[c])
            acc += vc * vc
        return acc

    @njit(cache=True)
    def _dot_f(a, b):
        """``<a, b>`` as a float64 running sum."""
        acc = 0.0
        for c in range(a.size):
            acc += np.float64(a[c]) * np.float64(b[c])
        return acc

    @njit(cache=True)
    def _hinge_sum(y, z):
        """``sum_i max(0, 1 - y_i z_i)`` as a float64 running sum."""
        acc = 0.0
        for i in range(z.size):
            acc += max(0.0, 1.0 - np.float64(y[i]) * z[i])
        return acc

    # ------------------------------------------------------------------ shared pieces
    @njit(cache=True, inline="always")
    def _margins(indptr, indices, data, y, v, a, b, rows, m):
        """``m_i = y_i (a <v, x_i> + b)``; products in the data's dtype, sums in float64.

        ``a * z + b`` and the product by ``y_i`` in the reference's order; ``z``
        from :func:`_row_dot`.
        """
        for i in range(rows.size):
            r = rows[i]
            m[i] = np.float64(y[r]) * (a * _row_dot(indptr, indices, data, v, r) + b)

    @njit(cache=True, inline="always")
    def _add_row(indptr, indices, data, v, u, u_scale, use_u, r, ci):
        """``v += ci x_r`` for one row of a canonical CSR (distinct columns), in place.

        Returns the exact change of ``||v||^2``, summed per column as
        ``(new - old) (new + old)`` (the reference's per-column form, whose
        rounding is relative to the change, not to ``||v||^2``).  Zero contributions
        are skipped, as the reference drops them.
        """
        dn = 0.0
        if ci == 0.0:
            return dn
        for p in range(indptr[r], indptr[r + 1]):
            x = data[p] * ci
            if x == 0.0:
                continue
            c = indices[p]
            old = np.float64(v[c])
            v[c] = old + x
            new = np.float64(v[c])
            if use_u:
                u[c] += u_scale * x
            dn += (new - old) * (new + old)
        return dn

    @njit(cache=True, inline="always")
    def _add_rows(indptr, indices, data, v, u, u_scale, use_u, rows, coef, single,
                  acc, mark, touched):
        """``v += sum_i coef_i x_{rows_i}`` (``u += u_scale *`` the same); exact ``d||v||^2``.

        ``single``: one row of a canonical CSR is added by :func:`_add_row`.
        Otherwise the contributions are summed per column in the float64
        scratch ``acc`` (first-touch order is row order, the order of
        ``np.bincount``) and ``v`` is written once per column.  Zero
        contributions are skipped, as the reference drops them.
        """
        if single:
            return _add_row(indptr, indices, data, v, u, u_scale, use_u, rows[0], coef[0])
        dn = 0.0
        nt = 0
        for i in range(rows.size):
            ci = coef[i]
            if ci == 0.0:
                continue
            r = rows[i]
            for p in range(indptr[r], indptr[r + 1]):
                x = data[p] * ci
                if x == 0.0:
                    continue
                c = indices[p]
                if mark[c]:
                    acc[c] += x
                else:
                    mark[c] = True
                    acc[c] = x
                    touched[nt] = c
                    nt += 1
        for q in range(nt):
            c = touched[q]
            g = acc[c]
            old = np.float64(v[c])
            v[c] = old + g
            new = np.float64(v[c])
            if use_u:
                u[c] += u_scale * g
            dn += (new - old) * (new + old)
            acc[c] = 0.0
            mark[c] = False
        return dn

    @njit(cache=True, inline="always")
    def _sum_sq_norm(indptr, indices, data, rows, coef, acc, mark, touched):
        """``||sum_i coef_i x_{rows_i}||^2`` (``v`` untouched; scratch left clean)."""
        nt = 0
        for i in range(rows.size):
            ci = coef[i]
            r = rows[i]
            for p in range(indptr[r], indptr[r + 1]):
                x = data[p] * ci
                c = indices[p]
                if mark[c]:
                    acc[c] += x
                else:
                    mark[c] = True
                    acc[c] = x
                    touched[nt] = c
                    nt += 1
        out = 0.0
        for q in range(nt):
            c = touched[q]
            out += acc[c] * acc[c]
            acc[c] = 0.0
            mark[c] = False
        return out

    # ------------------------------------------------------------------ Pegasos
    @njit(cache=True, inline="always")
    def _optimal_bias(y, rows, m, s):
        """Batch-optimal bias (``optimal_bias_xp``) and the shifted margins, in place."""
        k = rows.size
        y_b = np.empty(k, dtype=np.float64)
        sc = np.empty(k, dtype=np.float64)
        bp = np.empty(k, dtype=np.float64)
        for i in range(k):
            y_b[i] = y[rows[i]]
            sc[i] = y_b[i] * m[i] - s[S_B]
            bp[i] = y_b[i] - sc[i]
        order = np.argsort(bp, kind="mergesort")
        n_pos = 0
        for i in range(k):
            if y_b[i] > 0:
                n_pos += 1
        neg_le = 0
        pos_le = 0
        b = bp[order[0]]                          # argmax of an all-False mask is 0
        for jj in range(k):
            yo = y_b[order[jj]]
            if yo < 0:
                neg_le += 1
            if yo > 0:
                pos_le += 1
            if neg_le - (n_pos - pos_le) >= 0:
                b = bp[order[jj]]
                break
        for i in range(k):
            m[i] = 1.0 + y_b[i] * (b - (y_b[i] - sc[i]))
        s[S_B] = b

    @njit(cache=True, inline="always")
    def _step_size(schedule, t, lam, eta0, norma_p):
        """``(eta_t, 1 - eta_t lam)`` exactly as :func:`gpusvm.solvers.pegasos.step_size`."""
        if schedule == 0:
            return 1.0 / (lam * t), 1.0 - 1.0 / t
        if schedule == 1:
            return norma_p / (lam * math.sqrt(t)), 1.0 - norma_p / math.sqrt(t)
        return eta0, 1.0 - eta0 * lam

    @njit(cache=True, inline="always")
    def _reset_scale(v, u, use_u, s):
        """``w = 0``: ``u -= A v`` (the running sum stays), ``v = 0``, ``a = 1``."""
        if use_u:
            asum = s[S_ASUM]
            for c in range(v.size):
                u[c] -= asum * v[c]
        v[:] = 0
        s[S_VSQ] = 0.0
        s[S_A] = 1.0

    @njit(cache=True, inline="always")
    def _pegasos_step(indptr, indices, data, y, v, u, use_u, s, rows, m, coef, eta, shrink, k,
                      unreg_bias, radius, average, single, acc, mark, touched):
        """Steps 4-5 of Fig. 1 (``NumpyBackend.pegasos_step``)."""
        nact = 0
        loss = 0.0
        a = s[S_A] * shrink
        g = eta / (k * a)
        yact = 0.0
        for i in range(rows.size):
            yi = np.float64(y[rows[i]])
            loss += max(0.0, 1.0 - m[i])
            if m[i] < 1.0:
                nact += 1
                coef[i] = yi * g
                yact += yi
            else:
                coef[i] = 0.0
        s[S_NACT] = nact
        s[S_LOSS] = loss
        dn = _add_rows(indptr, indices, data, v, u, s[S_ASUM], use_u, rows, coef, single,
                       acc, mark, touched)
        s[S_DNORM] = dn
        s[S_VSQ] += dn
        s[S_A] = a
        if unreg_bias:
            s[S_YACT] = yact
            s[S_B] += eta * s[S_YACT] / k
        if radius > 0.0:
            wsq = a * a * s[S_VSQ]
            if wsq > radius * radius:
                s[S_A] = a * (radius / np.sqrt(wsq))
        if average:
            s[S_ASUM] += s[S_A]
            s[S_NAVG] += 1.0
            s[S_BSUM] += s[S_B]

    @njit(cache=True, inline="always")
    def _renormalize(v, u, use_u, s, threshold):
        """Fold ``a`` into ``v`` when ``|a| < threshold``; the running sum moves into ``u``
        (``u -= A v``, ``A = 0``), as ``NumpyBackend.renormalize``."""
        a = s[S_A]
        if abs(a) < threshold:
            if use_u:
                asum = s[S_ASUM]
                for c in range(v.size):
                    u[c] -= asum * np.float64(v[c])
            tmp = np.empty(1, dtype=v.dtype)                  # a rounded to v's dtype first,
            tmp[0] = a                                        # as the reference's dtype.type(a)
            af = tmp[0]
            for c in range(v.size):
                v[c] *= af
            s[S_VSQ] *= a * a
            s[S_ASUM] = 0.0
            s[S_A] = 1.0

    def _make_pegasos_loop_single(by_epoch):
        """:func:`_pegasos_loop_single` compiled for rows read from the epoch's order
        (``by_epoch``) or drawn by the sampler: each fit compiles only the branch it runs."""

        @njit(cache=True)
        def _pegasos_loop_single(indptr, indices, data, y, v, u, use_u, s, smp, ring, ringf, ringh,
                                 rk, ecache, stamp, order, table, t0, t1, lam, k, schedule, eta0,
                                 norma_p,
                                 unreg_bias, radius, averaged, t_avg, renorm, prefetch_v):
            """:func:`_pegasos_loop` for batches of one row of a canonical CSR (no optimal bias).

            The operations of :func:`_margins`, :func:`_pegasos_step` and
            :func:`_renormalize` with ``rows.size == 1``, in the same order (so
            bitwise the same iterates), with scalars instead of one-element arrays, and
            the scalars of ``s`` held in locals for the whole segment (written back
            around the rare calls that read them, and at the end).
            """
            sa = s[S_A]
            sb = s[S_B]
            vsq = s[S_VSQ]
            asum = s[S_ASUM]
            navg = s[S_NAVG]
            bsum = s[S_BSUM]
            nact = s[S_NACT]
            loss = s[S_LOSS]
            dnorm = s[S_DNORM]
            yact = s[S_YACT]
            n = indptr.size - 1
            e, q = 0, 0
            if by_epoch:                                  # epoch and position of batch t0 (k = 1)
                e, q = _nb_epoch_position(t0, n, smp, rk, ecache, table, order)
            else:
                _fill_ring(smp, t0, ring, ringf, ringh, rk, ecache, stamp)
            for t in range(t0 + 1, t1 + 1):
                if by_epoch:
                    _order_ahead(indptr, indices, data, v, order, q, n, prefetch_v)
                    if q + ORDER_PREFETCH < n:
                        _prefetch(y, order[q + ORDER_PREFETCH])
                    r = order[q]                                                  # A_t = {r}
                    e, q = _nb_epoch_advance(e, q, n, smp, rk, ecache, table, order)
                else:
                    _draw_ahead(indptr, indices, data, v, smp, t - 1, ring, ringf, ringh, rk, ecache,
                                stamp, prefetch_v)
                    r = ring[(t - 1) % (PREFETCH_DISTANCE + 1), 0]                # A_t = {r}
                yi = np.float64(y[r])
                m = yi * (sa * _row_dot(indptr, indices, data, v, r) + sb)       # step 2
                eta, shrink = _step_size(schedule, t, lam, eta0, norma_p)         # step 3
                if shrink == 0.0:
                    s[S_ASUM] = asum
                    _reset_scale(v, u, use_u, s)
                    sa = s[S_A]
                    vsq = s[S_VSQ]
                    shrink = 1.0
                a = sa * shrink                                                   # step 4
                active = m < 1.0
                nact = 1.0 if active else 0.0
                loss = 0.0 + max(0.0, 1.0 - m)
                ci = yi * (eta / (k * a)) if active else 0.0
                dn = _add_row(indptr, indices, data, v, u, asum, use_u, r, ci)
                dnorm = dn
                vsq += dn
                sa = a
                if unreg_bias:
                    yact = (0.0 + yi) if active else 0.0
                    sb += eta * yact / k
                if radius > 0.0:                                                  # step 5
                    wsq = a * a * vsq
                    if wsq > radius * radius:
                        sa = a * (radius / np.sqrt(wsq))
                if averaged and t >= t_avg:
                    asum += sa
                    navg += 1.0
                    bsum += sb
                if abs(sa) < renorm:                                              # _renormalize
                    s[S_A] = sa
                    s[S_VSQ] = vsq
                    s[S_ASUM] = asum
                    _renormalize(v, u, use_u, s, renorm)
                    sa = s[S_A]
                    vsq = s[S_VSQ]
                    asum = s[S_ASUM]
            s[S_A] = sa
            s[S_B] = sb
            s[S_VSQ] = vsq
            s[S_ASUM] = asum
            s[S_NAVG] = navg
            s[S_BSUM] = bsum
            s[S_NACT] = nact
            s[S_LOSS] = loss
            s[S_DNORM] = dnorm
            s[S_YACT] = yact


        return _pegasos_loop_single

    #: the one-row Pegasos loop by ``by_epoch`` (``"epoch"`` sampling)
    _PEGASOS_LOOP_SINGLE = {by: _make_pegasos_loop_single(by) for by in (False, True)}

    def _make_pegasos_loop(optimal):
        """:func:`_pegasos_loop` compiled with or without the batch-optimal bias (``optimal``):
        a fit without it compiles no sort."""

        @njit(cache=True)
        def _pegasos_loop(indptr, indices, data, y, v, u, use_u, s, smp, ring, ringf, ringh, rk,
                          ecache, stamp, order, table, t0, t1, lam, k, schedule, eta0, norma_p,
                          unreg_bias, radius, averaged, t_avg, renorm, canonical, prefetch_v, m,
                          coef, acc, mark, touched):
            """Iterations ``t0 + 1 .. t1``: the loop of the Pegasos solver, batches drawn in place.

            Batches of one row of a canonical CSR without the optimal bias run
            :func:`_pegasos_loop_single` instead (the caller picks, so that a fit
            compiles only the loop it runs).
            """
            single = canonical and k == 1
            _fill_ring(smp, t0, ring, ringf, ringh, rk, ecache, stamp)
            for t in range(t0 + 1, t1 + 1):
                _draw_ahead(indptr, indices, data, v, smp, t - 1, ring, ringf, ringh, rk, ecache,
                            stamp, prefetch_v)
                rows = ring[(t - 1) % (PREFETCH_DISTANCE + 1)]                    # A_t
                _margins(indptr, indices, data, y, v, s[S_A], s[S_B], rows, m)    # step 2
                if optimal:
                    _optimal_bias(y, rows, m, s)                                  # Sec. 4, b*
                eta, shrink = _step_size(schedule, t, lam, eta0, norma_p)         # step 3
                if shrink == 0.0:
                    _reset_scale(v, u, use_u, s)
                    shrink = 1.0
                _pegasos_step(indptr, indices, data, y, v, u, use_u, s, rows, m, coef, eta,   # 4-5
                              shrink, k, unreg_bias, radius, averaged and t >= t_avg, single,
                              acc, mark, touched)
                _renormalize(v, u, use_u, s, renorm)

        return _pegasos_loop

    #: the Pegasos loop for batches, by ``optimal`` (the batch-optimal bias)
    _PEGASOS_LOOP = {opt: _make_pegasos_loop(opt) for opt in (False, True)}

    # ------------------------------------------------------------------ SDCA
    @njit(cache=True, inline="always")
    def _clipped_step(a_i, c, m_i, inv_q_i):
        """``clip_[-a_i, 1 - a_i](c (1 - m_i) / ||x_i||^2)`` with ``c = lam n / beta`` (eq. 15)."""
        raw = c * (1.0 - m_i) * inv_q_i
        lo = -a_i
        hi = 1.0 - a_i
        x = raw if raw > lo else lo
        return x if x < hi else hi

    @njit(cache=True, inline="always")
    def _sdca_deltas(alpha, inv_q, s, rows, m, lam, n, first, has_first, delta):
        """Eq. (15) with ``beta = s[S_BETA]`` (``NumpyBackend.sdca_deltas``)."""
        c = lam * n / s[S_BETA]
        for i in range(rows.size):
            r = rows[i]
            if has_first and not first[i]:
                delta[i] = 0.0
                continue
            delta[i] = _clipped_step(alpha[r], c, m[i], inv_q[r])

    @njit(cache=True, inline="always")
    def _sdca_adapt_beta(indptr, indices, data, y64, row_sq, s, rows, delta, coef, beta_b,
                         theta, acc, mark, touched):
        """Alg. 2: ``rho``, then ``beta <- beta^theta rho^(1 - theta)`` (``NumpyBackend``)."""
        den = 0.0
        for i in range(rows.size):
            den += delta[i] * delta[i] * row_sq[rows[i]]
        if den <= 0.0:
            return
        for i in range(rows.size):
            coef[i] = delta[i] * y64[rows[i]]
        num = _sum_sq_norm(indptr, indices, data, rows, coef, acc, mark, touched)
        rho = min(max(num / den, 1.0), beta_b)
        s[S_TMP0] = rho
        beta = s[S_BETA] ** theta * rho ** (1.0 - theta)
        s[S_BETA] = min(max(beta, 1.0), beta_b)

    @njit(cache=True, inline="always")
    def _dual_drops(dsum, dabs, dn, vsq, a, lam, n, eps):
        """Alg. 2's test: ``Delta D < -tau``, ``tau`` the rounding of ``Delta D`` (reference)."""
        return (dsum / n - 0.5 * lam * a * a * dn
                < -4.0 * (eps * lam * a * a * vsq + _EPS64 * dabs / n))

    @njit(cache=True, inline="always")
    def _sdca_apply(indptr, indices, data, y64, v, s, alpha, rows, delta, coef, lam, n, check,
                    single, eps, empty, acc, mark, touched):
        """Alpha and ``w`` step, kept only if ``D`` grows when ``check`` (``NumpyBackend``)."""
        a = s[S_A]
        g = 1.0 / (lam * n * a)
        dsum = 0.0
        dabs = 0.0
        for i in range(rows.size):
            coef[i] = delta[i] * y64[rows[i]] * g
            dsum += delta[i]
            dabs += abs(delta[i])
        vsq = s[S_VSQ]
        dn = _add_rows(indptr, indices, data, v, empty, 0.0, False, rows, coef, single,
                       acc, mark, touched)
        s[S_DNORM] = dn
        if check and _dual_drops(dsum, dabs, dn, vsq, a, lam, n, eps):
            for i in range(rows.size):
                coef[i] = -coef[i]
            dn2 = _add_rows(indptr, indices, data, v, empty, 0.0, False, rows, coef, single,
                            acc, mark, touched)
            s[S_VSQ] += dn + dn2
            s[S_NREJ] += 1.0
            return
        s[S_VSQ] += dn
        for i in range(rows.size):
            alpha[rows[i]] += delta[i]
        s[S_ASUMD] += dsum

    @njit(cache=True, inline="always")
    def _shrink_test(alpha, active, shr, r, m):
        """``NumpyBackend._shrink_test``: True when row ``r`` leaves the active set."""
        g = m - 1.0
        a = alpha[r]
        if a <= 0.0:
            if g > shr[0]:
                active[r] = False
                return True
            pg = min(g, 0.0)
        elif a >= 1.0 - _UPPER_SLACK:
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
        """``NumpyBackend._shrink_epoch``: roll the bounds over, or unshrink every row."""
        if shr[2] - shr[3] <= _SHRINK_EPS:
            active[:] = True
            shr[0] = np.inf
            shr[1] = -np.inf
            shr[2] = -np.inf
            shr[3] = np.inf
            return
        shr[0] = shr[2] if shr[2] > 0.0 else np.inf
        shr[1] = shr[3] if shr[3] < 0.0 else -np.inf
        shr[2] = -np.inf
        shr[3] = np.inf

    def _make_sdca_loop_single(by_epoch):
        """:func:`_sdca_loop_single` compiled for rows read from the epoch's order
        (``by_epoch``) or drawn by the sampler: each fit compiles only the branch it runs."""

        @njit(cache=True)
        def _sdca_loop_single(indptr, indices, data, y, y64, v, s, alpha, inv_q, row_sq, smp, ring,
                              ringf, ringh, rk, ecache, stamp, order, table, t0, t1, lam, n, beta_b,
                              theta, aggressive, eps, prefetch_v, no_u, shrinking, active, shr):
            """:func:`_sdca_loop` for batches of one row of a canonical CSR, with scalars for arrays.

            The same operations in the same order as :func:`_margins`,
            :func:`_sdca_deltas`, :func:`_sdca_adapt_beta` and :func:`_sdca_apply`
            with ``rows.size == 1`` (so bitwise the same iterates), without their
            per-iteration array bookkeeping, which costs more than the arithmetic
            of a 100-400-nonzero row.  A batch of one row never repeats a row.
            With ``shrinking``, LIBLINEAR's active set as in
            ``NumpyBackend._sdca_segment_shrinking``.
            """
            # the scalars of s live in registers for the whole segment: a and b never change
            # inside it, beta only in Alg. 2's branch; the sums run in the same order as s[...] += ...
            a = s[S_A]
            b = s[S_B]
            c = lam * n / s[S_BETA]                                               # eq. (15) factor
            g = 1.0 / (lam * n * a)                                               # w step factor
            vsq = s[S_VSQ]
            asumd = s[S_ASUMD]
            nrej = s[S_NREJ]
            e = t0 // n                                   # epoch and position of batch t0 (b = 1)
            q = t0 - e * n
            if by_epoch:
                if ecache[2] != e:
                    _nb_epoch_order(n, smp[3], smp[4], smp[5], e, rk, ecache, table, order)
            else:
                _fill_ring(smp, t0, ring, ringf, ringh, rk, ecache, stamp)
            for bt in range(t0, t1):
                if by_epoch:
                    if q + ORDER_PREFETCH < n:            # the row ahead, with its own scalars
                        ra = order[q + ORDER_PREFETCH]
                        if not shrinking or active[ra]:   # (a shrunk row is only looked at)
                            _prefetch_row(indptr, indices, data, ra)
                            _prefetch(alpha, ra)
                            _prefetch(inv_q, ra)
                            _prefetch(y, ra)
                            _prefetch(y64, ra)
                    if prefetch_v and q + 1 < n:
                        _prefetch_columns(indptr, indices, v, order[q + 1])
                    r = order[q]                                                  # A_t = {r}
                else:
                    _draw_ahead(indptr, indices, data, v, smp, bt, ring, ringf, ringh, rk, ecache,
                                stamp, prefetch_v)
                    r = ring[bt % (PREFETCH_DISTANCE + 1), 0]                     # A_t = {r}
                q += 1
                epoch_ends = q == n
                if epoch_ends:
                    e += 1
                    q = 0
                    if by_epoch:
                        _nb_epoch_order(n, smp[3], smp[4], smp[5], e, rk, ecache, table, order)
                step = True
                if shrinking and not active[r]:
                    step = False
                if step:
                    z = _row_dot(indptr, indices, data, v, r)                     # y_r <w, x_r>
                    m = np.float64(y[r]) * (a * z + b)
                    if shrinking and _shrink_test(alpha, active, shr, r, m):
                        step = False
                if step:
                    delta = _clipped_step(alpha[r], c, m, inv_q[r])
                    if aggressive:                                                # Alg. 2
                        den = 0.0 + delta * delta * row_sq[r]
                        if den > 0.0:
                            ci = delta * y64[r]
                            num = 0.0
                            for p in range(indptr[r], indptr[r + 1]):
                                x = data[p] * ci
                                num += x * x
                            rho = min(max(num / den, 1.0), beta_b)
                            s[S_TMP0] = rho
                            beta = s[S_BETA] ** theta * rho ** (1.0 - theta)
                            s[S_BETA] = min(max(beta, 1.0), beta_b)
                            c = lam * n / s[S_BETA]
                        delta = _clipped_step(alpha[r], c, m, inv_q[r])
                    ci = delta * y64[r] * g                                       # alpha, w step
                    dsum = 0.0 + delta
                    dn = _add_row(indptr, indices, data, v, no_u, 0.0, False, r, ci)
                    s[S_DNORM] = dn
                    if aggressive and _dual_drops(dsum, 0.0 + abs(delta), dn, vsq, a, lam, n, eps):
                        dn2 = _add_row(indptr, indices, data, v, no_u, 0.0, False, r, -ci)   # undo
                        vsq += dn + dn2
                        nrej += 1.0
                    else:
                        vsq += dn
                        alpha[r] += delta
                        asumd += dsum
                if shrinking and epoch_ends:
                    _shrink_epoch(active, shr)
            s[S_VSQ] = vsq
            s[S_ASUMD] = asumd
            s[S_NREJ] = nrej

        return _sdca_loop_single

    #: the one-row SDCA loop by ``by_epoch`` (``"epoch"`` sampling)
    _SDCA_LOOP_SINGLE = {by: _make_sdca_loop_single(by) for by in (False, True)}

    @njit(cache=True)
    def _sdca_loop(indptr, indices, data, y, y64, v, s, alpha, inv_q, row_sq, smp, ring, ringf,
                   ringh, rk, ecache, stamp, order, table, t0, t1, lam, n, beta_b, theta, aggressive,
                   canonical, eps, prefetch_v, m, delta, coef, no_u, acc, mark, touched,
                   shrinking, active, shr):
        """Iterations ``t0 + 1 .. t1``: the loop of the SDCA solver, batches drawn in place.

        Batches of one row of a canonical CSR run :func:`_sdca_loop_single`
        instead (the caller picks, so that a fit compiles only the loop it runs).
        """
        single = canonical and smp[2] == 1
        _fill_ring(smp, t0, ring, ringf, ringh, rk, ecache, stamp)
        for bt in range(t0, t1):
            _draw_ahead(indptr, indices, data, v, smp, bt, ring, ringf, ringh, rk, ecache,
                        stamp, prefetch_v)
            sl = bt % (PREFETCH_DISTANCE + 1)
            rows = ring[sl]                                                   # A_t
            first = ringf[sl]
            has_first = ringh[sl]
            _margins(indptr, indices, data, y, v, s[S_A], s[S_B], rows, m)    # y_i <w, x_i>
            _sdca_deltas(alpha, inv_q, s, rows, m, lam, n, first, has_first, delta)   # eq. (15)
            if aggressive:                                                    # Alg. 2
                _sdca_adapt_beta(indptr, indices, data, y64, row_sq, s, rows, delta, coef,
                                 beta_b, theta, acc, mark, touched)
                _sdca_deltas(alpha, inv_q, s, rows, m, lam, n, first, has_first, delta)
            _sdca_apply(indptr, indices, data, y64, v, s, alpha, rows, delta, coef, lam, n,
                        aggressive, single, eps, no_u, acc, mark, touched)


class NumbaBackend(NumpyBackend):
    """The NumPy reference backend with its hot primitives compiled by numba.

    Parameters
    ----------
    X : scipy.sparse.csr_matrix
        Training data, CSR (canonical: sorted, duplicate-free indices, as the
        estimators prepare it), dtype float32 or float64.  Never copied.
    y : ndarray of shape (n,)
        Labels in {-1, +1}, same dtype as ``X``.

    Raises
    ------
    ImportError
        When numba is not installed (the message names the ``fast`` extra).

    Notes
    -----
    Same primitives, state and dtypes as :class:`~gpusvm.backends.numpy_.NumpyBackend`
    (``v`` in the data's dtype, scalars and reductions in float64), and the
    same iterates on the same batches up to the order of floating-point sums.
    Deterministic: single-threaded loops, no atomics, and no BLAS call (whose
    thread pool would wake up at every evaluation).  The first use in a
    process loads the compiled code from numba's cache (``__pycache__``),
    compiling it once per type signature when the cache is cold (see
    BENCHMARKS.md for the one-off cost).

    The segment primitives :meth:`pegasos_segment` and :meth:`sdca_segment`
    run all the iterations between two evaluations without returning to Python,
    drawing the batches themselves.

    Memory: besides the state of the reference (``v``, ``alpha``, ...), a
    float64 scratch vector, a mask and an index list of length ``d`` for
    batches of more than one row (allocated on first use).
    """

    name = "numba"

    def __init__(self, X, y, sample_weight=None) -> None:
        if numba is None or not numba_available():
            raise ImportError(NUMBA_MISSING)
        super().__init__(X, y, sample_weight)
        self._nb_canonical = bool(X.has_canonical_format)
        self._nb_eps = float(np.finfo(self.dtype).eps)
        # v (and w of an evaluation) larger than the L2 cache: prefetch its entries too
        self._nb_prefetch_v = self.d * self.dtype.itemsize > l2_cache_bytes()
        self._nb_no_u = np.empty(0, dtype=np.float64)
        self._nb_big = None
        self._nb_k = -1
        self._nb_smp = None

    def _row_sq_norms(self) -> np.ndarray:
        """``||x_i||^2`` in float64 straight from ``X.data`` (no squared copy of ``X``)."""
        out = np.empty(self.n, dtype=np.float64)
        _row_sq_norms(self.X.indptr, self.X.data, out)
        return out

    # ------------------------------------------------------------ helpers
    def _nb_csr(self):
        X = self.X
        return X.indptr, X.indices, X.data

    def _nb_u(self):
        return (self.u, True) if self.u is not None else (self._nb_no_u, False)

    def _nb_work(self, k: int):
        """Per-batch float64 work vectors, allocated once per batch size."""
        if self._nb_k != k:
            self._nb_k = k
            self._nb_m = np.empty(k, dtype=np.float64)
            self._nb_coef = np.empty(k, dtype=np.float64)
            self._nb_delta = np.empty(k, dtype=np.float64)
        return self._nb_m, self._nb_coef, self._nb_delta

    def _nb_scratch(self, k: int):
        """``(acc, mark, touched)`` for aggregating a batch per column; tiny when unused.

        One row of a canonical CSR is added in place and needs none of them.
        """
        if k == 1 and self._nb_canonical:
            return self._nb_no_u, np.zeros(0, dtype=np.bool_), np.zeros(0, dtype=np.int32)
        if self._nb_big is None:
            self._nb_big = (np.zeros(self.d, dtype=np.float64), np.zeros(self.d, dtype=np.bool_),
                            np.empty(self.d, dtype=np.int32))
        return self._nb_big

    # ------------------------------------------------------------ state
    def init_state(self, w0=None, b0: float = 0.0, averaging: bool = False) -> None:
        """Allocate ``v`` (= ``w0``), the scalars (``a = 1``) and, if needed, ``u``."""
        self.v = np.zeros(self.d, dtype=self.dtype) if w0 is None else np.array(w0, dtype=self.dtype)
        self.s = np.zeros(N_SLOTS, dtype=np.float64)
        self.s[S_A] = 1.0
        self.s[S_VSQ] = 0.0 if w0 is None else _dot(self.v, self.v)
        self.s[S_B] = b0
        self.u = np.zeros(self.d, dtype=np.float64) if averaging else None

    # ------------------------------------------------------------ Pegasos primitives
    def margins(self, rows: np.ndarray) -> np.ndarray:
        """``m_i = y_i (a <v, x_i> + b)`` for ``i`` in ``rows`` (float64)."""
        m = np.empty(rows.size, dtype=np.float64)
        _margins(*self._nb_csr(), self.y, self.v, self.s[S_A], self.s[S_B], rows, m)
        return m

    def optimal_bias(self, rows: np.ndarray, m: np.ndarray) -> None:
        """Set ``b`` to the batch-optimal bias and shift ``m`` to it, in place."""
        _optimal_bias(self.y, rows, m, self.s)

    def reset_scale(self) -> None:
        """Set ``w = 0`` keeping the running average consistent (``u -= A v``)."""
        u, use_u = self._nb_u()
        _reset_scale(self.v, u, use_u, self.s)

    def add_rows(self, rows: np.ndarray, coef: np.ndarray, u_scale: float | None = None) -> float:
        """``v += sum_i coef_i x_{rows_i}``; return the exact change of ``||v||^2``."""
        u, use_u = self._nb_u()
        use_u = use_u and u_scale is not None
        single = self._nb_canonical and rows.size == 1
        return float(_add_rows(*self._nb_csr(), self.v, u, 0.0 if u_scale is None else u_scale,
                               use_u, rows, np.asarray(coef, dtype=np.float64), single,
                               *self._nb_scratch(rows.size)))

    def pegasos_step(self, rows, m, eta: float, shrink: float, k: int,
                     unreg_bias: bool, radius: float, average: bool) -> None:
        """Steps 4-5 of Pegasos Fig. 1 in the sparse form (see :mod:`.base`)."""
        u, use_u = self._nb_u()
        coef = np.empty(rows.size, dtype=np.float64)
        _pegasos_step(*self._nb_csr(), self.y, self.v, u, use_u, self.s, rows, m, coef,
                      float(eta), float(shrink), int(k), bool(unreg_bias), float(radius),
                      bool(average), self._nb_canonical and rows.size == 1,
                      *self._nb_scratch(rows.size))

    def renormalize(self, threshold: float) -> None:
        """Fold ``a`` into ``v`` when ``|a| < threshold`` (the running sum moves into ``u``)."""
        u, use_u = self._nb_u()
        _renormalize(self.v, u, use_u, self.s, float(threshold))

    def _nb_sampler(self, sampler):
        """The compiled sampler's arguments and its per-run state, made once per sampler.

        Returns ``(smp, ring, ringf, ringh, rk, ecache, stamp, order, table)``: the
        sampler's ``(code, n, k, seed, half, mask)``, the ring of the batches drawn
        ahead (``PREFETCH_DISTANCE + 1`` of them) with their first-occurrence masks,
        and the state of :func:`gpusvm.backends._counter_nb.batch` (with, for
        ``"epoch"`` sampling of one row per batch on a canonical CSR, the loops that
        take a row at a time, the arrays of
        :func:`gpusvm.backends._counter_nb.epoch_order`).
        """
        if self._nb_smp is None or self._nb_smp[0] is not sampler:
            k = sampler.k
            smp = (int(sampler.code), int(sampler.n), int(k), np.uint64(sampler.seed),
                   int(sampler.half), int(sampler.mask))
            ring = np.zeros((PREFETCH_DISTANCE + 1, k), dtype=np.int32)
            ringf = np.ones((PREFETCH_DISTANCE + 1, k), dtype=np.bool_)
            ringh = np.zeros(PREFETCH_DISTANCE + 1, dtype=np.bool_)
            by_epoch = sampler.code == 2 and k == 1 and self._nb_canonical
            state = sampler_state(sampler.n if sampler.code == 1 else 1,
                                  sampler.n if by_epoch else 0, int(sampler.half))
            self._nb_smp = (sampler, (smp, ring, ringf, ringh, *state))
        return self._nb_smp[1]

    def pegasos_segment(self, sampler, t0: int, t1: int, plan) -> None:
        """Pegasos iterations ``t0 + 1 .. t1`` in one compiled call, batches drawn in place.

        Exactly the per-iteration sequence of
        :meth:`NumpyBackend.pegasos_segment <gpusvm.backends.numpy_.NumpyBackend.pegasos_segment>`:
        the batch from the counter (:mod:`gpusvm.backends._counter_nb`), :meth:`margins`,
        :meth:`optimal_bias` (when ``plan.optimal``), the step size, :meth:`reset_scale`
        when ``1 - eta_t lam == 0``, :meth:`pegasos_step` and :meth:`renormalize`.

        Parameters
        ----------
        sampler : gpusvm.solvers._sampling.CounterSampler
        t0, t1 : int
            Iterations done before and after the segment.
        plan : gpusvm.backends.base.PegasosPlan
        """
        p = plan
        u, use_u = self._nb_u()
        m, coef, _ = self._nb_work(p.k)
        smp = self._nb_sampler(sampler)
        if self._nb_canonical and p.k == 1 and not p.optimal:    # one row at a time
            loop = _PEGASOS_LOOP_SINGLE[smp[7].size > 0]          # rows in the epoch's order?
            _call_loop(loop, *self._nb_csr(), self.y, self.v, u, use_u, self.s, *smp, int(t0),
                       int(t1), float(p.lam), int(p.k), SCHEDULE_CODES[p.schedule],
                       float(p.eta0 or 0.0), float(p.norma_p), bool(p.unreg_bias),
                       float(p.radius), bool(p.averaged), int(p.t_avg),
                       float(p.renorm_threshold), self._nb_prefetch_v)
            return
        _call_loop(_PEGASOS_LOOP[bool(p.optimal)], *self._nb_csr(), self.y, self.v, u, use_u,
                   self.s, *smp, int(t0), int(t1), float(p.lam), int(p.k),
                   SCHEDULE_CODES[p.schedule], float(p.eta0 or 0.0), float(p.norma_p),
                   bool(p.unreg_bias), float(p.radius), bool(p.averaged), int(p.t_avg),
                   float(p.renorm_threshold), self._nb_canonical, self._nb_prefetch_v, m, coef, *self._nb_scratch(p.k))

    # ------------------------------------------------------------ evaluation
    def decision_function(self, w, b) -> np.ndarray:
        """``<w, x_i> + b`` on all rows (float64, no upcast copy of ``X``)."""
        out = np.empty(self.n, dtype=np.float64)
        _csr_matvec(*self._nb_csr(), np.asarray(w, dtype=np.float64), float(b), out,
                    self._nb_prefetch_v)
        return out

    def evaluate(self, w, b, lam: float, reg_bias: bool = False) -> Evaluation:
        """Primal objective ``P(w)`` on all rows (ALGORITHMS.md, Notation)."""
        z = self.decision_function(w, b)
        loss = _mean_hinge(self.y, z)
        sq = _dot(w, w) + (b * b if reg_bias else 0.0)
        return Evaluation(0.5 * lam * sq + loss, loss, sq)

    # ------------------------------------------------------------ SDCA primitives
    def sdca_deltas(self, rows: np.ndarray, m: np.ndarray, lam: float,
                    first: np.ndarray | None = None) -> np.ndarray:
        """Coordinate steps of eq. (15) with ``beta = S_BETA`` (float64, shape (b,))."""
        delta = np.empty(rows.size, dtype=np.float64)
        has_first = first is not None
        f = first if has_first else np.ones(1, dtype=np.bool_)
        _sdca_deltas(self.alpha, self._inv_q, self.s, rows, m, float(lam), self.n, f,
                     has_first, delta)
        return delta

    def sdca_adapt_beta(self, rows: np.ndarray, delta: np.ndarray, beta_b: float,
                        theta: float) -> None:
        """Alg. 2: ``beta <- beta^theta rho^(1-theta)`` from the tentative step ``delta``."""
        coef = np.empty(rows.size, dtype=np.float64)
        acc, mark, touched = self._nb_scratch(2)          # _sum_sq_norm aggregates always
        _sdca_adapt_beta(*self._nb_csr(), self._y64, self.row_sq_norms, self.s, rows,
                         np.asarray(delta, dtype=np.float64), coef, float(beta_b), float(theta),
                         acc, mark, touched)

    def sdca_apply(self, rows: np.ndarray, delta: np.ndarray, lam: float, check: bool) -> None:
        """``alpha_A += delta``, ``w += (1/(lam n)) sum_i delta_i y_i x_i``, checked if asked."""
        coef = np.empty(rows.size, dtype=np.float64)
        single = self._nb_canonical and rows.size == 1
        _sdca_apply(*self._nb_csr(), self._y64, self.v, self.s, self.alpha, rows,
                    np.asarray(delta, dtype=np.float64), coef, float(lam), self.n, bool(check),
                    single, self._nb_eps, self._nb_no_u, *self._nb_scratch(rows.size))

    def sdca_segment(self, sampler, t0: int, t1: int, plan) -> None:
        """SDCA iterations ``t0 + 1 .. t1`` in one compiled call, batches drawn in place.

        Exactly the per-iteration sequence of
        :meth:`NumpyBackend.sdca_segment <gpusvm.backends.numpy_.NumpyBackend.sdca_segment>`:
        the batch and its first-occurrence mask from the counter, :meth:`margins`,
        :meth:`sdca_deltas`, then for ``plan.aggressive`` :meth:`sdca_adapt_beta` and
        :meth:`sdca_deltas` again, and :meth:`sdca_apply` (checked when aggressive).

        Parameters
        ----------
        sampler : gpusvm.solvers._sampling.CounterSampler
        t0, t1 : int
            Iterations done before and after the segment.
        plan : gpusvm.backends.base.SDCAPlan
        """
        p = plan
        b = sampler.k
        m, coef, delta = self._nb_work(b)
        # Alg. 2 measures rho by aggregating even a single row: it needs the scratch for b = 1
        acc, mark, touched = self._nb_scratch(2 if p.aggressive and b > 1 else b)
        smp = self._nb_sampler(sampler)
        if self._nb_canonical and b == 1:                          # one row at a time
            loop = _SDCA_LOOP_SINGLE[smp[7].size > 0]             # rows in the epoch's order?
            _call_loop(loop, *self._nb_csr(), self.y, self._y64, self.v, self.s, self.alpha,
                       self._inv_q, self.row_sq_norms, *smp, int(t0), int(t1), float(p.lam),
                       self.n, float(p.beta_b), float(p.theta), bool(p.aggressive),
                       self._nb_eps, self._nb_prefetch_v, self._nb_no_u, bool(p.shrinking),
                       self._active, self._shr)
            return
        _call_loop(_sdca_loop, *self._nb_csr(), self.y, self._y64, self.v, self.s, self.alpha,
                   self._inv_q, self.row_sq_norms, *smp, int(t0), int(t1), float(p.lam), self.n,
                   float(p.beta_b), float(p.theta), bool(p.aggressive), self._nb_canonical,
                   self._nb_eps, self._nb_prefetch_v, m, delta, coef, self._nb_no_u, acc, mark,
                   touched, bool(p.shrinking), self._active, self._shr)

    def dual_weights(self, lam: float) -> np.ndarray:
        """``w(alpha) = X^T (alpha y) / (lam n)`` in float64, resynchronising ``v`` (O(nnz)).

        Rows with ``alpha_i = 0`` add nothing and are skipped; the division by
        ``lam n``, the copy into ``v`` and ``||v||^2`` share one pass over ``w``.
        """
        w = np.zeros(self.d, dtype=np.float64)
        _csr_rmatvec(*self._nb_csr(), self.alpha, self._y64, w, self._nb_prefetch_v)
        self.s[S_VSQ] = _scale_copy_sq(w, lam * self.n, self.v)
        self.s[S_A] = 1.0
        self.s[S_ASUMD] = float(self.alpha.sum())
        return w

    def dual_objective(self, lam: float, w: np.ndarray) -> float:
        """``D(alpha) = (1/n) sum_i alpha_i - (lam/2) ||w||^2`` with ``w = w(alpha)`` (host float)."""
        return float(self.alpha.sum()) / self.n - 0.5 * lam * _dot(w, w)


    # ------------------------------------------------------------ general path
    # M outputs, sample weights, the squared hinge: the compiled loops of _general_nb,
    # the binary unweighted hinge above untouched.
    def _nb_general(self, k: int):
        """Work arrays of the general path for batches of ``k`` rows (made once per ``k``)."""
        from ._general_nb import N_WORK, max_row_nnz  # noqa: PLC0415  (imports this module)

        key = (k, self.n_outputs)
        if getattr(self, "_nb_gen_key", None) != key:
            M = self.n_outputs
            cap = max(M, min(self.d, k * max_row_nnz(self.X.indptr)))
            self._nb_gen = {
                "m": np.empty((k, M)), "delta": np.empty((k, M)), "coef": np.empty((k, M)),
                "slot": np.full(self.d, -1, dtype=np.int32), "acc": np.empty((cap, M)),
                "touched": np.empty(cap, dtype=np.int32), "wk": np.zeros((N_WORK, M)),
                "tmp": np.empty(1, dtype=self.dtype),
                "yb": np.empty(k), "sc": np.empty(k), "bp": np.empty(k), "wt": np.empty(k),
                "no_u": np.empty((1, M)),
            }
            self._nb_gen_key = key
        return self._nb_gen

    def _nb_weights(self):
        if self.sample_weight is None:
            return np.empty((0, 0), dtype=np.float64), False
        return self.sample_weight, True

    def pegasos_segment_m(self, sampler, t0: int, t1: int, plan) -> None:
        """Pegasos iterations ``t0 + 1 .. t1`` on the general path in one compiled call
        (:meth:`GeneralPath.pegasos_segment_m <gpusvm.backends._general.GeneralPath.pegasos_segment_m>`)."""
        from ._general_nb import PEGASOS_LOOP_M  # noqa: PLC0415

        p = plan
        g = self._nb_general(p.k)
        use_u = self.U is not None
        U = self.U if use_u else g["no_u"]
        sw, weighted = self._nb_weights()
        smp = self._nb_sampler(sampler)
        loop = PEGASOS_LOOP_M[smp[7].size > 0, bool(p.optimal)]   # rows in the epoch's order?
        _call_loop(loop, *self._nb_csr(), self.Y, sw, weighted, self.V, U, use_u, self.sm, *smp,
                   int(t0), int(t1), float(p.lam), int(p.k), SCHEDULE_CODES[p.schedule],
                   float(p.eta0 or 0.0), float(p.norma_p), bool(p.unreg_bias), float(p.radius),
                   bool(p.averaged), int(p.t_avg), float(p.renorm_threshold),
                   p.loss == "squared_hinge", self._nb_canonical, g["m"], g["coef"], g["slot"],
                   g["acc"], g["touched"], g["wk"], g["tmp"], self._nb_vflat(), g["yb"],
                   g["sc"], g["bp"], g["wt"])

    def sdca_segment_m(self, sampler, t0: int, t1: int, plan) -> None:
        """SDCA iterations ``t0 + 1 .. t1`` on the general path in one compiled call
        (:meth:`GeneralPath.sdca_segment_m <gpusvm.backends._general.GeneralPath.sdca_segment_m>`)."""
        from ._general_nb import _sdca_epochs_single_m, sdca_loop_m  # noqa: PLC0415

        p = plan
        if p.shrinking:          # one unweighted hinge output, b = 1: the shrinking loop on M = 1
            s, y = np.ascontiguousarray(self.sm[:, 0]), self.Y.reshape(-1)
            smp = self._nb_sampler(sampler)
            _call_loop(_SDCA_LOOP_SINGLE[smp[7].size > 0], *self._nb_csr(), y,
                       y.astype(np.float64), self.V.reshape(-1), s, self.alpha.reshape(-1),
                       self._inv_q, self.row_sq_norms, *smp, int(t0), int(t1), float(p.lam),
                       self.n, float(p.beta_b), float(p.theta), bool(p.aggressive),
                       self._nb_eps, self._nb_prefetch_v, self._nb_no_u, True, self._active,
                       self._shr)
            self.sm[:, 0] = s
            return
        g = self._nb_general(sampler.k)
        sw, weighted = self._nb_weights()
        smp, _, _, _, rk, ecache, _, order, table = self._nb_sampler(sampler)
        if self._nb_canonical and sampler.k == 1 and not p.aggressive and order.size > 0:
            # one row at a time in the epoch's order (what sdca_loop_m would run)
            _call_loop(_sdca_epochs_single_m, *self._nb_csr(), self.Y, sw, weighted, self.V,
                       self.sm, self.alpha, self._inv_q, self.row_sq_norms, smp, rk, ecache,
                       order, table, int(t0), int(t1), float(p.lam), self.n,
                       p.loss == "squared_hinge", g["touched"], g["wk"], self._nb_vflat(),
                       self.alpha.reshape(-1), self.Y.reshape(-1))
            return
        _call_loop(sdca_loop_m, *self._nb_csr(), self.Y, sw, weighted, self.V, self.sm,
                   self.alpha, self._inv_q, self.row_sq_norms, *self._nb_sampler(sampler),
                   int(t0), int(t1), float(p.lam), self.n, float(p.beta_b), float(p.theta),
                   bool(p.aggressive), p.loss == "squared_hinge", self._nb_canonical,
                   self._nb_eps, g["m"], g["delta"], g["coef"], g["no_u"], g["slot"], g["acc"],
                   g["touched"], g["wk"], self._nb_vflat(), self.alpha.reshape(-1),
                   self.Y.reshape(-1))

    def _nb_vflat(self) -> np.ndarray:
        """``V`` flattened (a view) when it exceeds the L2 cache, so that the loops prefetch
        its lines (:func:`~gpusvm.backends._general_nb._prefetch_v_m`); else empty."""
        if self.V.nbytes > l2_cache_bytes() and self.V.flags.c_contiguous:
            return self.V.reshape(-1)
        return np.empty(0, dtype=self.V.dtype)

    def decision_function_m(self, W, b) -> np.ndarray:
        """``<w_c, x_i> + b_c`` on all rows, float64 (n, M), without an upcast copy of ``X``."""
        from ._general_nb import csr_matmat  # noqa: PLC0415

        W = np.ascontiguousarray(W, dtype=np.float64)
        out = np.empty((self.n, W.shape[1]), dtype=np.float64)
        bb = np.ascontiguousarray(np.broadcast_to(np.asarray(b, dtype=np.float64), (W.shape[1],)))
        csr_matmat(*self._nb_csr(), W, bb, out)
        return out

    def dual_weights_m(self, lam: float) -> np.ndarray:
        """``W(alpha) = X^T (alpha * Y) / (lam n)`` in float64 (d, M), resynchronising ``V``."""
        from ._general_nb import csr_rmatmat, scale_copy_sq_m  # noqa: PLC0415

        W = np.zeros((self.d, self.n_outputs), dtype=np.float64)
        csr_rmatmat(*self._nb_csr(), self.alpha, self.Y, W)
        vsq = np.empty(self.n_outputs)
        scale_copy_sq_m(W, lam * self.n, self.V, vsq)      # W /= lam n, V = W, ||v_c||^2
        self.sm[S_A] = 1.0
        self.sm[S_VSQ] = vsq
        self.sm[S_ASUMD] = self.alpha.sum(axis=0)
        return W

    def col_dots_m(self, A, a_cols, B) -> np.ndarray:
        """:meth:`GeneralEvaluation.col_dots_m` in one compiled row-major pass."""
        from ._general_nb import col_dots  # noqa: PLC0415

        if not (A.flags.c_contiguous and B.flags.c_contiguous and A.dtype == B.dtype == np.float64):
            return super().col_dots_m(A, a_cols, B)
        out = np.empty(np.shape(B)[1])
        col_dots(A, np.asarray(a_cols, dtype=np.int64), B, out)
        return out

    def mix_columns_m(self, dst, dst_cols, src, t) -> None:
        """:meth:`GeneralEvaluation.mix_columns_m` in one compiled row-major pass (NumPy's
        fancy indexing walks a column at a time: 20 ms for 20 columns of news20)."""
        from ._general_nb import mix_columns  # noqa: PLC0415

        if not (dst.flags.c_contiguous and src.flags.c_contiguous
                and dst.dtype == src.dtype == np.float64):
            super().mix_columns_m(dst, dst_cols, src, t)
            return
        mix_columns(dst, np.asarray(dst_cols, dtype=np.int64), src,
                    np.asarray(t, dtype=np.float64))

    def col_sq_norms_m(self, W) -> np.ndarray:
        """``||w_c||^2`` of every column of ``W`` (d, M) in one compiled pass (float64)."""
        from ._general_nb import col_sq_norms  # noqa: PLC0415

        out = np.empty(np.shape(W)[1])
        col_sq_norms(np.ascontiguousarray(W, dtype=np.float64), out)
        return out


class CompilationNotice(UserWarning):
    """The compiled CPU loops are being compiled (once; numba caches them on disk)."""


_announced: set = set()

#: what the notice says a cold first fit compiles for (BENCHMARKS.md, "One-off compilation":
#: the CPU seconds numba spent on each path's first fit with an empty cache)
COMPILE_SECONDS = "3-7 s"


def _call_loop(dispatcher, *args):
    """Call the compiled loop ``dispatcher(*args)``, first saying (:func:`_announce_compilation`)
    when numba is about to compile it rather than load it from its cache.

    ``args`` start with the CSR arrays ``(indptr, indices, data, ...)``: the loops are
    compiled once per dtype of ``data``.
    """
    key = (id(dispatcher), str(args[2].dtype))
    if key not in _announced:         # once per loop, dtype and process
        _announced.add(key)
        _announce_compilation(dispatcher, args)
    return dispatcher(*args)


def _announce_compilation(dispatcher, args) -> None:
    """Warn (:class:`CompilationNotice`) when the call ``dispatcher(*args)`` will compile.

    numba compiles a loop for the argument types of the first call and keeps it
    in its on-disk cache (``__pycache__`` beside this module, or
    ``NUMBA_CACHE_DIR``), keyed by those types, the CPU and the source; a call
    already compiled in this process, or whose entry is in the cache, is not
    announced.
    """
    try:
        sig = tuple(dispatcher.typeof_pyval(a) for a in args)
        if sig in dispatcher.overloads:
            return
        cache = dispatcher._cache
        if cache._index_key(sig, dispatcher.targetctx.codegen()) in \
                cache._cache_file._load_index():
            return
    except Exception:                 # noqa: BLE001  another numba: say nothing rather than guess
        return
    warnings.warn(f"gpusvm: compiling the CPU loops of this solver for {args[2].dtype} data, "
                  f"once: about {COMPILE_SECONDS} of CPU time (longer in wall time when other "
                  "work shares the cores); numba caches them on disk for later runs",
                  CompilationNotice, stacklevel=5)


@functools.lru_cache(maxsize=None)
def l2_cache_bytes() -> int:
    """Size of the L2 cache of CPU 0 from sysfs (512 KiB when it cannot be read)."""
    try:
        for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
            if (index / "level").read_text().strip() == "2":
                text = (index / "size").read_text().strip().upper()
                scale = {"K": 1024, "M": 1024 ** 2}.get(text[-1], 1)
                return int(text.rstrip("KM")) * scale
    except (OSError, ValueError):
        pass
    return 512 * 1024


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """``<a, b>`` accumulated in float64 by a compiled loop (no BLAS, no float64 copies)."""
    return float(_dot_f(a, b))


def _mean_hinge(y: np.ndarray, z: np.ndarray) -> float:
    """``(1/n) sum_i max(0, 1 - y_i z_i)`` in float64."""
    return float(_hinge_sum(y, z)) / y.size
