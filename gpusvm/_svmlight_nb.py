"""The compiled svmlight parser of :func:`gpusvm.datasets.load_svmlight`: every core over
chunks of the file's bytes cut at line starts.

A light pass bounds each chunk's rows (its newlines) and values (its colons); the parse writes
each chunk at the offsets of the bounds' prefix sums, and the chunks are then moved together
(nothing moves in a file without blank lines, comments or qids), so the result depends on
neither the chunk size nor the number of threads. A chunk holding "hard" numbers is parsed
once more, to record where they are.

A number is parsed here only when the parse is exact: at most 19 significant digits making an
integer ``m < 2**53`` and a decimal exponent ``|e| <= 22``, where ``m * 10**e`` (or
``m / 10**-e``) is one correctly rounded IEEE operation on two exact doubles (Clinger's fast
path), i.e. the double Python's ``float`` returns. Any other number (more digits, a large
exponent, ``inf``, ``nan``, underscores, or no number at all) is "hard": its byte range is
recorded and Python's ``float`` parses it afterwards. A line the fast grammar does not cover
(an index that is not plain digits or does not fit int32, indices not increasing, a term
without ``:``) stops the chunk with status 1, and the caller reads the file the old way, which
accepts or names the line exactly as before.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from gpusvm.backends import _compile_nb  # noqa: F401  (the collector paused, the cache stamped)

#: the exact powers of ten a double holds
_POW10 = np.array([10.0 ** k for k in range(23)])
_TWO53 = 1 << 53
_INT32_MAX = (1 << 31) - 1
_NL, _HASH, _COLON = 10, 35, 58


@njit(cache=True, inline="always")
def _space(c):
    # bytes.split()'s whitespace: space, \t, \n, \r, \v, \f
    return c == 32 or (9 <= c <= 13)


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
            while i < n and 48 <= buf[i] <= 57:
                d = buf[i] - 48
                if sig > 0 or d != 0:
                    sig += 1
                    if sig <= 19:
                        m = m * np.uint64(10) + np.uint64(d)
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
