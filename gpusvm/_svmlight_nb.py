"""The compiled svmlight parser of :func:`gpusvm.datasets.load_svmlight`: every core over
chunks of the file's bytes cut at line starts.

A light pass bounds each chunk's rows (its newlines) and values (its colons); the parse writes
each chunk at the offsets of the bounds' prefix sums, and the chunks are then moved together
(nothing moves in a file without blank lines, comments or qids), so the result depends on
neither the chunk size nor the number of threads. A chunk holding "hard" numbers is parsed
once more, to record where they are.

A number is parsed here exactly, to the double Python's ``float`` returns: its first 19
significant digits make an integer ``w`` (a ``uint64``) and the rest a decimal exponent ``q``.
When ``w < 2**53`` and ``|q| <= 22``, ``w * 10**q`` (or ``w / 10**-q``) is one correctly
rounded IEEE operation on two exact doubles (Clinger's fast path); otherwise the Eisel-Lemire
algorithm rounds ``w * 10**q`` from a 128-bit truncation of ``5**q`` (:func:`_eisel_lemire`, as
in fast_float, Go's ``strconv`` and Rust's ``core``; its 128-bit product always decides the
rounding of a 64-bit ``w``: Mushtak and Lemire, "Fast number parsing without fallback", 2023).
A number of more than 19 significant digits lies between ``w`` and ``w + 1`` at the scale of
``q``: when both round to the same double, that double is the value. Any other number (one
that ``w`` and ``w + 1`` leave undecided, ``inf``, ``nan``, underscores, or no number at all)
is "hard": its byte range is recorded and Python's ``float`` parses it afterwards. A line the
fast grammar does not cover (an index that is not plain digits or does not fit int32, indices
not increasing, a term without ``:``) stops the chunk with status 1, and the caller reads the
file the old way, which accepts or names the line exactly as before.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from gpusvm.backends import _compile_nb  # noqa: F401  (the collector paused, the cache stamped)

#: the exact powers of ten a double holds
_POW10 = np.array([10.0 ** k for k in range(23)])
_TWO53 = 1 << 53
_INT32_MAX = (1 << 31) - 1
_NL, _HASH, _COLON = 10, 35, 58
#: the decimal exponents the table covers: ``w * 10**q`` is zero below, infinite above
_Q_MIN, _Q_MAX = -342, 308


def _powers_of_five():
    """``5**q`` for ``q`` in ``[-342, 308]``, normalised to 128 bits (the top bit set): the
    truncated value for ``q >= 0``, ``floor(2**b / 5**-q) + 1`` for ``q < 0`` (fast_float's
    table, ``script/table_generation.py``); the high and the low 64 bits."""
    hi, lo = np.empty(651, np.uint64), np.empty(651, np.uint64)
    for k, q in enumerate(range(_Q_MIN, _Q_MAX + 1)):
        if q < 0:
            p5 = 5 ** -q
            z = p5.bit_length()             # the least z with 2**z >= 5**-q (never a power of 2)
            c = (1 << (z + 127 if q >= -27 else 2 * z + 128)) // p5 + 1
            c >>= max(c.bit_length() - 128, 0)
        else:
            c = 5 ** q
            c = c << (128 - c.bit_length()) if c.bit_length() < 128 else c >> (c.bit_length() - 128)
        hi[k], lo[k] = c >> 64, c & ((1 << 64) - 1)
    return hi, lo


_P5_HI, _P5_LO = _powers_of_five()


@njit(cache=True, inline="always")
def _space(c):
    # bytes.split()'s whitespace: space, \t, \n, \r, \v, \f
    return c == 32 or (9 <= c <= 13)


@njit(cache=True, inline="always")
def _mul128(a, b):
    """The high and low 64 bits of the product of two ``uint64``."""
    m32, s32 = np.uint64(0xFFFFFFFF), np.uint64(32)
    a0, a1, b0, b1 = a & m32, a >> s32, b & m32, b >> s32
    t = a1 * b0 + ((a0 * b0) >> s32)
    u = (t & m32) + a0 * b1
    return a1 * b1 + (t >> s32) + (u >> s32), a * b


@njit(cache=True)
def _eisel_lemire(w, q):
    """The double nearest ``w * 10**q`` (ties to even) for a ``uint64`` ``w > 0``: fast_float's
    ``compute_float<binary64>``, whose 128-bit product of ``w`` and ``5**q`` always suffices."""
    if q < _Q_MIN:
        return 0.0
    if q > _Q_MAX:
        return np.inf
    one = np.uint64(1)
    lz = 0                              # leading zeros of w, w shifted to set its top bit
    for s in (32, 16, 8, 4, 2, 1):
        if w < (one << np.uint64(64 - s)):
            w <<= np.uint64(s)
            lz += s
    k = q - _Q_MIN
    hi, lo = _mul128(w, _P5_HI[k])
    mask = np.uint64(0xFFFFFFFFFFFFFFFF) >> np.uint64(55)       # 52 mantissa bits + 3
    if (hi & mask) == mask:             # the low word of 5**q may carry into the high bits
        hi2, _ = _mul128(w, _P5_LO[k])
        lo = lo + hi2
        if hi2 > lo:
            hi += one
    upper = int(hi >> np.uint64(63))
    shift = np.uint64(upper + 64 - 55)
    mant = hi >> shift
    power2 = (((152170 + 65536) * q) >> 16) + 63 + upper - lz + 1023
    if power2 <= 0:                     # subnormal (or zero)
        if -power2 + 1 >= 64:
            return 0.0
        mant >>= np.uint64(-power2 + 1)
        mant += mant & one
        mant >>= one
        return math.ldexp(float(mant), -1074)
    if lo <= one and -4 <= q <= 23 and (mant & np.uint64(3)) == one \
            and (mant << shift) == hi:  # exactly halfway: round to even
        mant &= ~one
    mant += mant & one
    mant >>= one
    if mant >= (np.uint64(2) << np.uint64(52)):
        mant = one << np.uint64(52)
        power2 += 1
    if power2 >= 0x7FF:
        return np.inf
    return math.ldexp(float(mant | (one << np.uint64(52))), power2 - 1075)


@njit(cache=True)
def _chunk(buf, a, b, mode, row, nz, hard, data, indices, indptr, labels, hard_at, out):
    """Parse the lines starting in ``buf[a:b]``; ``out``: rows, values, hard numbers, status,
    largest index. ``mode`` 1 stores the rows and values from ``row``/``nz`` on (a hard number
    as 0), ``mode`` 2 the hard numbers' byte ranges and destinations from ``hard`` on."""
    n = buf.shape[0]
    r0, z0, h0 = row, nz, hard
    max_idx = -1
    idx = 0
    i = a
    while i < b:
        c = buf[i]
        if _space(c) and c != _NL:
            i += 1
            continue
        if c == _NL:
            i += 1
            continue
        if c == _HASH:
            while i < n and buf[i] != _NL:
                i += 1
            continue
        # a line with a label: the label, then an optional qid term, then index:value terms
        field = 0          # 0: the label, 1: the first term, 2: later terms
        prev = -1
        while True:
            while i < n and _space(buf[i]) and buf[i] != _NL:
                i += 1
            if i >= n or buf[i] == _NL or buf[i] == _HASH:
                break
            if field == 1 and buf[i] == 113 and i + 2 < n and buf[i + 1] == 105 and buf[i + 2] == 100:
                colon = False               # qid...:...: skipped (its value is never read)
                while i < n and not _space(buf[i]) and buf[i] != _HASH:
                    if buf[i] == 0:
                        out[3] = 1
                        return
                    colon = colon or buf[i] == _COLON
                    i += 1
                if not colon:
                    out[3] = 1
                    return
                field = 2
                continue
            if field > 0:
                idx = 0
                start = i
                while i < n and 48 <= buf[i] <= 57:
                    idx = idx * 10 + (buf[i] - 48)
                    if idx > _INT32_MAX:
                        out[3] = 1
                        return
                    i += 1
                if i == start or i >= n or buf[i] != _COLON or idx <= prev:
                    out[3] = 1
                    return
                prev = idx
                max_idx = max(max_idx, idx)
                i += 1
            # a number: [+-]digits[.digits][(e|E)[+-]digits], else hard
            start = i
            neg = False
            if i < n and (buf[i] == 43 or buf[i] == 45):
                neg = buf[i] == 45
                i += 1
            m = np.uint64(0)
            sig = 0             # significant digits (leading zeros skipped)
            digits = 0
            frac = 0
            cut = False         # a nonzero digit beyond the 19th
            while i < n and 48 <= buf[i] <= 57:
                d = buf[i] - 48
                if sig > 0 or d != 0:
                    sig += 1
                    if sig <= 19:
                        m = m * np.uint64(10) + np.uint64(d)
                    else:
                        cut = cut or d != 0
                digits += 1
                i += 1
            if i < n and buf[i] == 46:
                i += 1
                while i < n and 48 <= buf[i] <= 57:
                    d = buf[i] - 48
                    if sig > 0 or d != 0:
                        sig += 1
                        if sig <= 19:
                            m = m * np.uint64(10) + np.uint64(d)
                        else:
                            cut = cut or d != 0
                    digits += 1
                    frac += 1
                    i += 1
            ok = digits > 0
            e = 0
            if ok and i < n and (buf[i] == 101 or buf[i] == 69):
                i += 1
                eneg = False
                if i < n and (buf[i] == 43 or buf[i] == 45):
                    eneg = buf[i] == 45
                    i += 1
                ed = 0
                while i < n and 48 <= buf[i] <= 57:
                    if e < 100000:
                        e = e * 10 + (buf[i] - 48)
                    else:
                        ed = -(1 << 62)     # an exponent too long to hold: Python's float
                    ed += 1
                    i += 1
                ok = ed > 0
                if eneg:
                    e = -e
            e -= frac
            if i < n and not _space(buf[i]) and buf[i] != _HASH:
                ok = False
            value = 0.0
            if ok:
                if sig == 0:
                    value = 0.0
                elif sig <= 19 and m < np.uint64(_TWO53) and -22 <= e <= 22:
                    if e >= 0:
                        value = float(m) * _POW10[e]
                    else:
                        value = float(m) / _POW10[-e]
                else:
                    e += max(sig - 19, 0)   # m: the first 19 digits
                    value = _eisel_lemire(m, e)
                    if cut and _eisel_lemire(m + np.uint64(1), e) != value:
                        ok = False
                if neg:
                    value = -value
            while i < n and not _space(buf[i]) and buf[i] != _HASH:
                i += 1
            if not ok:
                if mode == 2:
                    hard_at[hard, 0] = start
                    hard_at[hard, 1] = i
                    hard_at[hard, 2] = nz if field > 0 else -1 - row
                hard += 1
            if field == 0:
                if mode == 1:
                    labels[row] = value
                field = 1
            else:
                if mode == 1:
                    data[nz] = value
                    indices[nz] = idx
                nz += 1
                field = 2
        if i < n and buf[i] == _HASH:
            while i < n and buf[i] != _NL:
                i += 1
        row += 1
        if mode == 1:
            indptr[row] = nz
    out[0] = row - r0
    out[1] = nz - z0
    out[2] = hard - h0
    out[4] = max_idx


@njit(cache=True)
def _line_start(buf, p, lo):
    """The first line start at or after ``p`` (``lo``: where the text begins)."""
    if p <= lo:
        return lo
    n = buf.shape[0]
    while p < n and buf[p - 1] != _NL:
        p += 1
    return p


@njit(cache=True, parallel=True)
def bound_chunks(buf, lo, step, counts):
    """Upper bounds of each chunk's rows (its lines) and values (its ``:``) into
    ``counts[c, 5:7]``."""
    n = buf.shape[0]
    for c in prange(counts.shape[0]):
        a = _line_start(buf, min(lo + c * step, n), lo)
        b = _line_start(buf, min(lo + (c + 1) * step, n), lo)
        lines, colons = 0, 0
        for i in range(a, b):
            lines += buf[i] == _NL
            colons += buf[i] == _COLON
        if a < b and buf[b - 1] != _NL:
            lines += 1
        counts[c, 5] = lines
        counts[c, 6] = colons


@njit(cache=True, parallel=True)
def parse_chunks(buf, lo, step, c0, c1, mode, counts, data, indices, indptr, labels, hard_at):
    """Chunks ``c0 .. c1 - 1`` (chunk ``c``: the lines starting in ``[lo + c*step, lo +
    (c+1)*step)``) in parallel (:func:`_chunk`'s ``mode``, from the offsets in
    ``counts[c, 5:8]``; the counts into ``counts[c, :5]``: rows, values, hard numbers, status,
    largest index). ``mode`` 2 skips the chunks without a hard number."""
    n = buf.shape[0]
    for c in prange(c0, c1):
        if mode == 2 and counts[c, 2] == 0:
            continue
        a = _line_start(buf, min(lo + c * step, n), lo)
        b = _line_start(buf, min(lo + (c + 1) * step, n), lo)
        _chunk(buf, a, b, mode, counts[c, 5], counts[c, 6], counts[c, 7], data, indices, indptr,
               labels, hard_at, counts[c, :5])
