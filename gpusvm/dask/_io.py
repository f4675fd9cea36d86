"""Inputs read on the workers: svmlight files as dask arrays, without a graph full of data."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def _read(path, n_features, dtype, zero_based):
    """One file on a worker: ``(X, y)`` (a worker task)."""
    from ..datasets import load_svmlight
    return load_svmlight(path, n_features=n_features, dtype=dtype, zero_based=zero_based)


def _width(part):
    return part[0].shape[0], part[0].shape[1]


def _matrix(part, d):
    X = part[0]
    if X.shape[1] == d:
        return X
    X = sp.csr_matrix(X)
    return sp.csr_matrix((X.data, X.indices, X.indptr), shape=(X.shape[0], d))


def _labels(part):
    return part[1]


def read_svmlight(paths, n_features=None, *, dtype=np.float32, zero_based=False, client=None):
    """Read svmlight/LIBSVM files on the workers as a dask array of CSR row chunks and labels.

    Each file is read by one worker task (:func:`gpusvm.datasets.load_svmlight`) and stays
    there as one row chunk: the client sends the paths and receives the row counts and
    widths only, so no data passes through it.  The workers must see the same paths.

    Parameters
    ----------
    paths : str, os.PathLike or list of them
        The files, in row order (plain, ``.gz`` or ``.bz2``, or the binary form of
        :func:`gpusvm.datasets.save_binary`, which the worker maps instead of parsing).
    n_features : int or None, default=None
        Number of columns; None takes the largest index of all files.
    dtype : {numpy.float32, numpy.float64}, default=numpy.float32
    zero_based : bool, default=False
        Whether the indices of every file start at 0 (LIBSVM's are one-based).
    client : distributed.Client or None, default=None
        None uses the current client.

    Returns
    -------
    X : dask.array.Array of shape (n_samples, n_features)
        One chunk per file, each a ``scipy.sparse.csr_matrix``.
    y : dask.array.Array of shape (n_samples,)
        The labels as float64, chunked like ``X``'s rows.

    Examples
    --------
    >>> X, y = gpusvm.dask.read_svmlight(["part-0.svm", "part-1.svm"])   # doctest: +SKIP
    >>> gpusvm.dask.SDCASVC(C=1.0).fit(X, y)                               # doctest: +SKIP
    """
    import os

    import dask.array as da
    from distributed import get_client

    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = [os.fspath(p) for p in paths]
    if not paths:
        raise ValueError("read_svmlight needs at least one path")
    client = client if client is not None else get_client()
    parts = [client.submit(_read, p, n_features, dtype, zero_based, pure=False) for p in paths]
    shapes = client.gather([client.submit(_width, part) for part in parts])
    d = int(n_features) if n_features is not None else max(s[1] for s in shapes)
    meta = sp.csr_matrix((0, d), dtype=dtype)
    X = da.concatenate([
        da.from_delayed(client.submit(_matrix, part, d), shape=(rows, d), dtype=dtype,
                        meta=meta)
        for part, (rows, _) in zip(parts, shapes)], axis=0)
    y = da.concatenate([
        da.from_delayed(client.submit(_labels, part), shape=(rows,), dtype=np.float64)
        for part, (rows, _) in zip(parts, shapes)], axis=0)
    return X, y
