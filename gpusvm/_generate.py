"""Large sparse classification sets, generated in chunks on the host or on a GPU.

:func:`make_sparse_classification` draws a text-like set (scikit-learn's ``make_classification``
conventions): rows of variable length, column ids from a Zipf-like law (a few very hot columns
and a long tail), positive tf-idf values, unit rows and labels from a planted linear model
with label noise.  The law is written once against an array module ``xp``: the host path runs
it with NumPy, ``device="cuda"`` with CuPy, so the tests of the host path exercise the code
the device runs.

The random numbers of a block of :data:`BLOCK_ROWS` rows come from their own generator,
seeded by ``(random_state, block)`` through :class:`numpy.random.SeedSequence`, and every
other step is a function of one row: the set depends on ``random_state`` and the parameters
of the law, not on ``chunk_rows`` (which bounds the scratch memory only).
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import scipy.sparse as sp

try:
    from ._memory import available_memory
except ImportError:     # loaded from its file alone (benchmarks/bench_scale.py's peers' process)
    import importlib.util as _util
    import pathlib as _pathlib

    _spec = _util.spec_from_file_location(
        "_gpusvm_memory", _pathlib.Path(__file__).with_name("_memory.py"))
    _memory = _util.module_from_spec(_spec)
    _spec.loader.exec_module(_memory)
    available_memory = _memory.available_memory

__all__ = ["make_sparse_classification", "zipf_column_probabilities", "available_memory",
           "BLOCK_ROWS"]

#: rows drawn from one generator: the unit of reproducibility (chunks are whole blocks)
BLOCK_ROWS = 4096
#: standard deviation of the log-normal factor of the mean row length (a Poisson-log-normal
#: law: text rows vary by a factor of about e^{+-0.5} around their mean, and a few are long)
LENGTH_SIGMA = 0.5
#: the bound of 32-bit offsets
_INT32_MAX = int(np.iinfo(np.int32).max)


# ------------------------------------------------------------------ the law (any xp)
def _zipf_cdf(xp, x, n_features: int, s: float):
    """``F(x)``, ``x`` in ``[1, d + 1]``: the continuous power law ``x^-s`` on ``[1, d + 1)``."""
    a = 1.0 - s
    top = math.log(n_features + 1.0)
    if abs(a) < 1e-12:
        return xp.log(x) / top
    return xp.expm1(a * xp.log(x)) / math.expm1(a * top)


def zipf_column_probabilities(columns, n_features: int, zipf_exponent: float):
    """Probability that one draw of :func:`make_sparse_classification` picks each column.

    Column ``j`` is ``floor(x) - 1`` for ``x`` drawn from the density proportional to
    ``x^-s`` on ``[1, d + 1)``, so ``P(j) = F(j + 2) - F(j + 1)`` with ``F`` that law's
    distribution function: about ``(j + 1)^-s / H`` (Zipf's law), in closed form for any
    ``d`` and no table of ``d`` entries.

    Parameters
    ----------
    columns : array of int
        Column ids in ``[0, n_features)``.
    n_features : int
        ``d``.
    zipf_exponent : float
        ``s >= 0`` (0: every column equally likely).

    Returns
    -------
    ndarray of float64
        ``P(j)`` for every given column.
    """
    j = np.asarray(columns, dtype=np.float64)
    return _zipf_cdf(np, j + 2.0, n_features, zipf_exponent) - \
        _zipf_cdf(np, j + 1.0, n_features, zipf_exponent)


def _zipf_columns(xp, u, n_features: int, s: float):
    """Column ids of uniforms ``u`` in ``[0, 1)`` by the inverse of :func:`_zipf_cdf`."""
    a = 1.0 - s
    top = math.log(n_features + 1.0)
    if abs(a) < 1e-12:
        x = xp.exp(u * top)
    else:
        x = xp.exp(xp.log1p(u * math.expm1(a * top)) / a)
    return xp.clip(xp.floor(x).astype(np.int64) - 1, 0, n_features - 1)


def _idf(xp, cols, n_features: int, s: float, mean: float):
    """``1 - log f_j`` (scikit-learn's smooth idf for many rows), ``f_j = 1 - exp(-mean P(j))``
    the expected fraction of rows that hold column ``j``: at least 1, largest in the tail."""
    j = cols.astype(np.float64)
    p = _zipf_cdf(xp, j + 2.0, n_features, s) - _zipf_cdf(xp, j + 1.0, n_features, s)
    frac = -xp.expm1(-mean * xp.maximum(p, 1e-300))
    return 1.0 - xp.log(frac)


def _row_lengths(xp, rng, rows: int, mean: float):
    """Draws per row: ``1 + Poisson((mean - 1) e^{sigma Z - sigma^2 / 2})``, mean ``mean``."""
    z = rng.standard_normal(rows)
    lam = (mean - 1.0) * xp.exp(LENGTH_SIGMA * z - 0.5 * LENGTH_SIGMA ** 2)
    return 1 + rng.poisson(lam).astype(np.int64)


class _DeviceRng:
    """The three draws of the law from CuPy's cuRAND generator (``cupy.random.RandomState``,
    whose ``poisson`` takes an array of means), named as NumPy's Generator names them."""

    def __init__(self, xp, seed: int):
        self._rs = xp.random.RandomState(seed)

    def standard_normal(self, size):
        return self._rs.standard_normal(size, dtype=np.float64)

    def poisson(self, lam):
        return self._rs.poisson(lam, dtype=np.int64)

    def random(self, size):
        return self._rs.random_sample(size, dtype=np.float64)


class _Law:
    """The parameters of the law and the generators of its blocks (host or device)."""

    def __init__(self, xp, entropy, n, d, mean, s, flip_y, on_device, margin_noise=0.0):
        self.xp, self.entropy = xp, entropy
        self.n, self.d, self.mean, self.s, self.flip_y = n, d, mean, s, flip_y
        self.on_device = on_device
        self.margin_noise = margin_noise
        self.idf_table = None
        self.tie_share = 0.0          # the share of the rows tied at the threshold labelled 1
        self.spread = 0.0             # the standard deviation of block 0's planted scores

    def rng(self, *key):
        """The generator of stream ``key``: ``(0,)`` the planted model, ``(1, b)`` block ``b``'s
        row lengths, ``(2, b)`` its columns and labels, ``(3, b)`` its margin noise."""
        seq = np.random.SeedSequence(self.entropy, spawn_key=key)
        if not self.on_device:
            return np.random.default_rng(seq)
        return _DeviceRng(self.xp, int(seq.generate_state(1, np.uint64)[0]) >> 1)

    def blocks(self, r0, r1):
        return range(r0 // BLOCK_ROWS, -(-r1 // BLOCK_ROWS))

    def block_rows(self, b):
        return min(BLOCK_ROWS, self.n - b * BLOCK_ROWS)

    def lengths(self, b):
        return _row_lengths(self.xp, self.rng(1, b), self.block_rows(b), self.mean)

    def coef(self):
        """The planted ``w`` (d,), standard normal: labels ``sign(x . w)`` before the noise."""
        return self.rng(0).standard_normal(self.d)

    def threshold(self, w):
        """The planted model's threshold: the median score of block 0, so that the classes are
        about balanced (the hot columns, in nearly every row, shift every score alike).  Rows
        whose score equals it (identical rows: with a very hot head, ``zipf_exponent`` of 8 or
        more, most rows hold column 0 alone) cannot be split by any threshold: of them, the
        share :attr:`tie_share` that balances block 0 is labelled 1 (at random, the row's
        label uniform), where ``score > t`` alone gave 98 % of one class.  Sets without such
        ties (the share is then 0) keep their labels."""
        xp = self.xp
        score = self.chunk(0, min(self.n, BLOCK_ROWS), w, 0.0)[4]
        t = float(xp.median(score))                            # synchronize!
        tied = int(xp.count_nonzero(score == t))
        above = int(xp.count_nonzero(score > t))
        if tied:
            self.tie_share = min(1.0, max(0.0, (int(score.shape[0]) // 2 - above) / tied))
        self.spread = float(xp.std(score))
        return t

    def idf(self):
        """The ``d`` column weights of the tf-idf values (a table: one gather per nonzero), or
        None when the set draws fewer nonzeros than it has columns (they are then computed per
        nonzero: the same function, no table of ``d`` values)."""
        if self.d > self.n * self.mean:
            return None
        return _idf(self.xp, self.xp.arange(self.d, dtype=np.int64), self.d, self.s, self.mean)

    def chunk(self, r0, r1, w, t):
        """Rows ``r0:r1`` (whole blocks): ``(row, col, val, y, score)``, ``row`` local and
        sorted, ``val`` float64 of unit rows, ``y`` in {0, 1} from ``score > t`` and the
        noise."""
        xp = self.xp
        lengths, u_cols, u_flip, u_lab = [], [], [], []
        for b in self.blocks(r0, r1):
            L = self.lengths(b)
            rng = self.rng(2, b)
            u_cols.append(rng.random(int(L.sum())))
            u_flip.append(rng.random(L.shape[0]))
            u_lab.append(rng.random(L.shape[0]))
            lengths.append(L)
        L = xp.concatenate(lengths)
        rows = int(L.shape[0])
        ends = xp.cumsum(L)
        draws = int(ends[-1])
        row = xp.searchsorted(ends, xp.arange(draws, dtype=np.int64), side="right")
        key = row * self.d + _zipf_columns(xp, xp.concatenate(u_cols), self.d, self.s)
        key = xp.sort(key)
        first = xp.ones(draws, dtype=bool)
        first[1:] = key[1:] != key[:-1]
        at = xp.flatnonzero(first)
        tf = xp.diff(xp.concatenate([at, xp.asarray([draws], dtype=at.dtype)]))
        key = key[at]
        row, col = key // self.d, key % self.d
        idf = _idf(xp, col, self.d, self.s, self.mean) if self.idf_table is None else \
            self.idf_table[col]
        val = (1.0 + xp.log(tf.astype(np.float64))) * idf
        norms = xp.sqrt(xp.bincount(row, weights=val * val, minlength=rows))
        val /= norms[row]
        score = xp.bincount(row, weights=val * w[col], minlength=rows)
        margin = score
        if self.margin_noise > 0.0:                  # its own stream: other draws unchanged
            z = xp.concatenate([self.rng(3, b).standard_normal(self.block_rows(b))
                                for b in self.blocks(r0, r1)])
            margin = score + (self.margin_noise * self.spread) * z
        y = (margin > t).astype(np.int64)
        u_lab = xp.concatenate(u_lab)
        if self.tie_share > 0.0:
            y = xp.where(margin == t, (u_lab < self.tie_share).astype(np.int64), y)
        noisy = xp.concatenate(u_flip) < self.flip_y
        y = xp.where(noisy, (u_lab < 0.5).astype(np.int64), y)
        return row, col, val, y, score


# ------------------------------------------------------------------ checks
def _check_int(name, value, low):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def _check_real(name, value, low, high, *, low_open=False):
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (value > low if low_open else value >= low) and value <= high
    if not ok:
        lo = "(" if low_open else "["
        raise ValueError(f"{name} must be a finite number in {lo}{low}, {high}], got {value!r}")
    return float(value)


def _entropy(random_state):
    """An integer seed of ``random_state`` (None: fresh entropy; an int; a RandomState or
    Generator: one draw of it)."""
    if random_state is None:
        return int(np.random.SeedSequence().entropy)
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        if random_state < 0:
            raise ValueError(f"random_state must be a non-negative integer, got {random_state}")
        return int(random_state)
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(np.iinfo(np.int32).max))
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(np.iinfo(np.int64).max))
    raise ValueError("random_state must be None, a non-negative integer, a numpy RandomState "
                     f"or a numpy Generator, got {random_state!r}")


def _check_memory(xp, n, d, mean, dt, index_dtype, chunk):
    """Refuse, before any draw, a set whose arrays would not fit in the memory available: the
    CSR of the expected ``n m`` nonzeros, the labels, the tables of ``d`` float64 (the planted
    model; the idf's when the set draws more nonzeros than it has columns) and one chunk's
    scratch (about 80 bytes a draw)."""
    draws = n * mean
    idx = np.dtype(index_dtype).itemsize if index_dtype is not None else \
        (8 if draws > _INT32_MAX else 4)
    data = draws * (np.dtype(dt).itemsize + idx) + (n + 1) * idx + 8 * n
    tables = 8 * d * (1 + (d <= draws))
    need = int(data + tables + 80 * min(chunk, n) * mean)
    free = available_memory(xp)
    if free is None or need <= free:
        return
    name, value = ("n_features", d) if tables > data else ("n_samples", n)
    raise ValueError(f"{name}={value} needs about {need} bytes ({need / 2**30:.1f} GiB: the CSR "
                     f"of n_samples * nnz_per_row = {draws:.3g} nonzeros and tables of "
                     f"n_features = {d} float64), more than the {free} bytes of memory "
                     f"available; ask a smaller {name}")


def _array_module(device):
    if device in (None, "cpu"):
        return np, None
    if device != "cuda":
        raise ValueError(f"device must be None, 'cpu' or 'cuda', got {device!r}")
    try:
        import cupy  # noqa: PLC0415  (only with device="cuda")
        import cupyx.scipy.sparse as csp  # noqa: PLC0415
    except ImportError as exc:
        raise ImportError("device='cuda' needs CuPy (pip install cupy-cuda12x); use device=None "
                          "to generate on the host") from exc
    return cupy, csp


# ------------------------------------------------------------------ public
def make_sparse_classification(n_samples=100_000, n_features=100_000, *, nnz_per_row=None,
                               density=None, zipf_exponent=1.0, flip_y=0.01, margin_noise=0.0,
                               random_state=None,
                               dtype=np.float32, chunk_rows=16_384, index_dtype=None,
                               return_coef=False, device=None):
    """Generate a large sparse two-class set like tf-idf text, in chunks.

    The law, row by row:

    1. a length ``L = 1 + Poisson((m - 1) e^{0.5 Z - 0.125})``, ``Z`` standard normal
       (mean ``m`` = ``nnz_per_row``, a log-normal spread and a long right tail);
    2. ``L`` column ids drawn with replacement from a Zipf-like law (column ``j`` has
       probability about ``(j + 1)^-s``, exactly :func:`zipf_column_probabilities`): column 0
       is the hottest, the last the coldest;
    3. the distinct ids of the row, each with its count ``tf`` (so a row has at most ``L``
       nonzeros), and the value ``(1 + log tf) idf_j``, ``idf_j = 1 - log(1 - e^{-m P(j)})``
       (scikit-learn's smooth idf of the column's expected frequency): positive, small for the
       hot columns;
    4. the row scaled to unit Euclidean norm;
    5. the label ``1`` if ``x . w + b > 0`` else ``0``, ``w`` the planted model (``d``
       standard normal weights) and ``b`` minus the median of ``x . w`` over the first
       :data:`BLOCK_ROWS` rows (so the classes are about balanced: the hot columns, in nearly
       every row, shift every score alike; rows whose score equals ``-b``, identical rows that
       no threshold splits, get the label 1 at random in the share that balances the classes);
       with ``margin_noise`` ``r > 0``, ``x . w + b + r sigma Z`` in place of ``x . w + b``
       (``Z`` standard normal, ``sigma`` the standard deviation of ``x . w`` over the same
       rows): labels that disagree with the planted model near its boundary; then a fraction
       ``flip_y`` of the rows gets a label drawn at random (scikit-learn's ``flip_y``: about
       ``flip_y / 2`` of the labels change).

    Parameters
    ----------
    n_samples, n_features : int, default=100_000
        Rows ``n >= 1`` and columns ``d >= 2`` (``d < 2**31``; with one column every unit
        row is the same).
    nnz_per_row : float, optional
        Mean draws per row, ``m >= 1``; the mean of the nonzeros per row is somewhat lower
        (repeated columns become one nonzero).  Default: 50, or ``density * n_features``.
    density : float, optional
        ``nnz_per_row / n_features``, in ``(0, 1]``; give at most one of the two.
    zipf_exponent : float, default=1.0
        ``s`` in ``[0, 10]``; 0 draws every column equally, larger values make the head hotter.
    flip_y : float, default=0.01
        Fraction of rows whose label is drawn at random, in ``[0, 1]``.
    margin_noise : float, default=0.0
        Standard deviation of the Gaussian noise added to each row's planted margin
        ``x . w + b`` before its label is taken, in units of the margins' standard deviation
        (``>= 0``; 0: the labels are the planted model's, but for ``flip_y``).  Real data is
        rarely separable: on 2 x 10^5 rows and columns (defaults otherwise, 80 % to train
        ``LinearSVC``) ``margin_noise=0.3, flip_y=0.05`` gave a test accuracy of 0.74, about
        a click log's (criteo, avazu); the default's 0.78, ``margin_noise=1, flip_y=0.05``
        0.63; spam-like data (0.95-0.99) needs ``margin_noise=0``, ``flip_y`` near 0 and
        more rows per column.
    random_state : int, numpy RandomState or Generator, or None
        Seed of the set.  The same seed and law parameters give the same set whatever
        ``chunk_rows``; ``None`` draws fresh entropy.
    dtype : {numpy.float32, numpy.float64}, default=numpy.float32
        Type of the values (computed in float64, rounded once).
    chunk_rows : int, default=16_384
        Rows generated at a time, rounded up to whole blocks of :data:`BLOCK_ROWS`: the
        scratch memory is about 80 bytes per draw of a chunk.  Does not change the set.
    index_dtype : {None, numpy.int32, numpy.int64}, default=None
        Type of ``indices`` and ``indptr`` (SciPy keeps the two alike): ``None`` takes int32
        unless the draws reach ``2**31``; int64 may be asked for on any set (tests of the
        64-bit path).  The device path makes int64 with CuPy 14.1 or later (the first whose
        ``cupyx.scipy.sparse`` holds int64 indices).
    return_coef : bool, default=False
        Also return the planted ``w`` and ``b``.
    device : {None, "cpu", "cuda"}, default=None
        ``"cuda"``: generate on the current CuPy device with the same law (the same
        distribution, not the same numbers: CuPy's generators differ from NumPy's) and
        return CuPy arrays; nothing passes through host memory.

    Returns
    -------
    X : scipy.sparse.csr_matrix of shape (n_samples, n_features)
        Canonical CSR (sorted indices, no duplicates), unit rows; ``cupyx.scipy.sparse``
        with ``device="cuda"``.
    y : ndarray of int64, shape (n_samples,)
        Labels in {0, 1}.
    coef : ndarray of float64, shape (n_features,)
        The planted ``w`` (with ``return_coef=True``).
    intercept : float
        The planted ``b`` (with ``return_coef=True``).

    Notes
    -----
    Memory: the output arrays are allocated once for the drawn nonzeros (an upper bound,
    counted in a first pass over the row lengths) and shrunk in place at the end, so the peak
    is the CSR, two tables of ``d`` float64 (the planted model, the idf; the idf's only when
    the set draws at least ``d`` nonzeros, else each nonzero's is computed) and one chunk's
    scratch.  A set whose estimate exceeds the memory available (:func:`available_memory`)
    is refused before any draw, with a ``ValueError`` naming the parameter and the bytes.
    Time is dominated by one sort of each chunk's ``(row, column)`` keys.

    Examples
    --------
    >>> from gpusvm.datasets import make_sparse_classification
    >>> X, y = make_sparse_classification(1000, 5000, nnz_per_row=20, random_state=0)
    >>> X.shape, bool(abs(X.multiply(X).sum(axis=1) - 1).max() < 1e-5)
    ((1000, 5000), True)
    """
    n = _check_int("n_samples", n_samples, 1)
    d = _check_int("n_features", n_features, 1)
    if d == 1:
        raise ValueError("n_features must be at least 2, got 1: with one column every unit row "
                         "is the same [1.0], and no label can depend on it")
    if d > _INT32_MAX:
        raise ValueError(f"n_features must be below 2**31 (column ids are int32), got {d}")
    if nnz_per_row is not None and density is not None:
        raise ValueError("give nnz_per_row or density, not both")
    if density is not None:
        mean = _check_real("density", density, 0.0, 1.0, low_open=True) * d
        if mean < 1.0:
            raise ValueError(f"density * n_features must be at least 1 (one nonzero per row), "
                             f"got {density!r} * {d} = {mean:.3g}")
    else:
        mean = 50.0 if nnz_per_row is None else \
            _check_real("nnz_per_row", nnz_per_row, 1.0, float(d) * 64.0)
    s = _check_real("zipf_exponent", zipf_exponent, 0.0, 10.0)
    flip = _check_real("flip_y", flip_y, 0.0, 1.0)
    noise = _check_real("margin_noise", margin_noise, 0.0, 1e6)
    chunk = _check_int("chunk_rows", chunk_rows, 1)
    chunk = -(-chunk // BLOCK_ROWS) * BLOCK_ROWS
    dt = np.dtype(dtype)
    if dt not in (np.float32, np.float64):
        raise ValueError(f"dtype must be float32 or float64, got {dtype!r}")
    if index_dtype is not None and np.dtype(index_dtype) not in (np.int32, np.int64):
        raise ValueError(f"index_dtype must be None, numpy.int32 or numpy.int64, got {index_dtype!r}")
    xp, csp = _array_module(device)
    _check_memory(xp, n, d, mean, dt, index_dtype, chunk)
    law = _Law(xp, _entropy(random_state), n, d, mean, s, flip, csp is not None, noise)

    # pass 1: the drawn nonzeros, an upper bound of nnz, fix the arrays' size and index type
    bound = 0
    for b in law.blocks(0, n):
        bound += int(law.lengths(b).sum())                 # synchronize! (one scalar a block)
    idx = np.dtype(index_dtype) if index_dtype is not None else \
        np.dtype(np.int64 if bound > _INT32_MAX else np.int32)
    if idx == np.int32 and bound > _INT32_MAX:
        raise ValueError(f"the set draws {bound} nonzeros, more than int32 offsets hold "
                         f"({_INT32_MAX}); use index_dtype=numpy.int64 or None")
    if csp is not None and idx != np.int32:
        _check_cupy_int64(xp.__version__, bound)
    data = xp.empty(bound, dtype=dt)
    indices = xp.empty(bound, dtype=idx)
    indptr = xp.zeros(n + 1, dtype=idx)
    y = xp.empty(n, dtype=np.int64)
    w = law.coef()
    law.idf_table = law.idf()
    t = law.threshold(w)

    # pass 2: chunk by chunk into the preallocated arrays
    pos = 0
    for r0 in range(0, n, chunk):
        r1 = min(n, r0 + chunk)
        row, col, val, y_chunk, _ = law.chunk(r0, r1, w, t)
        m = int(row.shape[0])
        data[pos:pos + m] = val
        indices[pos:pos + m] = col
        counts = xp.bincount(row, minlength=r1 - r0)
        indptr[r0 + 1:r1 + 1] = pos + xp.cumsum(counts)
        y[r0:r1] = y_chunk
        pos += m
        del row, col, val, y_chunk, counts
    X = _assemble(csp, data, indices, indptr, pos, (n, d))
    return (X, y, w, -t) if return_coef else (X, y)


#: the first CuPy whose ``cupyx.scipy.sparse`` matrices hold int64 indices
CUPY_INT64_SPARSE = (14, 1)


def _check_cupy_int64(version: str, bound: int) -> None:
    """ValueError naming the remedy where CuPy ``version`` predates int64 sparse indices."""
    import re  # noqa: PLC0415
    found = tuple(int(v) for v in re.findall(r"\d+", version)[:2])
    if found < CUPY_INT64_SPARSE:
        raise ValueError(f"the set draws {bound} nonzeros, which need int64 indices, and CuPy "
                         f"{version}'s cupyx.scipy.sparse holds int32 ones only; install CuPy "
                         ">= 14.1, generate on the host (device=None), or ask fewer rows")


def _assemble(csp, data, indices, indptr, nnz, shape):
    """The CSR of the filled arrays, shrunk to ``nnz`` (in place on the host)."""
    if csp is None:
        data.resize(nnz, refcheck=False)                   # realloc: no second copy
        indices.resize(nnz, refcheck=False)
        X = sp.csr_matrix(shape, dtype=data.dtype)
        X.data, X.indices, X.indptr = data, indices, indptr   # keeps the index type as made
    else:
        X = csp.csr_matrix((data[:nnz], indices[:nnz], indptr), shape=shape, copy=False)
    X.has_canonical_format = True                          # sorted, no duplicates: by construction
    return X
