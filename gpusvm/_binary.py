"""gpusvm's binary data form: a data set's CSR arrays behind a JSON header, memory-mapped.

:func:`save_binary` writes it (``gpusvm convert``), :func:`load_binary` maps it back;
:func:`gpusvm.datasets.load_svmlight` recognises such a file by its first bytes and applies
its own arguments and checks (``datasets._load_binary_as``).
"""

from __future__ import annotations

import json
import os

import numpy as np
import scipy.sparse as sp

__all__ = ["BINARY_MAGIC", "BINARY_VERSION", "save_binary", "load_binary"]

_INT32_MAX = np.iinfo(np.int32).max


def _to_int32_csr(X):
    """Sorted CSR, with int32 index arrays where they fit."""
    X = X.tocsr()
    X.sum_duplicates()
    X.sort_indices()
    if X.nnz <= _INT32_MAX and X.shape[1] <= _INT32_MAX and X.indices.dtype != np.int32:
        X = sp.csr_matrix((X.data, X.indices.astype(np.int32), X.indptr.astype(np.int32)), shape=X.shape)
    return X


#: the first bytes of a binary data file (then a little-endian uint32: the header's length)
BINARY_MAGIC = b"\x93GPUSVM-CSR\n"
#: the version of the binary layout this gpusvm writes and reads
BINARY_VERSION = 1
_ALIGN = 64
_BINARY_ARRAYS = ("data", "indices", "indptr", "y")


def _is_binary(path):
    """Whether ``path`` is a regular file that starts with :data:`BINARY_MAGIC`."""
    if not os.path.isfile(path):
        return False
    try:
        with open(path, "rb") as f:
            return f.read(len(BINARY_MAGIC)) == BINARY_MAGIC
    except OSError:
        return False


def save_binary(path, X, y, *, zero_based=False):
    """Write a data set in gpusvm's binary form: its CSR arrays, to be memory-mapped.

    :func:`load_binary` (and :func:`~gpusvm.datasets.load_svmlight`, ``gpusvm fit``,
    ``select``, ``predict``, which recognise the file by its first bytes) reopens it without
    parsing: the arrays are mapped, not read, so reopening takes a fraction of a second at any
    size. The layout: the bytes of :data:`BINARY_MAGIC`, a little-endian uint32 header length, a JSON header (the
    format version, shape, types, the base of the source file's indices, each array's offset
    and length; a ``finite`` flag, which no reader trusts: ``load_svmlight(finite=True)``
    checks the values), then ``data``, ``indices``, ``indptr`` and ``y`` as raw little-endian
    arrays, each aligned to 64 bytes. ``gpusvm convert`` writes one from a svmlight file.

    Parameters
    ----------
    path : str or os.PathLike
        File to write (``.gsvm`` by convention); a regular file is replaced atomically.
    X : scipy.sparse matrix of shape (n_samples, n_features)
        Float32 or float64 values; stored as sorted, duplicate-free CSR.
    y : array-like of shape (n_samples,)
        Labels, stored as float64.
    zero_based : bool, default=False
        The base of the svmlight file the data came from
        (:func:`~gpusvm.datasets.load_svmlight`'s ``return_zero_based``); stored so that a model trained on it records it.

    Returns
    -------
    path : str
        The path written.
    """
    from ._output import write_output
    path = os.fspath(path)
    if not sp.issparse(X):
        raise ValueError(f"X must be a scipy.sparse matrix, got {type(X).__name__}")
    X = _to_int32_csr(sp.csr_matrix(X))
    if X.dtype not in (np.float32, np.float64):
        raise ValueError(f"X must hold float32 or float64 values, got {X.dtype}")
    y = np.asarray(y, dtype=np.float64)
    if y.shape != (X.shape[0],):
        raise ValueError(f"y must have shape ({X.shape[0]},) to match X, got {y.shape}")
    arrays = {"data": X.data, "indices": X.indices, "indptr": X.indptr, "y": y}
    arrays = {k: np.ascontiguousarray(v, dtype=v.dtype.newbyteorder("<")) for k, v in arrays.items()}
    header = {"version": BINARY_VERSION, "shape": [int(X.shape[0]), int(X.shape[1])],
              "nnz": int(X.nnz), "zero_based": bool(zero_based),
              # kept for earlier gpusvm versions' readers
              "finite": bool(np.all(np.isfinite(X.data)) and np.all(np.isfinite(y))),
              "arrays": {}}

    start = 0
    while True:                         # the arrays start after the header, which names them
        header["arrays"], pos = {}, start
        for name in _BINARY_ARRAYS:
            a = arrays[name]
            header["arrays"][name] = {"dtype": a.dtype.str, "offset": pos, "count": int(a.size)}
            pos = -(-(pos + a.nbytes) // _ALIGN) * _ALIGN
        header["size"] = pos
        text = json.dumps(header, sort_keys=True).encode()
        need = -(-(len(BINARY_MAGIC) + 4 + len(text)) // _ALIGN) * _ALIGN
        if need <= start:
            break
        start = need

    def write(f):
        f.write(BINARY_MAGIC + len(text).to_bytes(4, "little") + text)
        written = len(BINARY_MAGIC) + 4 + len(text)
        for name in _BINARY_ARRAYS:
            at = header["arrays"][name]["offset"]
            f.write(b"\0" * (at - written))
            f.write(memoryview(arrays[name]).cast("B"))
            written = at + arrays[name].nbytes
        f.write(b"\0" * (header["size"] - written))

    return write_output(path, write, what="binary data")


def _binary_error(path, what):
    return ValueError(f"{path}: {what}; write it again with `gpusvm convert` (or "
                      "gpusvm.datasets.save_binary)")


def load_binary(path, *, return_zero_based=False, check=True):
    """Open a data set written by :func:`save_binary` (``gpusvm convert``), memory-mapped.

    The arrays are mapped copy-on-write: nothing is read until it is used, and writing to
    them never changes the file. The file must not be truncated or rewritten in place while
    it is mapped: a page read from beyond its new end kills the process (``SIGBUS``), which no
    check at opening can prevent; :func:`save_binary` and ``gpusvm convert`` replace a file by
    renaming a new one over it, which leaves the mapped old file intact.

    Parameters
    ----------
    path : str or os.PathLike
        The binary data file.
    return_zero_based : bool, default=False
        Also return the base of the svmlight file the data came from.
    check : bool, default=True
        Check every column index (within the shape, increasing along each row): one pass over
        ``indices``. Always checked, whatever ``check``: the header's fields and types, the
        arrays' lengths and offsets against the file's size, and ``indptr`` (from 0 to
        ``nnz``, nondecreasing: one pass over the rows). ``check=False`` saves the pass over
        ``indices`` only for a file known to be intact: a damaged index makes SciPy read and
        write outside its arrays (e.g. ``X.toarray()`` crashes the process), and unsorted
        indices give wrong products. The values are never read at opening (a NaN is found by
        :func:`~gpusvm.datasets.load_svmlight`'s ``finite=True``).

    Returns
    -------
    X : scipy.sparse.csr_matrix of shape (n_samples, n_features)
        Its arrays map the file.
    y : ndarray of float64, shape (n_samples,)
    zero_based : bool
        Only with ``return_zero_based=True``.

    Raises
    ------
    ValueError
        When the file is not gpusvm's binary form, was written by a newer gpusvm (a newer
        format version), is truncated, or its header or arrays are inconsistent (the message
        names the file and the field).
    """
    X, y, zero_based = _open_binary(path, check)
    return (X, y, zero_based) if return_zero_based else (X, y)


#: the types :func:`save_binary` writes, little-endian
_DTYPES = {"data": ("<f4", "<f8"), "indices": ("<i4", "<i8"), "indptr": ("<i4", "<i8"),
           "y": ("<f8",)}
_BIG = 1 << 62


def _shown(value):
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _field(path, header, *keys):
    """``header[keys[0]][keys[1]]...``, or the error naming the missing field."""
    value = header
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            raise _binary_error(path, f"the header has no {'.'.join(keys)} field")
        value = value[key]
    return value


def _count(path, value, name):
    """``value`` when it is an integer in ``[0, 2**62)``, else the error naming the field."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < _BIG:
        raise _binary_error(path, f"the header's {name} field is {_shown(value)}, not an "
                                  "integer from 0 to 2**62")
    return value


def _open_binary(path, check=True):
    """``(X, y, zero_based)`` of a binary data file (:func:`load_binary`)."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"binary data file not found: {path}")
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(len(BINARY_MAGIC) + 4)
        if head[:len(BINARY_MAGIC)] != BINARY_MAGIC:
            raise ValueError(f"{path}: not a gpusvm binary data file (it does not start with "
                             f"{BINARY_MAGIC!r}); read svmlight text with load_svmlight")
        if len(head) < len(BINARY_MAGIC) + 4:
            raise _binary_error(path, f"the file is truncated ({size} bytes, shorter than its header)")
        length = int.from_bytes(head[len(BINARY_MAGIC):], "little")
        text = f.read(min(length, size))
    if len(text) < length:
        raise _binary_error(path, f"the file is truncated ({size} bytes, shorter than its header)")
    try:
        header = json.loads(text)
    except (ValueError, RecursionError):
        raise _binary_error(path, "the header is damaged") from None
    if not isinstance(header, dict):
        raise _binary_error(path, "the header is damaged")
    version = _field(path, header, "version")
    if version != BINARY_VERSION or isinstance(version, bool):
        raise ValueError(f"{path}: binary data format version {_shown(version)}, but this gpusvm "
                         f"reads version {BINARY_VERSION}; convert the svmlight file again with "
                         "this gpusvm's `gpusvm convert`")
    shape = _field(path, header, "shape")
    if not isinstance(shape, list) or len(shape) != 2:
        raise _binary_error(path, f"the header's shape field is {_shown(shape)}, not a list "
                                  "of two integers")
    n, d = (_count(path, v, f"shape[{k}]") for k, v in enumerate(shape))
    nnz = _count(path, _field(path, header, "nnz"), "nnz")
    expected = _count(path, _field(path, header, "size"), "size")
    zero_based = _field(path, header, "zero_based")
    if not isinstance(zero_based, bool):
        raise _binary_error(path, f"the header's zero_based field is {_shown(zero_based)}, not "
                                  "true or false")
    if size < expected:
        raise _binary_error(path, f"the file is truncated ({size} of {expected} bytes)")
    counts = {"data": nnz, "indices": nnz, "indptr": n + 1, "y": n}
    arrays = {}
    for name in _BINARY_ARRAYS:
        kind = _field(path, header, "arrays", name, "dtype")
        if kind not in _DTYPES[name]:
            raise _binary_error(path, f"the header's arrays.{name}.dtype field is {_shown(kind)}, "
                                      f"not one of {', '.join(_DTYPES[name])}")
        dtype = np.dtype(kind)
        offset = _count(path, _field(path, header, "arrays", name, "offset"),
                        f"arrays.{name}.offset")
        count = _count(path, _field(path, header, "arrays", name, "count"), f"arrays.{name}.count")
        if (count != counts[name] or offset < len(head) + length
                or offset + dtype.itemsize * count > expected):
            raise _binary_error(path, f"the header's {name} array is inconsistent")
        arrays[name] = (np.memmap(path, dtype=dtype, mode="c", offset=offset, shape=(count,))
                        if count else np.empty(0, dtype))
    indptr, indices = arrays["indptr"], arrays["indices"]
    if int(indptr[0]) != 0 or int(indptr[-1]) != nnz or np.any(indptr[1:] < indptr[:-1]) or (
            check and nnz and not _indices_valid(indices, indptr, d)):
        raise _binary_error(path, "its index arrays are not a valid CSR matrix")
    X = sp.csr_matrix((arrays["data"], indices, indptr), shape=(n, d))
    X.has_sorted_indices = True         # save_binary wrote canonical CSR
    X.has_canonical_format = True
    return X, np.asarray(arrays["y"]), zero_based


def _indices_valid(indices, indptr, d, block=1 << 24):
    """Whether every index lies in ``[0, d)`` and increases along its row (``indptr``
    already checked nondecreasing): blocks of ``block`` values, vectorised."""
    for a in range(0, indices.size, block):
        part = np.asarray(indices[a:a + block + 1])
        if int(part.min()) < 0 or int(part.max()) >= d:
            return False
        down = np.flatnonzero(part[1:] <= part[:-1]) + (a + 1)     # must be row starts
        if np.any(np.asarray(indptr)[np.searchsorted(indptr, down)] != down):
            return False            # (down < nnz = indptr[-1]: searchsorted stays inside)
    return True
