"""Worker-resident row blocks: the dask actors that hold a block's rows and solver state.

Each block of rows lives in one actor (:class:`SDCABlock` or
:class:`PegasosBlock`) pinned to one worker for the whole fit.  An actor keeps
the block's CSR arrays, labels and state (the dual variables ``alpha_k`` for
SDCA, the replica ``w = a v`` for Pegasos) in the worker's memory across
rounds, and its method calls go from the driver straight to the worker (no
task graph, no scheduler round trip), which matters for Pegasos' one call per
iteration.

Every call names the round (or iteration) the driver believes the block is
at; a block at another one raises :class:`StaleBlockError`, so a block that
was rebuilt behind the driver's back (e.g. recomputed by the scheduler after
its worker was lost) can never contribute to a wrong model.
"""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from . import _local


class StaleBlockError(RuntimeError):
    """A block's state is not at the round the driver expects (it was rebuilt)."""


def block_csr(X, bias: str, intercept_scaling: float) -> sp.csr_matrix:
    """The block's rows as CSR float64 with int32 indices, duplicates summed, bias column appended.

    Parameters
    ----------
    X : scipy sparse matrix or array-like of shape (n_k, d)
    bias : {"none", "augmented"}
    intercept_scaling : float

    Returns
    -------
    scipy.sparse.csr_matrix
    """
    Xc = sp.csr_matrix(X, dtype=np.float64) if sp.issparse(X) else sp.csr_matrix(
        np.asarray(X, dtype=np.float64))
    Xc = sp.csr_matrix(Xc, dtype=np.float64, copy=True)
    if bias == "augmented":
        col = sp.csr_matrix(np.full((Xc.shape[0], 1), intercept_scaling, dtype=np.float64))
        Xc = sp.hstack([Xc, col], format="csr", dtype=np.float64)
    Xc.sum_duplicates()
    Xc.sort_indices()
    if not np.all(np.isfinite(Xc.data)):
        raise ValueError("X contains NaN or infinity; clean the data before fitting")
    return sp.csr_matrix((Xc.data, Xc.indices.astype(np.int32), Xc.indptr.astype(np.int64)),
                         shape=Xc.shape)


def philox(seed: int, block: int, counter: int) -> np.random.Generator:
    """Generator of (seed, block, round/iteration): no sequential state to replay.

    The three numbers are hashed by ``SeedSequence`` into a Philox key, so
    different rounds get independent streams (consecutive Philox *counters*
    would give overlapping streams: one round's draws shifted by four values).

    Parameters
    ----------
    seed, block, counter : int

    Returns
    -------
    numpy.random.Generator
    """
    return np.random.Generator(np.random.Philox(np.random.SeedSequence(
        [seed & (2**64 - 1), block, counter])))


class SDCABlock:
    """One row block of distributed SDCA (CoCoA+), resident on a worker.

    Parameters
    ----------
    X : sparse matrix or array of shape (n_k, d)
        The block's rows.
    y : ndarray of shape (n_k,)
        Labels in {-1, +1}.
    block : int
        Block index (keys the block's random stream).
    n : int
        Total number of training rows (the global ``n`` of ``lam n``).
    lam : float
    n_blocks : int
        ``K`` of CoCoA+ (``sigma' = K``).
    seed : int
    bias : {"none", "augmented"}
    intercept_scaling : float
    alpha : ndarray or None
        Committed dual variables to start from (``None``: 0, and 1 on all-zero rows).
    round_ : int
        The round this state belongs to.
    """

    def __init__(self, X, y, block, n, lam, n_blocks, seed, bias, intercept_scaling, alpha,
                 round_):
        Xc = block_csr(X, bias, intercept_scaling)
        self.indptr, self.indices, self.data = Xc.indptr, Xc.indices, Xc.data
        self.d = Xc.shape[1]
        self.y = np.ascontiguousarray(y, dtype=np.float64)
        self.sqnorm = _local.row_sq_norms(self.indptr, self.data)
        if alpha is None:
            alpha = np.where(self.sqnorm > 0, 0.0, 1.0)
        self.alpha = np.array(alpha, dtype=np.float64)
        self.block, self.n, self.lam, self.K, self.seed = block, n, lam, n_blocks, seed
        self.round = round_

    def info(self):
        """``(n_k, d, block)``, also a liveness probe."""
        return self.y.shape[0], self.d, self.block

    def step(self, w, round_, local_steps, certify, recompute):
        """One CoCoA+ round on this block (Ma et al. 2015, Algorithm 1, steps 4-6).

        Parameters
        ----------
        w : ndarray of float64, shape (d,)
            The broadcast ``w``.
        round_ : int
            Round number the driver expects this block to be at.
        local_steps : int
            Coordinate steps of the local solver (``H``).
        certify : bool
            Also return the hinge-loss sum at ``w`` and the ``alpha`` sum (before
            the round): the block's share of ``P(w)`` and ``D(alpha)``.
        recompute : bool
            Return ``X_k^T(alpha_k y_k)`` after the round instead of ``u_k``,
            so the driver rebuilds ``w(alpha)`` exactly.

        Returns
        -------
        dict
            ``hinge``, ``asum`` (when ``certify``), ``dalpha`` (float64,
            shape (n_k,)), ``u`` (``(v - w)/K``) or ``xty``, and ``seconds``
            (the block's compute time in this call).
        """
        if round_ != self.round:
            raise StaleBlockError(
                f"block {self.block} holds round {self.round}, the driver expects {round_}")
        start = time.perf_counter()
        out = {}
        w = np.asarray(w, dtype=np.float64)
        if certify:
            out["hinge"] = _local.hinge_sum(self.indptr, self.indices, self.data, self.y, w, 1.0)
            out["asum"] = float(self.alpha.sum())
        n_k = self.y.shape[0]
        rng = philox(self.seed, self.block, round_)
        reps = -(-local_steps // n_k)
        order = np.concatenate([rng.permutation(n_k) for _ in range(reps)])[:local_steps]
        v = w.copy()
        dalpha = np.zeros(n_k)
        _local.local_sdca_epoch(self.indptr, self.indices, self.data, self.y, self.sqnorm,
                                self.alpha, dalpha, v, self.lam * self.n / self.K,
                                order.astype(np.int64))
        self.alpha += dalpha
        np.clip(self.alpha, 0.0, 1.0, out=self.alpha)
        self.round = round_ + 1
        out["dalpha"] = dalpha
        if recompute:
            out["xty"] = _local.dual_weights(self.indptr, self.indices, self.data, self.y,
                                             self.alpha, self.d)
        else:
            v -= w
            v /= self.K
            out["u"] = v
        out["seconds"] = time.perf_counter() - start
        return out

    def alpha_copy(self):
        """The block's committed dual variables (float64, shape (n_k,))."""
        return self.alpha.copy()

    def certify(self, w, round_):
        """Hinge-loss sum at ``w``, ``alpha`` sum and ``X_k^T(alpha_k y_k)`` (no step).

        Parameters
        ----------
        w : ndarray of float64 or None
            Where to evaluate the hinge loss (``None``: skip it, return 0).
        round_ : int

        Returns
        -------
        dict with ``hinge``, ``asum``, ``xty``, ``alpha``
        """
        if round_ != self.round:
            raise StaleBlockError(
                f"block {self.block} holds round {self.round}, the driver expects {round_}")
        hinge = 0.0
        if w is not None:
            hinge = _local.hinge_sum(self.indptr, self.indices, self.data, self.y,
                                     np.asarray(w, dtype=np.float64), 1.0)
        return {"hinge": hinge, "asum": float(self.alpha.sum()),
                "xty": _local.dual_weights(self.indptr, self.indices, self.data, self.y,
                                           self.alpha, self.d)}


class PegasosBlock:
    """One row block of distributed mini-batch Pegasos, resident on a worker.

    Holds a replica of ``w = a v`` that every iteration updates with the same
    all-reduced subgradient as the driver's replica.

    Parameters
    ----------
    X : sparse matrix or array of shape (n_k, d)
    y : ndarray of shape (n_k,)
    block : int
    n : int
        Total number of rows.
    share : int
        ``k_k``, this block's rows per iteration.
    seed : int
    bias : {"none", "augmented"}
    intercept_scaling : float
    v : ndarray or None
        Replica to start from (``None``: zeros).
    s : ndarray or None
        ``[a, nu]`` to start from.
    t : int
        Next iteration (1-based).
    """

    def __init__(self, X, y, block, n, share, seed, bias, intercept_scaling, v, s, t):
        Xc = block_csr(X, bias, intercept_scaling)
        self.indptr, self.indices, self.data = Xc.indptr, Xc.indices, Xc.data
        self.d = Xc.shape[1]
        self.y = np.ascontiguousarray(y, dtype=np.float64)
        self.block, self.n, self.share, self.seed = block, n, share, seed
        n_k = self.y.shape[0]
        self.weight = n_k / (n * share)
        self.v = np.zeros(self.d) if v is None else np.array(v, dtype=np.float64)
        self.s = np.array([1.0, 0.0]) if s is None else np.array(s, dtype=np.float64)
        self.t = t
        self.acc = np.zeros(self.d)
        self.mark = np.zeros(self.d, dtype=np.uint8)
        row_nnz = np.diff(self.indptr)
        self.touched = np.empty(int(np.sort(row_nnz)[::-1][:share].sum()) + 1, dtype=np.int64)

    def info(self):
        """``(n_k, d, block)``, also a liveness probe."""
        return self.y.shape[0], self.d, self.block

    def hinge(self, w):
        """Hinge-loss sum of the block's rows at ``w`` (e.g. the averaged output).

        Parameters
        ----------
        w : ndarray of float64, shape (d,)

        Returns
        -------
        float
        """
        return _local.hinge_sum(self.indptr, self.indices, self.data, self.y,
                                np.asarray(w, dtype=np.float64), 1.0)

    def local_round(self, w, t0, local_steps, lam, radius, project):
        """Local-steps variant: ``local_steps`` Pegasos iterations from ``w`` on this block's rows.

        Parameters
        ----------
        w : ndarray of float64, shape (d,)
            The broadcast (averaged) ``w``.
        t0 : int
            Global number of the first iteration (the block must be at it).
        local_steps : int
        lam, radius : float
        project : bool

        Returns
        -------
        dict with ``w`` (the block's ``w`` after the steps) and ``seconds``
        """
        if t0 != self.t:
            raise StaleBlockError(
                f"block {self.block} is at iteration {self.t}, the driver expects {t0}")
        start = time.perf_counter()
        self.v[:] = w
        self.s[0], self.s[1] = 1.0, float(self.v @ self.v)
        n_k = self.y.shape[0]
        batches = np.empty((local_steps, self.share), dtype=np.int64)
        for h in range(local_steps):
            batches[h] = philox(self.seed, self.block, t0 + h).choice(n_k, self.share,
                                                                      replace=False)
        _local.local_pegasos_steps(self.indptr, self.indices, self.data, self.y, self.v, self.s,
                                   batches, t0, lam, radius, project,
                                   np.empty(self.share, dtype=np.int64))
        self.t = t0 + local_steps
        return {"w": self.s[0] * self.v, "seconds": time.perf_counter() - start}

    def iterate(self, t, update, lam, radius, project, evaluate, sample=True):
        """Apply step ``t - 1`` (all-reduced), then return this block's part of step ``t``.

        Parameters
        ----------
        t : int
            The iteration whose partial subgradient is wanted (1-based).
        update : tuple (idx, vals) or None
            The all-reduced subgradient sum of iteration ``t - 1`` (None when ``t = 1``).
        lam, radius : float
        project : bool
        evaluate : bool
            Also return the hinge-loss sum at ``w_t`` (after the update).
        sample : bool, default=True
            Compute the partial subgradient (False: only apply and evaluate).

        Returns
        -------
        dict with ``idx``, ``vals``, ``n_active`` and ``hinge`` (when ``evaluate``)
        """
        if t != self.t:
            raise StaleBlockError(
                f"block {self.block} is at iteration {self.t}, the driver expects {t}")
        if update is not None:
            idx, vals = update
            _local.pegasos_apply(self.v, self.s, idx, vals, 1.0 / (lam * (t - 1)), lam, radius,
                                 project)
        out = {}
        if evaluate:
            out["hinge"] = _local.hinge_sum(self.indptr, self.indices, self.data, self.y, self.v,
                                            self.s[0])
        if not sample:
            self.t = t
            return out
        rows = philox(self.seed, self.block, t).choice(self.y.shape[0], self.share,
                                                       replace=False).astype(np.int64)
        idx, vals, n_active = _local.local_pegasos_partial(
            self.indptr, self.indices, self.data, self.y, rows, self.v, self.s[0], self.weight,
            self.acc, self.mark, self.touched)
        out["idx"], out["vals"], out["n_active"] = idx, vals, n_active
        self.t = t + 1
        return out
