"""Mini-batch SDCA with duality-gap certificates, written once against the backend primitives.

Takáč, Bijral, Richtárik & Srebro, "Mini-Batch Primal and Dual Methods for SVMs" (ICML 2013),
in the notation of docs/algorithms.md ("Mini-batch SDCA"; weights, the squared hinge and ``M``
outputs with their own ``alpha`` columns, ``beta`` and certificates: "Weights, and the squared
hinge", "Many outputs at once").  One iteration on the batch ``A`` (eq. 15): ``delta_i =
clip_[-alpha_i, 1 - alpha_i](lam n (1 - y_i <w, x_i>) / (beta ||x_i||^2))``, ``alpha_i +=
delta_i``, ``w += (1/(lam n)) sum_{i in A} delta_i y_i x_i``, with ``beta = 1`` (naive, Sec.
4.1), ``beta_b`` (safe, eq. 11, Theorem 2; unchanged for the squared hinge, whose extra dual
term is separable) or adapted in ``[1, beta_b]`` to the measured interaction ``rho``
(aggressive, Algorithm 2, Sec. 4.3).  The duality gap ``P(w) - D(alpha) >= P(w) - P(w*)``
certifies the primal suboptimality; the solver stops once it is ``<= tol``.

Decisions:

* **Row norms.** The step divides by ``||x_i||^2``, so by Lemma 1 on the unit-diagonal
  ``diag(Q)^{-1/2} Q diag(Q)^{-1/2}`` the safe ``beta_b`` is that of the row-normalised data:
  ``sigma^2`` is computed on ``x_i / ||x_i||`` (:func:`gpusvm.spectral.sigma_squared`), the
  data never rescaled.
* **Zero rows** start at ``alpha_i = 1``, where their dual term ``alpha_i / n`` is largest
  (at 0 they would keep the gap above ``(#zero rows)/n`` forever).
* **Repeated rows in a batch**: only the first occurrence steps, so ``alpha`` stays in the box.
* **Rejections** (aggressive): a step is rejected when ``Delta D < -tau``, ``tau`` the
  rounding of its computation (else an exact coordinate step near convergence could be
  refused for a rounding error); ``beta`` keeps its adapted value either way (Alg. 2).
* **Certificates.** At every evaluation ``w(alpha)`` is recomputed from ``alpha`` in float64
  (O(nnz), the cost of evaluating ``P``): a true certificate on the float32 path too, and the
  iterate is resynchronised with it.  The gap is the best primal point's
  (:class:`BestPoints`) against the latest dual.

The backend runs the iterations (``init_dual_m``, ``sdca_segment_m``; the reference loop is
:meth:`gpusvm.backends.numpy_.NumpyBackend.sdca_segment_m`) and the certificates' passes
(:mod:`gpusvm.backends.base`); no per-iteration primitive returns a host value, so a device
backend never synchronises inside a segment.
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Callable

import numpy as np
from threadpoolctl import threadpool_limits

from .. import spectral
from ..backends._state import S_BETA, S_NREJ
from ..backends.base import SDCAPlan, on_backend_stream
from .._threads import BlockPool, sdca_threads
from ._common import (LOSSES, SolverResult, check_output_scale, default_eval_every, run_output,
                      segment_length)
from ._sampling import SAMPLING_MODES, CounterSampler, first_occurrences  # noqa: F401
from ._threaded import BlockSDCA
from ._threaded import ask_ahead as ask_block_ahead

VARIANTS = ("naive", "safe", "aggressive")

_EPS64 = float(np.finfo(np.float64).eps)


def blocks_failed(primal: float, dual: float, dual_before: float | None) -> bool:
    """Whether a segment of the threads' row blocks must be undone: its dual fell below
    ``dual_before`` (beyond rounding: the last certificate's, or for the first segment from
    ``alpha = 0`` the dual there, 0; None: no test), or an objective is not finite (the steps
    overflowed)."""
    if not (np.isfinite(primal) and np.isfinite(dual)):
        return True
    return dual_before is not None and dual < dual_before - 4 * _EPS64 * abs(dual_before)


def check_sdca_args(n: int, lam: float, b: int, variant: str, theta: float, tol: float) -> None:
    """Validate the parameters of :func:`sdca` (``n`` rows) with errors that say what to change."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    if not (isinstance(theta, (int, float, np.floating)) and 0.0 < theta < 1.0):
        raise ValueError(
            f"theta must lie in the open interval (0, 1), got {theta!r}; it weighs the old beta "
            "against the measured rho in beta <- beta^theta rho^(1 - theta)")
    if not 1 <= b <= n:
        raise ValueError(f"batch size must satisfy 1 <= b <= n={n}, got b={b}")
    if not lam > 0:
        raise ValueError(f"lam must be > 0, got {lam!r}")
    if not tol >= 0:
        raise ValueError(f"tol must be >= 0, got {tol!r}")


@on_backend_stream
def step_bound(backend, b: int, variant: str, sigma2: float | None):
    """``(sigma^2, beta_b)`` for the run: ``beta_b`` of eq. (11) on row-normalised data
    (``sigma^2`` computed from ``backend.X`` when None and needed; ``beta_b = 1`` for
    ``"naive"`` and ``b = 1``)."""
    n = backend.n
    if variant == "naive" or b == 1:
        return sigma2, 1.0
    if sigma2 is None:
        sigma2 = spectral.sigma_squared(backend.X, normalize=True)
    if sigma2 == 0.0:          # every row is zero: no interaction at all
        return sigma2, 1.0
    return sigma2, spectral.beta_b(b, n, sigma2)


def primal_from_margins(xp, A, s, sq, lam: float, loss: str = "hinge"):
    """``P_s(w_c) = lam/2 ||w_c||^2 + (1/n) sum_i s_i loss(A_ci)`` of every output, (M,) in
    ``xp``, from the signed margins ``A_ci = y_ic <w_c, x_i>`` (M, n), the weights ``s`` ((n,)
    or (n, M); None: all 1) and ``sq = ||w_c||^2`` (M,)."""
    slack = xp.maximum(0.0, 1.0 - A)
    if loss == "squared_hinge":
        slack = slack * slack
    if s is not None:
        slack = slack * by_output(s)
    return 0.5 * lam * sq + slack.sum(axis=1) / A.shape[1]


def by_output(s):
    """Row weights laid out as the margins (M, n): ``s`` (n,) as it is, (n, M) transposed."""
    return s.T if s.ndim == 2 else s


@on_backend_stream
def primal_point_m(backend, W, lam: float, loss: str):
    """The signed margins ``A`` (M, n) of the points ``W`` (d, M) (a pass over ``X``), in the
    backend's array module, and their ``P`` and ``||w_c||^2`` (host float64 (M,))."""
    xp = backend.xp
    A = xp.ascontiguousarray((backend.decision_function_m(W, 0.0) * backend.Y).T)
    sq = xp.asarray(backend.col_sq_norms_m(W))
    primal = primal_from_margins(xp, A, backend.sample_weight, sq, lam, loss)
    primal, sq = np.asarray(backend.to_host(xp.stack([primal, sq])), dtype=float)  # one copy
    return A, primal, sq


@on_backend_stream
def certificate_m(backend, lam: float, loss: str):
    """``(W, P, D, gap, A, sq)`` of every output: the exact ``W(alpha)`` (d, M), recomputed in
    float64 (the iterate resynchronised with it), host ``P_s(w_c(alpha))``, ``D_s(alpha_c)``
    (``D2`` for the squared hinge) and their difference (M,), the signed margins ``A`` (M, n)
    in the backend's array module and ``||w_c||^2`` (M,).  A synchronisation point."""
    W = backend.dual_weights_m(lam)
    A, primal, sq = primal_point_m(backend, W, lam, loss)
    dual = np.asarray(backend.to_host(backend.dual_objective_m(lam, W, loss, sq=sq)),
                      dtype=float)
    return W, primal, dual, primal - dual, A, sq


def segment_minimum(xp, A0, E, s, q1, q2, lam: float, loss: str = "hinge"):
    """Per output, the ``t`` in ``[0, 1]`` that minimises ``P_s(w_0 + t (w_1 - w_0))``, (M,)
    in ``xp``: exactly 0 where ``f'(0) >= 0``, 1 where ``f'(1) <= 0``, else a crossing or the
    root of the slope's affine piece.

    The margins are ``A0 + t E`` (M, n) and ``||w_t||^2 = ||w_0||^2 + 2 t q1 + t^2 q2`` (``q1 =
    <w_0, w_1 - w_0>``, ``q2 = ||w_1 - w_0||^2``), so ``f(t) = P_s(w_t)`` is convex and needs
    no pass over the data.  Its slope ``n f'(t) = n lam (q1 + q2 t) + sum_i s_i loss'(A0_i +
    t E_i) E_i`` is nondecreasing and affine between the ``t`` at which a margin crosses 1:
    the rows that do not cross add a term computed once, each crossing row its change at its
    crossing, and the root is found in the piece where the slope reaches 0 (one sort of the
    crossings, one cumulative sum).
    """
    M, n = A0.shape
    in0, in1 = A0 < 1.0, (A0 + E) < 1.0
    both = in0 & in1
    sE = E if s is None else E * by_output(s)
    squared = loss == "squared_hinge"
    if squared:                                 # loss'(u) = -2 (1 - u) for u < 1
        c0 = -2.0 * xp.where(both, (1.0 - A0) * sE, 0.0).sum(axis=1)
        c1 = 2.0 * xp.where(both, sE * E, 0.0).sum(axis=1)
    else:                                       # loss'(u) = -1 for u < 1
        c0 = -xp.where(both, sE, 0.0).sum(axis=1)
        c1 = xp.zeros(M)
    oi, ri = xp.nonzero(in0 != in1)             # the margins that cross 1 inside the segment
    a, e, se = A0[oi, ri], E[oi, ri], sE[oi, ri]

    def slope(t):                               # n f'(t), from its definition
        u = a + t[oi] * e
        g = xp.where(u < 1.0, -se if not squared else -2.0 * (1.0 - u) * se, 0.0)
        cross = xp.bincount(oi, weights=g, minlength=M)
        return n * lam * (q1 + q2 * t) + c0 + c1 * t + cross

    # a crossing row's term while its margin is below 1 is ga + gb t: before its crossing
    # when E > 0 (it leaves the sum there), after it when E < 0 (it joins)
    ga = -se if not squared else -2.0 * (1.0 - a) * se
    gb = xp.zeros_like(se) if not squared else 2.0 * e * se
    rising = e > 0.0
    base_a = n * lam * q1 + c0 + xp.bincount(oi, weights=xp.where(rising, ga, 0.0), minlength=M)
    base_b = n * lam * q2 + c1 + xp.bincount(oi, weights=xp.where(rising, gb, 0.0), minlength=M)
    tau = (1.0 - a) / e                         # in [0, 1]
    order = xp.lexsort(xp.stack([tau, oi.astype(xp.float64)]))      # by output, then t
    o, tau = oi[order], tau[order]
    da, db = xp.where(rising, -ga, ga)[order], xp.where(rising, -gb, gb)[order]
    count = xp.bincount(o, minlength=M)
    start = xp.cumsum(count) - count
    ca, cb = xp.cumsum(da), xp.cumsum(db)
    before_a = xp.concatenate([xp.zeros(1), ca])[start]             # the sums before a group
    before_b = xp.concatenate([xp.zeros(1), cb])[start]
    pa = base_a[o] + ca - before_a[o]          # the piece that starts at tau: pa + pb t
    pb = base_b[o] + cb - before_b[o]
    last = xp.arange(o.size) == start[o] + count[o] - 1
    end = xp.where(last, 1.0, xp.concatenate([tau[1:], xp.ones(1)]))
    # where piece 0 ends: the first crossing, or 1
    first_end = xp.where(count > 0, tau[xp.minimum(start, o.size - 1)], 1.0) if o.size \
        else xp.ones(M)
    # the slope is nondecreasing: the minimiser lies in the first piece whose end it reaches
    # 0 by; piece 0 (before any crossing) per output, then the crossings' pieces in order
    in_first = base_a + base_b * first_end >= 0.0
    reached = pa + pb * end >= 0.0
    before = xp.bincount(o, weights=(~reached).astype(xp.float64), minlength=M).astype(xp.int64)
    found = before < count
    j = xp.minimum(start + before, max(o.size - 1, 0))
    if o.size:
        aj, bj, tj = pa[j], pb[j], tau[j]
        root_j = xp.where(aj + bj * tj >= 0.0, tj, -aj / xp.where(bj > 0.0, bj, 1.0))
        t = xp.where(found, xp.clip(root_j, tj, 1.0), 1.0)
    else:
        t = xp.ones(M)
    root_0 = -base_a / xp.where(base_b > 0.0, base_b, 1.0)
    t = xp.where(in_first, xp.clip(root_0, 0.0, first_end), t)
    t = xp.where(slope(xp.zeros(M)) >= 0.0, 0.0, t)
    return xp.where(slope(xp.ones(M)) <= 0.0, 1.0, t)


def segment_point(xp, A0, E, s, sq0, cross, sq1, lam: float, loss: str = "hinge"):
    """The minimiser of ``P_s`` on the segment ``w_0 + t (w_1 - w_0)``, from both ends' signed
    margins ``A0`` and ``A0 + E`` (M, n), ``sq0 = ||w_0||^2``, ``cross = <w_0, w_1>`` and
    ``sq1 = ||w_1||^2`` (M,): ``(t, A_t, ||w_t||^2, P_s(w_t))`` per output, in ``xp``
    (:func:`segment_minimum`, :func:`primal_from_margins`; no pass over the data)."""
    q1, q2 = cross - sq0, sq1 - 2.0 * cross + sq0
    t = segment_minimum(xp, A0, E, s, q1, q2, lam, loss)
    At = A0 + t[:, None] * E
    sqt = sq0 + t * (2.0 * q1 + t * q2)
    return t, At, sqt, primal_from_margins(xp, At, s, sqt, lam, loss)


class BestPoints:
    """Per output, the lowest-``P`` primal point on the segments between certified points.

    At ``b = 1`` ``P(w(alpha))`` at one certificate is noisy (``w(alpha)`` moves by up to
    ``||x_i||/(lam n)`` a step); any primal point and any dual-feasible ``alpha`` certify
    each other by weak duality.  Each new certified point ``w_1`` is combined with the best
    point ``w_0``: the minimiser of ``P_s`` on ``[w_0, w_1]`` (:func:`segment_minimum`, from
    the margins both certificates computed anyway) becomes the best point, whose ``P`` is at
    most that of both ends (its gap reaches ``tol`` earlier; BENCHMARKS.md).

    ``backend`` supplies ``xp`` (NumPy when absent), ``to_host``, ``col_dots_m`` and
    ``mix_columns_m`` (:class:`~gpusvm.backends._general.GeneralEvaluation`), and may supply
    ``segment_point_one``, :func:`segment_point` of one output compiled (the same numbers;
    None while it compiles); ``s`` are the example weights in its array module.
    Attributes: the best points ``W`` (d, M), their signed margins ``A`` (M, n), objectives
    ``P`` and squared norms ``sq`` (host, (M,)).
    """

    def __init__(self, backend, lam: float, loss: str, s=None):
        self.backend, self.lam, self.loss, self.s = backend, lam, loss, s
        self.xp = getattr(backend, "xp", np)
        self.W = self.A = self.P = self.sq = None

    def offer(self, idx, W, A, P, sq) -> None:
        """Combine the certified points ``W`` (d, q) of the outputs ``idx`` (with their ``A``
        (q, n), ``P`` and ``sq`` (q,)) with the best ones; the first call offers every output
        and keeps its arrays."""
        if self.W is None:
            self.W, self.A = W, A
            self.P, self.sq = np.array(P, dtype=float), np.array(sq, dtype=float)
            return
        xp, be = self.xp, self.backend
        idx = np.asarray(idx, dtype=np.intp)
        P, sq = np.asarray(P, dtype=float), np.asarray(sq, dtype=float)
        whole = idx.size == self.P.size
        q0 = xp.asarray(self.sq[idx])
        cross = xp.asarray(be.col_dots_m(self.W, idx, W))                    # <w_0, w_1>
        A0 = self.A if whole else self.A[xp.asarray(idx)]
        s = self.s
        if s is not None and s.ndim == 2 and not whole:       # the offered outputs' weights
            s = s[:, xp.asarray(idx)]
        # one output: the backend's compiled form where it has one (the same numbers)
        got = be.segment_point_one(A0, A, s, q0, cross, xp.asarray(sq), self.lam, self.loss) \
            if idx.size == 1 and whole and hasattr(be, "segment_point_one") else None
        if got is None:
            got = segment_point(xp, A0, A - A0, s, q0, cross, xp.asarray(sq), self.lam,
                                self.loss)
        t_d, At, sqt_d, pt_d = got
        t, pt, sqt = np.asarray(be.to_host(xp.stack([t_d, pt_d, sqt_d])), dtype=float)
        inner = (t > 0.0) & (t < 1.0)
        worse = inner & (pt >= np.minimum(self.P[idx], P))  # rounding only: keep the better end
        t = np.where(worse, np.where(P < self.P[idx], 1.0, 0.0), t)
        inner &= ~worse
        take = t == 1.0
        be.mix_columns_m(self.W, idx, W, t)
        for pick, src in ((take, A), (inner, At)):
            if pick.any():
                self.A[xp.asarray(idx[pick])] = src[xp.asarray(np.flatnonzero(pick))]
        self.P[idx] = np.where(take, P, np.where(inner, pt, self.P[idx]))
        self.sq[idx] = np.where(take, sq, np.where(inner, sqt, self.sq[idx]))


def check_alpha0(alpha0, backend, loss: str) -> np.ndarray:
    """``alpha0`` as float64 of ``y``'s shape, inside the dual's domain; clear errors otherwise."""
    shape = tuple(np.shape(backend.y))
    a = np.asarray(alpha0, dtype=np.float64)
    if a.shape != shape:
        raise ValueError(f"alpha0 must have the shape of y, {shape}, got {a.shape}; a warm start "
                         "needs the same rows and outputs as the fit that produced it")
    if not np.all(np.isfinite(a)) or np.any(a < 0):
        raise ValueError("alpha0 must be finite and >= 0 (the dual variables of a previous fit)")
    if loss == "hinge":
        s = getattr(backend, "sample_weight", None)
        top = np.ones(shape[0]) if s is None else np.asarray(backend.to_host(s), dtype=np.float64)
        top = top.reshape(shape) if top.size == a.size else top.reshape((-1,) + (1,) * (a.ndim - 1))
        if np.any(a > top * (1.0 + 1e-12)):
            raise ValueError("alpha0 lies outside the hinge dual's box [0, s_i] (s_i the sample "
                             "weight, 1 without weights); was it produced with other weights or "
                             "loss='squared_hinge'?")
        a = np.minimum(a, top)
    return a


@on_backend_stream
def sdca(backend, *, lam: float, b: int, max_iter: int, variant: str = "aggressive",
         theta: float = 0.5, sigma2: float | None = None, tol: float = 1e-3,
         sampling: str = "without_replacement", seed=0, eval_every: int | None = None,
         max_time: float | None = None, callback: Callable | None = None,
         progress=None, eval_at: Callable[[int], bool] | None = None,
         shrinking: bool = False, loss: str = "hinge", alpha0=None, w0=None,
         output_scale=None, handover: Callable[[list], bool] | None = None,
         n_jobs: int = 1) -> SolverResult:
    """Run mini-batch SDCA (Takáč et al. 2013) on a prepared backend.

    Parameters
    ----------
    backend : Backend
        Holds ``X`` (with the constant feature for an augmented bias), ``y`` (n,) or (n, M)
        (``M`` outputs, one-vs-rest for instance) and optional sample weights ``s``.
    lam : float
        Regularisation ``lam > 0``.
    b, max_iter : int
        Mini-batch size ``1 <= b <= n`` and maximum number of iterations ``T``.
    variant : {"naive", "safe", "aggressive"}, default="aggressive"
        ``beta = 1`` (Sec. 4.1), ``beta = beta_b`` (Sec. 4.2, Theorem 2), or Algorithm 2
        (Sec. 4.3).
    theta : float, default=0.5
        Aggressive variant: ``beta <- beta^theta rho^(1 - theta)``, ``0 < theta < 1``.
    sigma2 : float, optional
        ``sigma^2`` of the row-normalised data; computed by Lanczos when needed and not given.
    tol : float, default=1e-3
        Stop at the first evaluation with duality gap ``<= tol``; with several outputs, when
        every output's is.  An output certified earlier stops there: later segments and
        certificates run on the others only (through the backend's ``outputs_m`` where it
        has one), so each output ends as its own binary fit would.
    sampling, seed
        The batch stream (:class:`~gpusvm.solvers._sampling.CounterSampler`;
        ``"without_replacement"`` is the paper's Rand(b)).
    eval_every : int, optional
        Iterations between two certificates; default: adapted to the gap by
        :func:`next_certificate` (unless ``eval_at`` is given).
    max_time : float, optional
        Time budget in seconds, checked at evaluations.
    callback, progress : callable, optional
        At each evaluation, ``callback(iteration, P(w(alpha)), elapsed)`` (``False`` stops)
        and ``progress(iterations_done, primal, gap)``.
    eval_at : callable, optional
        ``eval_at(t) -> bool``: certificates exactly where it is True (and at ``max_iter``).
    shrinking : bool, default=False
        LIBLINEAR's shrinking (Hsieh et al. 2008, Sec. 3.2;
        :class:`~gpusvm.backends.base.SDCAPlan`) on the CPU backends, for ``b = 1`` and one
        unweighted hinge output (ignored otherwise).  Certificates read every row; one
        whose dual rose by less than :data:`SHRINK_STALL` times the gap brings every row back.
    loss : {"hinge", "squared_hinge"}, default="hinge"
        The squared hinge's dual ``D2`` and closed-form step: docs/algorithms.md.
    alpha0 : array of the shape of ``y``, optional
        Warm start: the dual variables of a previous fit on the same rows and outputs
        (inside ``[0, s_i]`` for the hinge, ``>= 0`` for the squared hinge).
    w0 : array of float64 of shape (d,) or (d, M), optional
        With ``alpha0``: that fit's ``w``, this one's first best point (:class:`BestPoints`).
    output_scale : array of shape (M,), optional
        Each output's objectives and gap are reported and tested times ``output_scale[c] >
        0`` (the one-pass search, whose outputs minimise multiples of their objectives).
    handover : callable, optional
        ``handover(history) -> bool`` after every certificate above ``tol``: True stops the
        run (``stop_reason="handover"``) for another solver to finish
        (:func:`~gpusvm.solvers.policy.sdca_hands_over`).
    n_jobs : int, default=1
        Threads (resolved, ``>= 1``).  Above 1, a fit of one output with ``b = 1`` and
        ``"epoch"`` sampling on the compiled CPU backend with enough nonzeros
        (:func:`gpusvm._threads.sdca_threads`) runs its iterations on ``n_jobs`` row blocks,
        one thread each (:class:`~gpusvm.solvers._threaded.BlockSDCA`; a segment after
        which the dual fell is undone and taken again with shorter steps), and its
        certificates' products on the threads, BLAS held to one thread meanwhile; any
        other fit runs on one.  The same seed and ``n_jobs`` give the same
        result bit for bit; a threaded fit is not the one-thread fit (another sequence of
        steps), and is certified to the same ``tol``.  ``extra["threads"]``: the threads used.

    Returns
    -------
    SolverResult
        ``w``: per output the best point.  ``history`` holds ``(iteration, P, D, gap,
        elapsed_seconds)`` at every evaluation (with ``M`` outputs the means of ``P`` and
        ``D`` and the largest gap; ``extra["histories"]`` every output's rows), ``P =
        P(w(alpha))`` and ``gap = P_best - D(alpha)``, ``P_best`` the lowest ``P`` so far.
        ``extra``: ``primal``, ``dual``, ``gap``, ``beta`` (final) and ``n_rejected`` (floats,
        or arrays (M,)), ``alpha`` (host float64, ``y``'s shape), ``beta_b``, ``sigma2``.
        ``stop_reason`` may also be ``"handover"``.

    Notes
    -----
    On a CPU one core does the same work per epoch for every ``b``, and the epochs only grow
    with ``b``: ``b = 1``, ``variant="safe"`` and ``sampling="epoch"`` are fastest
    (BENCHMARKS.md).  Large ``b`` pays off on a GPU, where an iteration costs about as much.
    """
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {', '.join(LOSSES)}, got {loss!r}")
    n = backend.n
    check_sdca_args(n, lam, b, variant, theta, tol)
    if sampling not in SAMPLING_MODES:
        raise ValueError(f"sampling must be one of {SAMPLING_MODES}, got {sampling!r}")
    if alpha0 is not None:
        alpha0 = check_alpha0(alpha0, backend, loss)
    if w0 is not None:
        w0 = np.asarray(w0, dtype=np.float64)
        shape = (backend.d,) + tuple(np.shape(backend.y)[1:])
        if alpha0 is None or w0.shape != shape or not np.all(np.isfinite(w0)):
            raise ValueError(f"w0 must come with alpha0 and be finite, of shape {shape} (the "
                             f"weights of the fit that produced alpha0), got {w0.shape}")
    adaptive = eval_every is None and eval_at is None
    epoch = default_eval_every(n, b, max_iter)
    if eval_every is None:
        eval_every = epoch
    start = time.perf_counter()
    sigma2, beta_b = step_bound(backend, b, variant, sigma2)                  # eq. (11)
    beta0 = 1.0 if variant == "naive" else beta_b
    output_scale = check_output_scale(output_scale, backend.n_outputs)
    scale = np.ones(backend.n_outputs) if output_scale is None else output_scale
    backend.init_state_m()                                                    # W^(0) = 0
    backend.init_dual_m(beta0, loss, alpha0, lam)                             # alpha^(0), beta^(0)

    best_m = BestPoints(backend, lam, loss, backend.sample_weight)
    latest = None                                   # [P(w(alpha)), D(alpha)] of each output

    def live_only():                                # the outputs not yet certified only
        return contextlib.nullcontext() if live is None else backend.outputs_m(live)

    def certify():
        """Per output, the best primal point seen and the latest dual; outputs already
        certified (not in ``live``) have not moved since, and keep their figures."""
        nonlocal latest
        with live_only():
            W, p, d_, _, A, sq = certificate_m(backend, lam, loss)
        idx = np.arange(p.size) if live is None else live
        if latest is None:
            latest = [p.copy(), d_.copy()]
            if w0 is not None:                    # the previous fit's best point first
                W0 = backend.xp.array(w0.reshape(backend.d, -1))    # a copy
                best_m.offer(idx, W0, *primal_point_m(backend, W0, lam, loss))
        else:
            latest[0][idx] = p
            latest[1][idx] = d_
        best_m.offer(idx, W, A, p, sq)
        g = (best_m.P - latest[1]) * scale       # each output in its own units
        return (best_m.W, best_m.P * scale, latest[1] * scale, g,
                float(np.mean(latest[0] * scale)), float(np.mean(latest[1] * scale)),
                float(np.max(g)), latest[0] * scale)
    sampler = CounterSampler(n, b, sampling, seed)                            # A_t from (seed, t)
    # LIBLINEAR's shrinking: one-row batches of one unweighted hinge output
    shrinking = bool(shrinking) and b == 1 and loss == "hinge" and backend.n_outputs == 1 \
        and backend.sample_weight is None
    if shrinking and not hasattr(backend, "sdca_unshrink_m"):
        raise ValueError(f"shrinking is not available on the {backend.name!r} backend; use "
                         "shrinking=False or backend='numba'")
    plan = SDCAPlan(lam=lam, beta_b=beta_b, theta=theta, aggressive=variant == "aggressive",
                    shrinking=shrinking, loss=loss)
    threads = sdca_threads(n_jobs, backend.X, backend.name) \
        if b == 1 and backend.n_outputs == 1 and sampling == "epoch" \
        and hasattr(backend, "use_threads") else 1
    pool = blocks = None
    if threads == 1 and b == 1 and backend.n_outputs == 1 and sampling == "epoch" and \
            backend.name == "numba":
        from ..backends._threaded import ask_ahead  # noqa: PLC0415
        ask_ahead(backend.X)        # the products and block loop of a fit at size, cached
        ask_block_ahead(backend)
    if threads > 1:             # closed at the end (an exception leaves it to the collector)
        pool = BlockPool(threads)
        backend.use_threads(pool)
        blocks = BlockSDCA(backend, pool, lam, plan, sampling, sampler.seed)
    history: list = []
    # M outputs: every output's own rows (t, P(w(alpha)), D(alpha), gap, seconds) too
    histories = [[] for _ in range(backend.n_outputs)] if np.ndim(backend.y) == 2 else None

    def record(t, last, elapsed):
        history.append((t, last[4], last[5], last[6], elapsed))
        for m, rows in enumerate(histories or ()):
            rows.append((t, float(last[7][m]), float(last[2][m]), float(last[3][m]), elapsed))
        if progress is not None:
            progress(t, last[4], last[6])

    t = 0
    stop = "max_iter"
    live = None                 # the outputs whose certificate is above tol
    # a GPU's fits are not bitwise repeatable anyway (its sums run in the atomics' order): there
    # the cadence also weighs a certificate's measured cost (not on the emulator, whose fits
    # equal the NumPy reference's whatever the clock says)
    costs = CertificateCosts() if adaptive and getattr(backend, "times_certificates", False) \
        else None
    # the threads' own work: BLAS's idle workers spinning on the same cores slowed a fit
    # on 2 cores by up to 40 % (threadpoolctl, a scikit-learn dependency)
    with (threadpool_limits(limits=1, user_api="blas") if blocks is not None
          else contextlib.nullcontext()):
        while t < max_iter:
            if adaptive:
                steps = min(max_iter - t, next_certificate(
                    history, tol, epoch, costs.balance() if costs else 0))
            else:
                steps = segment_length(t, max_iter - t, eval_every, eval_at)
            clock = time.perf_counter()
            if blocks is not None:                          # the row blocks on the threads
                blocks.segment(t, t + steps)
            else:
                with live_only():
                    backend.sdca_segment_m(sampler, t, t + steps, plan)           # eq. (15) / Alg. 2
            t += steps
            dual_before = history[-1][2] if history else None
            if costs is not None:
                backend.synchronize()                     # the segment's time apart from the certificate's
                clock = costs.segment(steps, clock)
            kept = None if blocks is None or latest is None else latest[1].copy()
            last = certify()
            if costs is not None:
                costs.certificate(clock)
            primal, dual, gap = last[4:7]
            if blocks is not None and blocks_failed(primal, dual, dual_before if history
                                                    else 0.0 if alpha0 is None else None) \
                    and blocks.undo():      # the blocks' steps lowered the dual (or overflowed):
                t -= steps                  # undone, and taken again with a larger sigma'
                if kept is None:
                    latest = None
                else:
                    latest[1][...] = kept
                continue
            elapsed = time.perf_counter() - start
            record(t, last, elapsed)
            if shrinking and dual_before is not None and dual - dual_before <= SHRINK_STALL * gap:
                (blocks or backend).sdca_unshrink_m()         # the active set stalled: every row
            if hasattr(backend, "outputs_m"):
                open_ = np.flatnonzero(np.asarray(last[3]) > tol)
                live = open_ if 0 < open_.size < np.size(last[3]) else None
            if gap <= tol:
                stop = "tol"
            elif callback is not None and callback(t, primal, elapsed) is False:
                stop = "callback"
            elif max_time is not None and elapsed >= max_time:
                stop = "max_time"
            elif handover is not None and handover(history):
                stop = "handover"
            if stop != "max_iter":
                break

    if not history or history[-1][0] != t:
        last = certify()
        record(t, last, time.perf_counter() - start)
    w, primal, dual, gap = last[:4]
    if stop == "max_iter" and last[6] <= tol:
        stop = "tol"
    if pool is not None:
        backend.use_threads(None)
        pool.close()
    sm = backend.to_host(backend.sm)
    w, _ = run_output(backend, w, None)
    alpha = backend.to_host(backend.alpha).astype(np.float64)
    beta, n_rej = sm[S_BETA].copy(), sm[S_NREJ].astype(np.int64)
    if np.ndim(backend.y) == 1:                        # one output: 1-D out
        alpha = alpha[:, 0]
        primal, dual, gap = float(primal[0]), float(dual[0]), float(gap[0])
        beta, n_rej = float(beta[0]), int(n_rej[0])
    extra = {"primal": primal, "dual": dual, "gap": gap, "alpha": alpha,
             "beta": beta, "beta_b": beta_b, "sigma2": sigma2, "n_rejected": n_rej,
             "threads": threads}
    if histories is not None:
        extra["histories"] = histories
    return SolverResult(w=w, b=0.0, n_iter=t, history=history, stop_reason=stop, extra=extra)


#: with shrinking, a certificate whose dual rose by less than this fraction of the gap left
#: brings every row back (the active set has converged on itself, not necessarily on D*)
SHRINK_STALL = 1e-3

#: the next certificate comes after this multiple of the iterations predicted to reach tol: a
#: certificate costs about half an epoch or more, so a little overshoot is cheaper than one more
CADENCE_OVERSHOOT = 1.2


class CertificateCosts:
    """Measured seconds of the iterations and of the certificates of one fit.

    On a GPU a certificate can cost many epochs of a large-batch fit's iterations (imdb,
    ``b = 4096``: 5.6 ms against 0.5 ms an epoch on an H200), where the CPU's half-epoch
    assumption of :func:`next_certificate` would spend nine tenths of the time certifying.
    """

    def __init__(self):
        self.steps = self.seconds = 0
        self.first = None               # (steps, seconds) of the first segment
        self.certificates: list = []    # seconds of each certificate

    def segment(self, steps: int, since: float) -> float:
        """Record a segment of ``steps`` iterations begun at ``since``; returns the time now."""
        now = time.perf_counter()
        if self.first is None:          # the first pays compiles and graph captures
            self.first = (steps, now - since)
        else:
            self.steps += steps
            self.seconds += now - since
        return now

    def certificate(self, since: float) -> None:
        """Record a certificate begun at ``since``."""
        self.certificates.append(time.perf_counter() - since)

    def balance(self) -> int:
        """Iterations that cost as much time as a typical certificate (0 before any is measured):
        the median of the certificates but the first, as their cost swings several-fold with
        the rows the segment minimum sorts and on a cold cache with CuPy's compiles (the mean
        made imdb run three times the epochs it needed; BENCHMARKS.md)."""
        steps, seconds = (self.steps, self.seconds) if self.steps else (self.first or (0, 0.0))
        if not steps or not self.certificates:
            return 0
        typical = float(np.median(self.certificates[1:] or self.certificates))
        per_step = max(seconds / steps, 1e-9)
        return int(min(typical / per_step, 2 ** 30))


def next_certificate(history: list, tol: float, epoch: int, balance: int = 0) -> int:
    """Iterations (at least 1) until the next certificate when the cadence adapts to the gap.

    The rate ``r = log(G_0 / G) / (t - t_0)`` of the gaps in ``history`` (``(t, P, D, gap,
    elapsed)`` rows) predicts ``log(G / tol) / r`` iterations to ``tol``; the next
    certificate comes after :data:`CADENCE_OVERSHOOT` times that, at least half an
    ``epoch`` (``ceil(n / b)`` iterations; about a certificate's cost at ``b = 1``) and no
    sooner than ``balance`` (a certificate's measured cost in iterations,
    :class:`CertificateCosts`), but at most 4 times the last interval.  The rate is taken
    from the first certificate once there are three (SDCA's gap falls at a roughly steady
    linear rate; one interval's swings with the best point's luck), else over the last
    interval (from ``alpha = 0``, gap at most 1, before the second).  The best point's gap
    never rises (:class:`BestPoints`).  Measurements: BENCHMARKS.md.
    """
    if not history:
        return epoch
    t1, *_, g1, _ = history[-1]
    t0, g0 = (0, 1.0) if len(history) < 2 else (history[-2][0], history[-2][3])
    last = t1 - t0
    balance = min(balance, 4 * last)
    if not (g1 > 0 and g0 > g1 and tol > 0):
        return max(1, last, balance)
    if len(history) >= 3 and history[0][3] > g1:     # the rate since the first certificate
        t0, g0 = history[0][0], history[0][3]
    rate = math.log(g0 / g1) / (t1 - t0)
    left = math.log(g1 / tol) / rate
    return int(max(1, epoch // 2, balance, min(4 * last, CADENCE_OVERSHOOT * left)))
