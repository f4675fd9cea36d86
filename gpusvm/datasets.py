"""Data loading: svmlight/LIBSVM files, row normalisation and the shipped a9a data set.

``load_svmlight`` reads large files on every core (``_svmlight_nb``: the same matrix as
scikit-learn's parser, bit for bit) and small ones with scikit-learn's parser, and adds what it
lacks: CSR with int32 ``indices``/``indptr``, and parse errors that name the file and the line.
``save_binary``/``load_binary`` keep a read set as raw CSR arrays, reopened memory-mapped
(``gpusvm convert``; ``load_svmlight`` recognises such a file too). ``load_a9a`` reads
the copy of LIBSVM's a9a (UCI Adult) shipped inside the package, so examples and the
``gpusvm demo`` command need no download.  ``make_sparse_classification`` generates large
text-like sets (:mod:`gpusvm._generate`).
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import os
import sys
import warnings
from importlib import resources

import numpy as np
import scipy.sparse as sp
from sklearn.datasets import load_svmlight_file

from ._binary import (BINARY_MAGIC, BINARY_VERSION, _is_binary,  # noqa: F401  (the binary form)
                      _open_binary, _to_int32_csr, load_binary, save_binary)
from ._generate import make_sparse_classification, zipf_column_probabilities

__all__ = ["load_svmlight", "save_binary", "load_binary", "normalize_rows", "load_a9a",
           "read_20newsgroups_tar", "A9A_N_FEATURES", "make_sparse_classification",
           "zipf_column_probabilities"]

#: number of features of a9a (the test file uses only 122 of them)
A9A_N_FEATURES = 123

#: sha256 of the uncompressed shipped files (see gpusvm/data/PROVENANCE.txt)
A9A_SHA256 = {"train": "f5d5ffd8d865ff41328e7ee043e4b020816914ff6843ff15b98905ddbedce906",
              "test": "1f448a153f0320399a7e40836eb207655b0bde0f21fc941cc472193daa9f5de9"}
_A9A_FILES = {"train": "a9a.gz", "test": "a9a.t.gz"}

_INT32_MAX = np.iinfo(np.int32).max

#: without an explicit ``n_features``, a file may make at most this many columns ...
FREE_COLUMNS = 1 << 25
#: ... or this many per stored value (row or nonzero): an index alone never makes every model
#: allocate gigabytes (one stray index 2e9 in a 40-byte file would ask 16 GB per weight vector)
COLUMNS_PER_VALUE = 16


def load_svmlight(path, n_features=None, dtype=np.float32, *, zero_based="auto",
                  return_zero_based=False, finite=True, progress=None):
    """Read a svmlight/LIBSVM file (plain or gzip/bz2-compressed) into CSR.

    Files of :data:`PARALLEL_MIN_BYTES` or more are parsed by a compiled reader on every core
    (numba's threads: ``numba.set_num_threads`` limits them), in chunks cut at line starts;
    the matrix is the same, bit for bit, as scikit-learn's ``load_svmlight_file`` gives (every
    number rounds as Python's ``float`` does), and a line it does not take sends the file to
    the one-core reader, whose errors name the line. ``.gz`` and ``.bz2`` files are
    decompressed on one core first.

    A binary data file written by :func:`save_binary` (``gpusvm convert``) is recognised by
    its first bytes and opened memory-mapped (:func:`load_binary`) instead, with the same
    checks as text (``n_features``, the base, the width, ``finite``): opening it takes a
    fraction of a second at any size, and ``finite=True`` one vectorised pass over the
    values. The matrix maps the file: truncating it in place while the matrix is in use kills
    the process (see :func:`load_binary`).

    Parameters
    ----------
    path : str or os.PathLike
        File to read; ``.gz`` and ``.bz2`` files are decompressed on the fly, and a UTF-8
        byte-order mark at the start (some Windows editors write one) is skipped.
    n_features : int or None, default=None
        Number of columns; ``None`` takes the largest index in the file. Pass the training
        set's count for a test set, which may not use the last features (a9a's test file
        uses 122 of its 123).
    dtype : {numpy.float32, numpy.float64}, default=numpy.float32
        Type of the values.
    zero_based : bool or "auto", default="auto"
        Whether indices start at 0 (``False``: LIBSVM's one-based indices, and an index 0 is
        an error naming its line). ``"auto"``: one-based unless an index 0 occurs; then the
        file is read as zero-based with a ``UserWarning`` naming the first such line (a
        stray ``0:`` in a one-based file would otherwise shift every column, silently).
    return_zero_based : bool, default=False
        Also return the base used (record it with a model; read the test data with it).
    finite : bool, default=True
        Refuse NaN and infinite values and labels (and values that overflow ``dtype``),
        naming the first such line: no gpusvm estimator accepts them. ``False`` loads them
        as they are (e.g. for an imputer).
    progress : bool or None, default=None
        A progress bar (tqdm, on stderr) while reading; ``None`` shows one for files of
        :data:`PROGRESS_MIN_BYTES` or more when stderr is a terminal.

    Returns
    -------
    X : scipy.sparse.csr_matrix of shape (n_samples, n_features)
        Sorted, duplicate-free CSR; ``indices`` and ``indptr`` are int32 whenever ``nnz``
        and ``n_features`` fit in int32, int64 otherwise.
    y : ndarray of float64, shape (n_samples,)
        The labels exactly as written in the file (no remapping).
    zero_based : bool
        Only with ``return_zero_based=True``: whether the file was read as zero-based.

    Raises
    ------
    FileNotFoundError
        When ``path`` does not exist.
    ValueError
        When the file is malformed (the message names the file and the first bad line),
        holds no example, uses more than ``n_features`` features, holds an index 0 with
        ``zero_based=False``, or (with ``finite=True``) a NaN or infinite value or label.

    Warns
    -----
    UserWarning
        With ``zero_based="auto"``, when an index 0 makes the file zero-based.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"svmlight file not found: {path}")
    if os.path.isdir(path):
        raise ValueError(f"{path} is a directory; pass the path of a svmlight/LIBSVM file")
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"dtype must be float32 or float64, got {dtype}")
    if n_features is not None:
        if isinstance(n_features, bool) or not isinstance(n_features, (int, np.integer)) or n_features < 1:
            raise ValueError(f"n_features must be a positive integer or None, got {n_features!r}")
        n_features = int(n_features)
    if not (zero_based is True or zero_based is False or zero_based == "auto"):
        raise ValueError(f"zero_based must be True, False or 'auto', got {zero_based!r}")
    if _is_binary(path):
        return _load_binary_as(path, n_features, dtype, zero_based, return_zero_based, finite)
    # the raw indices, whatever the base: the base is decided below, from the whole file
    read = _read_compiled(path, dtype, min_bytes=PARALLEL_MIN_BYTES, chunk_bytes=CHUNK_BYTES,
                          progress=progress)
    X, y = read if read is not None else _read_sklearn(path, dtype, n_features, zero_based)
    if X.shape[0] == 0:
        raise ValueError(f"{path}: no examples found (the file is empty or holds only comments)")
    if finite and not (np.all(np.isfinite(X.data)) and np.all(np.isfinite(y))):
        raise ValueError(_non_finite_error(path, dtype))
    X = X.tocsr()
    has_zero = X.nnz > 0 and int(X.indices.min()) == 0
    if zero_based is False and has_zero:
        raise ValueError(_locate_error(path, None, n_features, False))
    if zero_based == "auto":
        if has_zero:
            line = next((line for line, idx in _index_terms(path) if idx == 0), "?")
            warnings.warn(
                f"{path}: index 0 occurs (first on line {line}), so the whole file is read as "
                "zero-based; if it is a one-based (LIBSVM) file, that line is an error and every "
                "column would shift by one: pass zero_based=False to refuse index 0, or "
                "zero_based=True to read the file as zero-based without this warning",
                UserWarning, stacklevel=2)
        zero_based = has_zero
    n_cols = X.shape[1] if zero_based else max(X.shape[1] - 1, 0)
    if n_features is not None and n_cols > n_features:
        raise ValueError(_locate_error(path, None, n_features, zero_based))
    if n_features is None and n_cols > max(FREE_COLUMNS, COLUMNS_PER_VALUE * (X.nnz + X.shape[0])):
        line, index = max(_index_terms(path), key=lambda term: term[1], default=(0, -1))
        raise ValueError(
            f"{path}, line {line}: feature index {index} makes the data {n_cols} columns wide "
            f"for {X.shape[0]} rows and {X.nnz} nonzeros (a weight vector alone would take "
            f"{8 * n_cols / 2**30:.1f} GiB); if the data really has that many features, pass "
            "n_features explicitly")
    indices = X.indices if zero_based else X.indices - 1
    X = sp.csr_matrix((X.data, indices, X.indptr),
                      shape=(X.shape[0], n_cols if n_features is None else n_features))
    X = _to_int32_csr(X)
    return (X, y, bool(zero_based)) if return_zero_based else (X, y)


#: files of at least this many bytes (decompressed: 4x a compressed file's size) are parsed by
#: the compiled reader on every core; smaller ones by scikit-learn's parser, faster there in a
#: fresh process, where numba's import and the loading of the compiled code (about a second
#: together) are not yet paid (``benchmarks/bench_read.py --small`` measures the crossing)
PARALLEL_MIN_BYTES = 32 << 20
#: the compiled reader's chunks: each thread parses the lines starting in one at a time
CHUNK_BYTES = 4 << 20
#: ``progress=None`` shows a bar for files of at least this many bytes (on a terminal): the
#: bytes read, then counted, then parsed
PROGRESS_MIN_BYTES = 256 << 20
#: the compiled reader leaves a file to scikit-learn's parser when more than this fraction of its
#: numbers need Python's ``float`` (inf, nan, underscores; beyond 19 significant digits, a value
#: that the first 19 digits leave undecided): both then parse them alike
HARD_FRACTION = 0.5
_BLOCK = 16 << 20


def _read_sklearn(path, dtype, n_features, zero_based):
    """``(X, y)`` by scikit-learn's parser (the raw indices), or the error naming the line."""
    try:
        with _open_text(path) as f:
            return load_svmlight_file(f, dtype=dtype, zero_based=True)
    except (PermissionError, FileNotFoundError, IsADirectoryError):
        raise                           # the file cannot be opened: its own message says why
    except (ValueError, OverflowError, UnicodeDecodeError, EOFError, OSError) as exc:
        raise ValueError(_locate_error(path, exc, n_features, zero_based)) from None


def _progress_bar(path, total, progress):
    if progress is None:
        progress = total >= PROGRESS_MIN_BYTES and sys.stderr.isatty()
    if not progress:
        return None
    from tqdm.auto import tqdm
    return tqdm(total=total, unit="B", unit_scale=True, desc=f"reading {os.path.basename(path)}")


def _read_compiled(path, dtype, *, min_bytes, chunk_bytes, progress=None,
                   hard_fraction=HARD_FRACTION):
    """``(X, y)`` as :func:`_read_sklearn` gives them (raw indices, the same values bit for
    bit), parsed on every core; ``None`` when the file is smaller than ``min_bytes``, cannot be
    read, holds a line the compiled grammar does not take (the caller then reads it by
    scikit-learn's parser, which names the bad line), or more than ``hard_fraction`` of its
    numbers are ones Python's ``float`` must parse (the compiled path gains nothing there)."""
    compressed = path.endswith((".gz", ".bz2"))
    size = os.path.getsize(path) * (4 if compressed else 1)
    if size < min_bytes:
        return None
    bar = _progress_bar(path, 3 * size, progress)
    try:
        return _parse_compiled(path, dtype, chunk_bytes, bar, hard_fraction)
    finally:
        if bar is not None:
            bar.close()


def _parse_compiled(path, dtype, chunk_bytes, bar, hard_fraction):
    try:
        with _open_text(path) as f:
            # a plain file straight into one buffer of its size; a compressed one by blocks
            raw = bytearray(0 if path.endswith((".gz", ".bz2")) else
                            max(os.fstat(f.fileno()).st_size - f.tell(), 0))
            view, filled = memoryview(raw), 0
            while filled < len(raw):
                got = f.readinto(view[filled:filled + _BLOCK])
                if not got:
                    break
                filled += got
                if bar is not None:
                    bar.update(got)
            view.release()
            del raw[filled:]
            while True:                 # compressed data, or a file that grew meanwhile
                block = f.read(_BLOCK)
                if not block:
                    break
                raw += block
                if bar is not None:
                    bar.update(len(block))
    except (OSError, EOFError):
        return None                     # scikit-learn's path names the damage
    from numba import get_num_threads

    from . import _svmlight_nb as nb

    buf = np.frombuffer(raw, dtype=np.uint8)
    n = buf.size
    if bar is not None:                 # the decompressed size is known now
        bar.total = bar.n + 2 * n     # then the parse, counted twice (two passes before)
        bar.refresh()
    chunk_bytes = max(1, int(chunk_bytes))
    n_chunks = max(1, -(-n // chunk_bytes))
    counts = np.zeros((n_chunks, 8), dtype=np.int64)
    nb.bound_chunks(buf, 0, chunk_bytes, counts)      # rows and values at most, per chunk
    ub_rows, ub_nnz = int(counts[:, 5].sum()), int(counts[:, 6].sum())
    ub_start = _starts(counts[:, 5:7])
    counts[:, 5:7] = ub_start
    data, indices = np.empty(ub_nnz, dtype), np.empty(ub_nnz, np.int32)
    indptr = np.zeros(ub_rows + 1, np.int32 if ub_nnz <= _INT32_MAX else np.int64)
    labels, hard_at = np.empty(ub_rows), np.empty((0, 3), np.int64)
    group = n_chunks if bar is None else max(1, 4 * get_num_threads())
    for c0 in range(0, n_chunks, group):
        c1 = min(c0 + group, n_chunks)
        nb.parse_chunks(buf, 0, chunk_bytes, c0, c1, 1, counts, data, indices, indptr, labels,
                        hard_at)
        if bar is not None:
            bar.update(2 * (min(c1 * chunk_bytes, n) - min(c0 * chunk_bytes, n)))
    rows, nnz, hard = (int(v) for v in counts[:, :3].sum(axis=0))
    if counts[:, 3].any() or hard > hard_fraction * (rows + nnz):
        return None                     # a line to name, or numbers Python must parse anyway
    start = _starts(counts[:, :3])
    for c in np.flatnonzero((start[:, :2] != ub_start).any(axis=1) & (counts[:, 0] > 0)):
        (r, z), (ur, uz), (k, m) = start[c, :2], ub_start[c], counts[c, :2]
        data[z:z + m] = data[uz:uz + m]         # leftwards, in chunk order: nothing unread is hit
        indices[z:z + m] = indices[uz:uz + m]
        labels[r:r + k] = labels[ur:ur + k]
        indptr[r + 1:r + 1 + k] = indptr[ur + 1:ur + 1 + k] - (uz - z)
    data, indices, indptr, labels = data[:nnz], indices[:nnz], indptr[:rows + 1], labels[:rows]
    if nnz < 0.9 * ub_nnz:
        data, indices = data.copy(), indices.copy()
    if indptr.dtype != np.int32 and nnz <= _INT32_MAX:
        indptr = indptr.astype(np.int32)
    if hard:                            # where the hard numbers are: their chunks parsed again
        counts[:, 5:8] = start
        hard_at = np.empty((hard, 3), np.int64)
        nb.parse_chunks(buf, 0, chunk_bytes, 0, n_chunks, 2, counts, data, indices, indptr,
                        labels, hard_at)
    for a in range(0, hard, _BLOCK >> 4):     # the numbers the fast path does not round exactly
        part = hard_at[a:a + (_BLOCK >> 4)]
        try:
            values = np.array([float(raw[s:e]) for s, e, _ in part.tolist()])
        except ValueError:
            return None
        dst = part[:, 2]
        is_label = dst < 0
        labels[-1 - dst[is_label]] = values[is_label]
        with np.errstate(over="ignore"):
            data[dst[~is_label]] = values[~is_label].astype(dtype)
    n_cols = max(int(counts[:, 4].max()), 0) + 1
    return sp.csr_matrix((data, indices, indptr), shape=(rows, n_cols)), labels


def _starts(sizes):
    """Exclusive prefix sums down the columns of ``sizes`` (int64)."""
    out = np.zeros_like(sizes)
    np.cumsum(sizes[:-1], axis=0, out=out[1:])
    return out


def _index_terms(path):
    """``(line number, feature index)`` of every term of ``path``, in order (``qid:`` skipped)."""
    with _open_text(path) as f:
        for lineno, raw in enumerate(f, start=1):
            for tok in raw.split(b"#", 1)[0].split()[1:]:
                try:
                    yield lineno, int(tok.split(b":", 1)[0])
                except ValueError:          # a qid:... term
                    continue


#: the UTF-8 byte-order mark some Windows editors write at the start of a text file
_BOM = b"\xef\xbb\xbf"


def _open_text(path):
    """Binary file object of a possibly compressed file (as scikit-learn opens it), positioned
    after a UTF-8 byte-order mark when the file starts with one."""
    opener = gzip.open if path.endswith(".gz") else bz2.open if path.endswith(".bz2") else open
    f = opener(path, "rb")
    try:
        if f.read(len(_BOM)) != _BOM:
            f.seek(0)
    except BaseException:
        f.close()
        raise
    return f


_NON_FINITE_ADVICE = "remove or impute the missing values first (pass finite=False to load them)"


def _non_finite_error(path, dtype):
    """The message for a NaN, an infinity, or a value that overflows ``dtype``: its line."""
    with _open_text(path) as f:
        for lineno, raw in enumerate(f, start=1):
            parts = raw.split(b"#", 1)[0].decode("ascii", "replace").split()
            if not parts:
                continue
            if not np.isfinite(float(parts[0])):
                return f"{path}, line {lineno}: label {parts[0]!r} is not finite; {_NON_FINITE_ADVICE}"
            for k, tok in enumerate(parts[1:]):
                if k == 0 and tok.startswith("qid"):    # a query id: its value is not read
                    continue
                idx_s, _, val_s = tok.partition(":")
                value = float(val_s)
                if not np.isfinite(value):
                    return (f"{path}, line {lineno}: feature value {val_s!r} in {tok!r} is not "
                            f"finite; {_NON_FINITE_ADVICE}")
                with np.errstate(over="ignore"):
                    if not np.isfinite(dtype.type(value)):
                        return (f"{path}, line {lineno}: feature value {val_s!r} in {tok!r} "
                                f"overflows {dtype.name}; scale the data, or read it with "
                                "dtype=numpy.float64")
    return f"{path}: the data holds NaN or infinite values; {_NON_FINITE_ADVICE}"


def _locate_error(path, exc, n_features, zero_based, *, limit=None):
    """Re-scan ``path`` line by line with the rules of scikit-learn's parser.

    Returns an error message naming the file and the first bad line; falls back to the
    parser's own message when no single line is at fault. ``limit`` replaces the advice about
    ``n_features`` for an index beyond it (e.g. "the model was trained on 12 features").
    """
    reason = (str(exc) or type(exc).__name__) if exc is not None else "inconsistent data"
    max_index, max_line, lineno = -1, 0, 0
    has_zero = False
    try:
        with _open_text(path) as f:
            for lineno, raw in enumerate(f, start=1):
                bad = _check_line(raw, zero_based)
                if isinstance(bad, str):
                    return f"{path}, line {lineno}: {bad}"
                line_max, line_zero = bad
                has_zero = has_zero or line_zero
                if line_max > max_index:
                    max_index, max_line = line_max, lineno
    except (OSError, EOFError, gzip.BadGzipFile) as read_exc:
        where = f", after line {lineno}" if lineno else ""
        return (f"{path}{where}: cannot be read as a (compressed) svmlight file ({read_exc}); "
                "the file may be truncated or corrupted")
    if n_features is not None and max_index >= 0:
        one_based = zero_based is False or (zero_based == "auto" and not has_zero)
        needed = max_index if one_based else max_index + 1
        if needed > n_features:
            advice = limit or (f"n_features={n_features}; pass n_features >= {needed} "
                               "(or the training set's n_features)")
            return (f"{path}, line {max_line}: feature index {max_index} needs {needed} features "
                    f"but {advice}")
    return f"{path}: malformed svmlight/LIBSVM data ({reason})"


def _check_line(raw: bytes, zero_based):
    """Validate one line like scikit-learn's parser: an error string, or ``(largest index,
    whether index 0 occurs)``."""
    try:
        line = raw.split(b"#", 1)[0].decode("ascii")
    except UnicodeDecodeError:
        return "not ASCII text (is this a binary or compressed file without a .gz/.bz2 suffix?)"
    parts = line.split()
    if not parts:
        return (-1, False)
    target, features = parts[0], parts[1:]
    try:
        float(target)
    except ValueError:
        return f"label {target!r} is not a number"
    if features and features[0].startswith("qid"):   # a query id (ignored) may follow the label
        if ":" not in features[0]:                     # (scikit-learn's test: the prefix "qid")
            return f"term {features[0]!r} is not of the form qid:value"
        features = features[1:]
    prev, has_zero = -1, False
    for tok in features:
        if ":" not in tok:
            return f"term {tok!r} is not of the form index:value"
        idx_s, val_s = tok.split(":", 1)
        try:
            idx = int(idx_s)
        except ValueError:
            return f"feature index {idx_s!r} in {tok!r} is not an integer"
        try:
            float(val_s)
        except ValueError:
            return f"feature value {val_s!r} in {tok!r} is not a number"
        if idx < 0:
            return f"invalid feature index {idx} in {tok!r}"
        if zero_based is False and idx == 0:
            return (f"feature index 0 in {tok!r}, but the file is read as one-based (LIBSVM: "
                    "indices start at 1); pass zero_based=True if the file is zero-based")
        if idx > _INT32_MAX:
            return f"feature index {idx} in {tok!r} is too large (the largest is {_INT32_MAX})"
        if idx <= prev:
            return (f"feature indices must be sorted and unique, but {idx} follows {prev}")
        has_zero = has_zero or idx == 0
        prev = idx
    return (prev, has_zero)


def _load_binary_as(path, n_features, dtype, zero_based, return_zero_based, finite):
    """:func:`load_svmlight`'s arguments and checks applied to a binary data file."""
    X, y, stored_base = _open_binary(path)
    if X.shape[0] == 0:
        raise ValueError(f"{path}: no examples found (the binary data file holds no rows)")
    if zero_based != "auto" and bool(zero_based) != stored_base:
        base = "zero-based" if stored_base else "one-based"
        raise ValueError(f"{path} was converted from a {base} svmlight file, but zero_based="
                         f"{zero_based} was asked; convert the text again with the base wanted")
    n, d = X.shape
    if n_features is not None:
        if n_features < d:
            raise ValueError(f"{path}: the data has {d} features but n_features="
                             f"{n_features}; pass n_features >= {d} (or the training "
                             "set's n_features)")
        X = sp.csr_matrix((X.data, X.indices, X.indptr), shape=(n, n_features))
    elif d > max(FREE_COLUMNS, COLUMNS_PER_VALUE * (X.nnz + n)):
        raise ValueError(
            f"{path}: the data is {d} columns wide for {n} rows and {X.nnz} nonzeros (a weight "
            f"vector alone would take {8 * d / 2**30:.1f} GiB); if the data really has that "
            "many features, pass n_features explicitly")
    stored = X.data
    if X.dtype != dtype:
        with np.errstate(over="ignore"):
            X = sp.csr_matrix((stored.astype(dtype), X.indices, X.indptr), shape=X.shape)
    if finite:
        _check_binary_finite(path, stored, X, y, 0 if stored_base else 1)
    return (X, y, stored_base) if return_zero_based else (X, y)


def _check_binary_finite(path, stored, X, y, base, block=1 << 24):
    """:func:`load_svmlight`'s ``finite=True`` on a binary file: every label and value (as
    stored and as read) finite, or the error naming the first bad one; blocks of ``block``."""
    bad = np.flatnonzero(~np.isfinite(y))
    if bad.size:
        r = int(bad[0])
        raise ValueError(f"{path}: the label of row {r} (counting from 0), {float(y[r])!r}, is "
                         f"not finite; {_NON_FINITE_ADVICE}")
    for a in range(0, X.nnz, block):
        bad = np.flatnonzero(~np.isfinite(X.data[a:a + block]))
        if not bad.size:
            continue
        k = a + int(bad[0])
        row = int(np.searchsorted(X.indptr, k, side="right")) - 1
        where = f"row {row} (counting from 0), feature index {int(X.indices[k]) + base}"
        if np.isfinite(stored[k]):
            raise ValueError(f"{path}: the value {float(stored[k])!r} of {where} overflows "
                             f"{X.dtype.name}; scale the data, or read it with "
                             "dtype=numpy.float64")
        raise ValueError(f"{path}: the value {float(stored[k])!r} of {where} is not finite; "
                         f"{_NON_FINITE_ADVICE}")


def normalize_rows(X, max_norm=1.0, *, mode="all"):
    """Scale the rows of ``X`` so that no row has L2 norm above ``max_norm``.

    The convergence analysis of mini-batch Pegasos and SDCA (Takáč et al. 2013) assumes
    ``max_i ||x_i|| <= 1``; text features are usually unit rows already, while e.g. a9a's
    rows have norm 3.3 to 3.7.

    Parameters
    ----------
    X : {ndarray, scipy.sparse matrix} of shape (n_samples, n_features)
        Data; not modified.
    max_norm : float, default=1.0
        Target norm, ``> 0``.
    mode : {"all", "above"}, default="all"
        ``"all"``: every nonzero row is scaled to norm exactly ``max_norm`` (the usual L2
        normalisation); ``"above"``: only rows longer than ``max_norm`` are scaled down to it.

    Returns
    -------
    X_scaled : same type, shape and dtype as ``X`` (CSR for sparse input)
        A new matrix; all-zero rows stay zero.
    """
    if not (isinstance(max_norm, (int, float, np.floating, np.integer))
            and not isinstance(max_norm, bool) and np.isfinite(max_norm) and max_norm > 0):
        raise ValueError(f"max_norm must be a finite number > 0, got {max_norm!r}")
    if mode not in ("all", "above"):
        raise ValueError(f"mode must be 'all' or 'above', got {mode!r}")
    X = sp.csr_matrix(X, copy=True) if sp.issparse(X) else np.array(X, copy=True)
    if X.dtype.kind != "f":
        X = X.astype(np.float64)
    if sp.issparse(X):
        data = X.data.astype(np.float64)
        norms = np.sqrt(np.add.reduceat(data * data, X.indptr[:-1]) if X.nnz else np.zeros(X.shape[0]))
        norms[np.diff(X.indptr) == 0] = 0.0        # reduceat gives garbage for empty rows
    else:
        if X.ndim != 2:
            raise ValueError(f"X must be 2-dimensional, got an array of shape {X.shape}")
        norms = np.sqrt(np.einsum("ij,ij->i", X.astype(np.float64), X.astype(np.float64)))
    if not np.all(np.isfinite(norms)):
        raise ValueError("X contains NaN or infinity; clean the data before normalising it")
    factor = np.ones_like(norms)
    scaled = norms > 0 if mode == "all" else norms > max_norm
    factor[scaled] = max_norm / norms[scaled]
    if sp.issparse(X):
        X.data = (X.data * np.repeat(factor, np.diff(X.indptr))).astype(X.dtype, copy=False)
        return X
    X *= factor.astype(X.dtype)[:, None]
    return X


def load_a9a(split="train", *, dtype=np.float32):
    """Load the a9a data set (UCI Adult, LIBSVM binarisation) shipped with gpusvm.

    The compressed files live in ``gpusvm/data``; their sha256 is checked on every load. See
    ``gpusvm/data/PROVENANCE.txt`` for sources and licence (UCI Adult, CC BY 4.0).

    Parameters
    ----------
    split : {"train", "test"}, default="train"
        ``"train"``: 32,561 rows (file ``a9a``); ``"test"``: 16,281 rows (``a9a.t``).
    dtype : {numpy.float32, numpy.float64}, default=numpy.float32
        Type of the values.

    Returns
    -------
    X : scipy.sparse.csr_matrix of shape (n_samples, 123)
        Binary features, int32 indices.
    y : ndarray of float64, shape (n_samples,)
        Labels in {-1, +1}.

    Raises
    ------
    ValueError
        For an unknown split, or when the shipped file does not match its recorded checksum
        (a damaged installation: reinstall gpusvm).
    """
    if split not in _A9A_FILES:
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    ref = resources.files("gpusvm").joinpath("data", _A9A_FILES[split])
    with ref.open("rb") as f:
        raw = gzip.decompress(f.read())
    digest = hashlib.sha256(raw).hexdigest()
    if digest != A9A_SHA256[split]:
        raise ValueError(
            f"the shipped a9a {split} file ({ref}) is damaged: sha256 {digest} differs from "
            f"{A9A_SHA256[split]}; reinstall gpusvm")
    X, y = load_svmlight_file(io.BytesIO(raw), n_features=A9A_N_FEATURES, dtype=np.dtype(dtype),
                              zero_based=False)
    return _to_int32_csr(X), y


def read_20newsgroups_tar(path, subset="train"):
    """Read the raw text of 20 Newsgroups ("bydate" split) from its ``.tar.gz`` release.

    The archive holds ``20news-bydate-{train,test}/<group>/<document>``; documents are decoded
    as latin-1 (as scikit-learn's ``fetch_20newsgroups`` does) and returned in the order of
    their groups, then of their file names.

    Parameters
    ----------
    path : str or os.PathLike
        The ``20news-bydate.tar.gz`` file.
    subset : {"train", "test"}, default="train"

    Returns
    -------
    texts : list of str
    labels : ndarray of str
        The newsgroup of every document.
    """
    import tarfile  # noqa: PLC0415

    if subset not in ("train", "test"):
        raise ValueError(f"subset must be 'train' or 'test', got {subset!r}")
    prefix = f"20news-bydate-{subset}/"
    found = []
    with tarfile.open(path, "r:gz") as tar:
        for member in tar:
            name = member.name.lstrip("./")
            if not member.isfile() or not name.startswith(prefix):
                continue
            parts = name[len(prefix):].split("/")
            if len(parts) != 2 or parts[1].startswith("."):
                continue
            text = tar.extractfile(member).read().decode("latin-1")
            found.append((parts[0], parts[1], text))
    if not found:
        raise ValueError(f"{path} holds no documents under {prefix}: not the 20news-bydate release")
    found.sort(key=lambda item: (item[0], item[1]))
    return [t for _, _, t in found], np.array([g for g, _, _ in found])
