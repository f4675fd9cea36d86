"""Kernelized (Mercer) mini-batch Pegasos on the NumPy reference backend.

Sec. 4 "Using Mercer kernels" of Shalev-Shwartz, Singer & Srebro (ICML 2007): with ``w_1 = 0``
every iterate of Fig. 1 is ``w_{t+1} = (rho_t / (lam t k)) sum_j alpha_j y_j phi(x_j)``, where
without projection ``rho_t = 1`` and ``alpha_j`` counts the iterations in which ``j`` was in
``A_s^+`` (with multiplicity when batches are drawn with replacement).  The projection (step
5) multiplies ``rho`` instead of touching ``alpha``, so the representation stays exact (later
additions are then ``1/rho`` in units of ``alpha``).  The solver keeps the raw scores ``g_i =
sum_j alpha_j y_j K(x_j, x_i)`` of all training rows: a batch's margins (step 2) cost O(k),
step 4 adds the kernel columns of the newly active rows (O(n |A_t^+|) kernel values, served
from a column cache), and ``||w||^2 = scale^2 sum_j alpha_j y_j g_j`` costs O(n) and no
kernel value.  Averages (Corollary 1; Takáč et al. 2013, Theorem 1) accumulate
``scale_t alpha^(t)`` and ``scale_t g^(t)``, one O(n) update per averaged iteration.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import scipy.sparse as sp
from sklearn.metrics.pairwise import pairwise_kernels

from ._sampling import CounterSampler
from .pegasos import AVERAGING

#: kernels known by name; any callable ``kernel(A, B) -> (len(A), len(B))`` works too
KERNELS = ("rbf", "poly", "linear", "sigmoid", "cosine")
#: bias modes of the kernel form (Pegasos Sec. 4): none, or an unregularised ``b``
KERNEL_BIAS_MODES = ("none", "unregularized")
#: parameters that ``pairwise_kernels`` accepts for each named kernel
_KERNEL_PARAMS = {"rbf": ("gamma",), "poly": ("gamma", "degree", "coef0"), "linear": (),
                  "sigmoid": ("gamma", "coef0"), "cosine": ()}
#: fold ``rho`` into ``alpha`` and ``g`` when it falls below this (projection only)
RENORM_THRESHOLD = 1e-6
#: at most this many kernel values are computed by one ``pairwise_kernels`` call
BLOCK_ENTRIES = 1 << 22

#: the error of a kernel that returns NaN or infinity (a constant model would follow, silently)
NONFINITE_KERNEL = ("the kernel returned NaN or infinity; every kernel value must be finite: "
                    "check a callable kernel, or scale X (e.g. for 'poly')")


@dataclass
class KernelSolverResult:
    """What :func:`kernel_pegasos` returns.

    Attributes
    ----------
    coef : ndarray of float64, shape (n,)
        The output ``w = sum_j coef_j y_j phi(x_j)`` (last iterate or average), ``> 0``
        exactly on the support vectors.
    alpha : ndarray of shape (n,)
        The last iterate's counts (int64; float64 in units of ``scale`` with projection).
    scale : float
        ``w_{T+1} = scale sum_j alpha_j y_j phi(x_j)``, i.e. ``rho / (lam T k)``.
    b : float
    decision : ndarray of float64, shape (n,)
        ``<w, phi(x_i)> + b`` on the training rows.
    n_iter, history, stop_reason
        As in :class:`~gpusvm.solvers._common.SolverResult` (no ``"tol"``).
    extra : dict
        ``objective``, ``sq_norm``, ``loss`` of the output and ``kernel_evaluations``.
    """

    coef: np.ndarray
    alpha: np.ndarray
    scale: float
    b: float
    decision: np.ndarray
    n_iter: int
    history: list = field(default_factory=list)
    stop_reason: str = "max_iter"
    extra: dict = field(default_factory=dict)


def resolve_gamma(gamma, X) -> float:
    """Numeric ``gamma`` as in :class:`sklearn.svm.SVC`: ``"scale"`` is
    ``1 / (n_features X.var())`` (1 when ``X.var() == 0``), ``"auto"`` ``1 / n_features``."""
    if isinstance(gamma, str):
        d = X.shape[1]
        if gamma == "auto":
            return 1.0 / d
        if gamma == "scale":
            if sp.issparse(X):
                var = float(X.multiply(X).mean() - X.mean() ** 2)
            else:
                var = float(np.asarray(X, dtype=np.float64).var())
            return 1.0 / (d * var) if var != 0 else 1.0
        raise ValueError(f"gamma must be 'scale', 'auto' or a positive float, got {gamma!r}")
    gamma = float(gamma)
    if not gamma > 0:
        raise ValueError(f"gamma must be > 0, got {gamma!r}")
    return gamma


def make_kernel(kernel, *, gamma: float = 1.0, degree: int = 3,
                coef0: float = 0.0) -> Callable:
    """The kernel ``K(A, B) -> ndarray (len(A), len(B))``: a name computed by
    :func:`sklearn.metrics.pairwise.pairwise_kernels` with :class:`sklearn.svm.SVC`'s parameters
    (numeric ``gamma``), or a callable returning the Gram matrix, used as is."""
    if callable(kernel):
        def gram(A, B):
            K = np.asarray(kernel(A, B), dtype=np.float64)
            if K.shape != (A.shape[0], B.shape[0]):
                raise ValueError(
                    f"the callable kernel returned an array of shape {K.shape} for {A.shape[0]} "
                    f"and {B.shape[0]} rows; kernel(A, B) must return the Gram matrix of shape "
                    f"({A.shape[0]}, {B.shape[0]})")
            return K
        return gram
    if kernel not in KERNELS:
        raise ValueError(
            f"unknown kernel {kernel!r}; choose one of {', '.join(KERNELS)} or pass a callable "
            "kernel(A, B) returning the Gram matrix")
    values = {"gamma": float(gamma), "degree": degree, "coef0": float(coef0)}
    params = {name: values[name] for name in _KERNEL_PARAMS[kernel]}

    def gram(A, B):
        return np.asarray(pairwise_kernels(A, B, metric=kernel, **params), dtype=np.float64)
    return gram


def kernel_blocks(gram: Callable, A, B) -> np.ndarray:
    """``K(A, B)`` computed in row blocks of at most :data:`BLOCK_ENTRIES` values."""
    na, nb = A.shape[0], B.shape[0]
    out = np.empty((na, nb), dtype=np.float64)
    step = max(1, BLOCK_ENTRIES // max(nb, 1))
    for r0 in range(0, na, step):
        r1 = min(na, r0 + step)
        out[r0:r1] = gram(A[r0:r1], B)
    return out


class KernelColumns:
    """Columns ``K(X, x_j)`` of the training Gram matrix, computed on demand and cached.

    The cache (``cache_size`` MiB, 0: none) holds ``min(n, cache_size / (8 n))`` columns as
    contiguous rows and evicts the oldest first: the support vectors, whose columns Pegasos
    asks for again and again, stay.
    """

    def __init__(self, X, gram: Callable, cache_size: float) -> None:
        self.X, self.gram = X, gram
        self.n = X.shape[0]
        slots = int(min(self.n, (cache_size * (1 << 20)) // (8 * max(self.n, 1))))
        self.cache = np.empty((slots, self.n), dtype=np.float64)  # row s = column owner[s]
        self.slot_of = np.full(self.n, -1, dtype=np.int64)   # column j lives in slot_of[j]
        self.owner = np.full(slots, -1, dtype=np.int64)      # slot s holds column owner[s]
        self.next_slot = 0                                   # FIFO eviction pointer
        self.evaluations = 0                                 # kernel values computed

    def _compute(self, cols: np.ndarray) -> np.ndarray:
        self.evaluations += self.n * cols.size
        block = kernel_blocks(self.gram, self.X[cols], self.X)     # K is symmetric
        if not np.all(np.isfinite(block)):
            raise ValueError(NONFINITE_KERNEL)
        return block

    def _store(self, cols: np.ndarray, block: np.ndarray) -> None:
        slots = self.cache.shape[0]
        take = min(cols.size, slots)
        if take == 0:
            return
        dest = (self.next_slot + np.arange(take)) % slots
        old = self.owner[dest]
        self.slot_of[old[old >= 0]] = -1
        self.cache[dest] = block[:take]
        self.owner[dest] = cols[:take]
        self.slot_of[cols[:take]] = dest
        self.next_slot = int((self.next_slot + take) % slots)

    def matvec(self, cols: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """``sum_j weights_j K(X, x_{cols_j})`` (n,) for distinct ``cols``."""
        slots = self.slot_of[cols]
        hit = slots >= 0
        if 4 * np.count_nonzero(hit) > self.cache.shape[0]:   # many hits: one dense product
            dense = np.zeros(self.cache.shape[0])
            dense[slots[hit]] = weights[hit]
            out = dense @ self.cache
        else:
            out = weights[hit] @ self.cache[slots[hit]]
        if not hit.all():
            miss = cols[~hit]
            block = self._compute(miss)
            out += weights[~hit] @ block
            self._store(miss, block)
        return out


def kernel_pegasos(X, y, *, lam: float, k: int, max_iter: int, kernel="rbf", gamma=1.0,
                   degree: int = 3, coef0: float = 0.0, sampling: str = "without_replacement",
                   seed=0, projection: bool = False, averaging: str = "none", bias: str = "none",
                   eval_every: int | None = None, max_time: float | None = None,
                   target_objective: float | None = None, callback: Callable | None = None,
                   cache_size: float = 200.0, progress=None) -> KernelSolverResult:
    """Run kernelized mini-batch Pegasos (Pegasos Sec. 4 applied to Fig. 1).

    Parameters
    ----------
    X, y : {ndarray, csr_matrix} of shape (n, d), ndarray of shape (n,)
        Training rows (converted to float64) and their labels in {-1, +1}.
    lam : float
        Regularisation ``lam > 0`` of ``P(w) = lam/2 ||w||^2 + (1/n) sum_i hinge_i``.
    k, max_iter : int
        Mini-batch size ``1 <= k <= n`` and number of iterations ``T``.
    kernel, gamma, degree, coef0
        See :func:`make_kernel`; ``gamma`` may be ``"scale"`` or ``"auto"``
        (:func:`resolve_gamma`).
    sampling, seed
        The batch stream (:class:`gpusvm.solvers._sampling.CounterSampler`); the linear
        solver draws the same batches from the same seed.
    projection : bool
        Project onto the ball of radius ``1/sqrt(lam)`` (Fig. 1, step 5).
    averaging : {"none", "all", "tail"}
        The last iterate, the average of ``w_2..w_{T+1}`` (Corollary 1), or of the iterates
        after steps ``t > T/2`` (Takáč et al. 2013, Theorem 1), ``T = max_iter``.
    bias : {"none", "unregularized"}
        No bias (the paper's experiments), or an unregularised ``b`` updated with the batch
        subgradient, ``b <- b + (eta_t/k) sum_{A_t^+} y_i`` (Sec. 4).
    eval_every, max_time : int, float, optional
        Iterations between evaluations of the objective (default: only at the end) and a
        time budget in seconds, checked after every iteration.
    target_objective, callback, progress
        As in :func:`gpusvm.solvers.pegasos.pegasos`.
    cache_size : float
        MiB of kernel columns kept (:class:`KernelColumns`).

    Returns
    -------
    KernelSolverResult
    """
    X = X.tocsr().astype(np.float64) if sp.issparse(X) else np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n = X.shape[0]
    if y.shape != (n,) or not np.all(np.abs(y) == 1.0):
        raise ValueError("y must be an array of n labels in {-1, +1}")
    if not lam > 0:
        raise ValueError(f"lam must be > 0, got {lam!r}")
    if not 1 <= k <= n:
        raise ValueError(f"batch size must satisfy 1 <= k <= n={n}, got k={k}")
    if averaging not in AVERAGING:
        raise ValueError(f"averaging must be one of {AVERAGING}, got {averaging!r}")
    if bias not in KERNEL_BIAS_MODES:
        raise ValueError(f"bias must be one of {KERNEL_BIAS_MODES}, got {bias!r}")
    gram = make_kernel(kernel, gamma=resolve_gamma(gamma, X) if not callable(kernel) else 1.0,
                       degree=degree, coef0=coef0)
    columns = KernelColumns(X, gram, cache_size)
    sampler = CounterSampler(n, k, sampling, seed)
    eval_every = max_iter if eval_every is None else int(eval_every)
    averaged = averaging != "none"
    t_avg = 1 if averaging == "all" else max_iter // 2 + 1
    radius_sq = 1.0 / lam if projection else 0.0

    # w_t = scale * sum_j alpha_j y_j phi(x_j), scale = rho / (lam (t-1) k); w_1 = 0
    alpha = np.zeros(n, dtype=np.float64)
    g = np.zeros(n, dtype=np.float64)          # g_i = sum_j alpha_j y_j K(x_j, x_i)
    rho, scale, b = 1.0, 0.0, 0.0
    avg = {"coef": np.zeros(n), "g": np.zeros(n), "b": 0.0, "count": 0} if averaged else None

    def evaluate():
        """The output's coefficients, training decisions, bias, ``||w||^2``, loss and ``P``."""
        if averaged and avg["count"] > 0:
            c = avg["count"]
            coef, f, bb = avg["coef"] / c, avg["g"] / c, avg["b"] / c
        else:
            coef, f, bb = scale * alpha, scale * g, b
        sq = max(0.0, float(np.dot(coef * y, f)))                      # Sec. 4: ||w||^2
        decision = f + bb
        loss = float(np.mean(np.maximum(0.0, 1.0 - y * decision)))
        return coef, decision, bb, sq, loss, 0.5 * lam * sq + loss

    history: list = []
    start = time.perf_counter()
    t = 0
    stop = "max_iter"
    while t < max_iter:
        rows = sampler.batch(t)[0]
        t += 1                                                    # rows = A_t
        m = y[rows] * (scale * g[rows] + b)                       # Fig. 1 step 2: margins
        act = rows[m < 1.0]                                       # A_t^+ (a multiset)
        eta = 1.0 / (lam * t)                                     # step 3
        if act.size:                                              # step 4, in (rho, alpha):
            cols, counts = np.unique(act, return_counts=True)     # (1 - 1/t) w_t keeps alpha,
            inc = counts / rho                                    # (eta/k) y_i phi(x_i) adds
            alpha[cols] += inc                                    # 1/rho to alpha_i
            g += columns.matvec(cols, y[cols] * inc)
        scale = rho / (lam * t * k)                               # w_{t+1/2} = scale * u
        if bias == "unregularized":                               # Sec. 4, unregularised b
            b += eta * float(np.sum(y[act])) / k
        if projection:                                            # step 5: projection
            wsq = scale * scale * max(0.0, float(np.dot(alpha * y, g)))
            if wsq > radius_sq:
                shrink = math.sqrt(radius_sq / wsq)
                rho, scale = rho * shrink, scale * shrink
            if rho < RENORM_THRESHOLD:                            # fold rho into alpha
                alpha *= rho
                g *= rho
                rho = 1.0
        if averaged and t >= t_avg:                               # sum of iterates w_{t+1}
            avg["coef"] += scale * alpha
            avg["g"] += scale * g
            avg["b"] += b
            avg["count"] += 1
        if t % eval_every == 0 and t < max_iter:
            objective = evaluate()[-1]
            elapsed = time.perf_counter() - start
            history.append((t, objective, elapsed))
            if progress is not None:
                progress(t, objective)
            if callback is not None and callback(t, objective, elapsed) is False:
                stop = "callback"
            elif target_objective is not None and objective <= target_objective:
                stop = "target_objective"
            elif max_time is not None and elapsed >= max_time:
                stop = "max_time"
            if stop != "max_iter":
                break
        elif max_time is not None and time.perf_counter() - start >= max_time:
            stop = "max_time"                                     # checked every iteration
            break

    coef, decision, bb, sq, loss, objective = evaluate()
    if not history or history[-1][0] != t:
        history.append((t, objective, time.perf_counter() - start))
        if progress is not None:
            progress(t, objective)
    if stop == "max_iter" and target_objective is not None and objective <= target_objective:
        stop = "target_objective"
    alpha_out = alpha.astype(np.int64) if not projection else alpha.copy()
    return KernelSolverResult(
        coef=coef, alpha=alpha_out, scale=scale, b=float(bb), decision=decision, n_iter=t,
        history=history, stop_reason=stop,
        extra={"objective": objective, "sq_norm": sq, "loss": loss,
               "kernel_evaluations": columns.evaluations})
