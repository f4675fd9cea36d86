"""Mini-batch index streams shared by every solver and backend.

Batches are drawn on the host from a seeded :class:`numpy.random.Generator`, a
chunk of iterations at a time, and uploaded once per chunk.  The chunk length
depends only on ``(n, k)``, never on the backend, so the same seed gives every
backend exactly the same sequence of batches.
"""

from __future__ import annotations

import numpy as np

SAMPLING_MODES = ("without_replacement", "with_replacement", "epoch")

#: at most this many row indices per uploaded chunk (4 MiB of int32)
CHUNK_ROWS = 1 << 20


def chunk_length(n: int, k: int) -> int:
    """Number of iterations drawn (and uploaded) at once for batch size ``k``.

    Parameters
    ----------
    n : int
        Number of examples.
    k : int
        Mini-batch size.

    Returns
    -------
    int
        Iterations per chunk, a function of ``(n, k)`` only.
    """
    return int(max(1, min(4096, CHUNK_ROWS // max(k, 1))))


class BatchSampler:
    """Seeded stream of mini-batches ``A_t`` of size ``k`` out of ``n`` rows.

    Parameters
    ----------
    n : int
        Number of examples.
    k : int
        Mini-batch size, ``1 <= k <= n``.
    mode : {"without_replacement", "with_replacement", "epoch"}
        ``"without_replacement"``: each ``A_t`` is a uniformly random k-subset
        (Takáč et al. 2013, Rand(b)); ``"with_replacement"``: k indices drawn
        i.i.d. uniformly (Pegasos, Shalev-Shwartz et al. 2007, Sec. 2.3);
        ``"epoch"``: a fresh random permutation every epoch, consumed k indices
        at a time (a batch that straddles two epochs takes the tail of one
        permutation and the head of the next, so it may repeat a row).
    seed : int or numpy.random.Generator
        Seed of the stream.

    Notes
    -----
    With ``k == n`` and ``"without_replacement"`` every batch is the whole data
    set, so the method is the deterministic (full-batch) subgradient method.
    """

    def __init__(self, n: int, k: int, mode: str, seed) -> None:
        if mode not in SAMPLING_MODES:
            raise ValueError(f"sampling must be one of {SAMPLING_MODES}, got {mode!r}")
        if not 1 <= k <= n:
            raise ValueError(f"batch size must satisfy 1 <= k <= n={n}, got k={k}")
        self.n, self.k, self.mode = int(n), int(k), mode
        self.rng = np.random.default_rng(seed)
        self.chunk = chunk_length(n, k)
        self._perm = np.empty(0, dtype=np.int32)
        self._pos = 0

    def _epoch_rows(self, count: int) -> np.ndarray:
        out = np.empty(count, dtype=np.int32)
        filled = 0
        while filled < count:
            if self._pos >= self._perm.size:
                self._perm = self.rng.permutation(self.n).astype(np.int32)
                self._pos = 0
            take = min(count - filled, self._perm.size - self._pos)
            out[filled:filled + take] = self._perm[self._pos:self._pos + take]
            filled += take
            self._pos += take
        return out

    def next_chunk(self, iterations: int | None = None) -> np.ndarray:
        """Draw the next chunk of batches.

        Parameters
        ----------
        iterations : int, optional
            Number of iterations wanted; at most (and by default) ``self.chunk``.
            Asking for fewer at the end of a run draws a prefix of what a full
            chunk would have drawn for the i.i.d. mode only approximately, so
            the solvers always ask for full chunks and ignore the tail.

        Returns
        -------
        numpy.ndarray
            ``int32`` array of shape ``(c, k)``; row ``j`` is ``A_t`` of one iteration.
        """
        c = self.chunk if iterations is None else int(min(iterations, self.chunk))
        n, k = self.n, self.k
        if self.mode == "with_replacement":
            return self.rng.integers(0, n, size=(c, k), dtype=np.int32)
        if self.mode == "epoch":
            return self._epoch_rows(c * k).reshape(c, k)
        if k == n:
            return np.broadcast_to(np.arange(n, dtype=np.int32), (c, n)).copy()
        out = np.empty((c, k), dtype=np.int32)
        for j in range(c):
            out[j] = self.rng.choice(n, size=k, replace=False)
        return out
