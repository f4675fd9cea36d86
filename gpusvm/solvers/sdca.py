r"""Mini-batch SDCA with duality-gap certificates, written once against the backend primitives.

Implements the mini-batch stochastic dual coordinate ascent of Takáč, Bijral,
Richtárik & Srebro, "Mini-Batch Primal and Dual Methods for SVMs" (ICML 2013):
naive mini-batching (Sec. 4.1), the safe step ``beta = beta_b`` of Theorem 2
(Sec. 4.2) and the aggressive, adaptive step of Algorithm 2 (Sec. 4.3), for

.. math::

    P(w) = \frac{\lambda}{2}\|w\|^2 + \frac1n \sum_i \max(0, 1 - y_i\langle w, x_i\rangle),
    \qquad
    D(\alpha) = \frac1n \sum_i \alpha_i - \frac{\lambda}{2}\|w(\alpha)\|^2,\ \alpha \in [0,1]^n,

with ``w(alpha) = (1/(lam n)) sum_i alpha_i y_i x_i``.  The duality gap
``P(w(alpha)) - D(alpha) >= P(w(alpha)) - P(w*)`` certifies the primal
suboptimality, and the solver stops once it is ``<= tol``.

One iteration with the batch ``A`` (``|A| = b``) and step parameter ``beta``
(eq. 15):

``delta_i = clip_[-alpha_i, 1 - alpha_i](lam n (1 - y_i <w, x_i>) / (beta ||x_i||^2))``,
``alpha_i += delta_i``, ``w += (1/(lam n)) sum_{i in A} delta_i y_i x_i``.

``naive`` uses ``beta = 1``; ``safe`` uses ``beta = beta_b`` (eq. 11);
``aggressive`` keeps ``beta`` in ``[1, beta_b]``, adapts it to the measured
interaction ``rho`` of a tentative step and rejects steps that lower ``D``.

Weights, the squared hinge, M outputs (ALGORITHMS.md, "Weights, and the squared
hinge" and "Many outputs at once"): with example weights ``s_i`` the box is
``[0, s_i]``; the squared hinge has ``alpha_i >= 0``, the dual
``D2(alpha) = (1/n) sum_i (alpha_i - alpha_i^2/(4 s_i)) - lam/2 ||w(alpha)||^2`` and
the closed-form step ``delta_i = lam n (1 - m_i - alpha_i/(2 s_i)) /
(lam n/(2 s_i) + beta ||x_i||^2)`` (clipped to ``alpha_i + delta_i >= 0``); the
safe ``beta_b`` is unchanged (the extra term is separable).  ``M`` outputs share
the batches, each with its own ``alpha`` column, ``beta`` and certificate.

Decisions
---------
* **Row norms.** The step divides by ``||x_i||^2``, so its separable surrogate is
  ``beta sum_i delta_i^2 Q_ii``; Lemma 1 applied to the unit-diagonal
  ``diag(Q)^{-1/2} Q diag(Q)^{-1/2}`` shows that the safe ``beta_b`` is the one
  of the row-normalised data, whatever the row norms.  ``sigma^2`` is
  therefore always computed on rows ``x_i / ||x_i||``
  (:func:`gpusvm.spectral.sigma_squared` with ``normalize=True``); the data are
  never rescaled and no assumption ``max ||x_i|| <= 1`` is needed.
* **Zero rows.** A row with ``x_i = 0`` does not interact with ``w``; its dual
  term ``alpha_i / n`` is maximal at ``alpha_i = 1``, so it starts there (and its
  step ``1 - alpha_i`` is 0 afterwards).  Leaving it at 0 would keep the gap
  above ``(#zero rows)/n`` forever.
* **Repeated rows in a batch** (``sampling="with_replacement"``, or an
  ``"epoch"`` batch straddling two permutations): only the first occurrence
  steps, the others get ``delta_i = 0``, so ``alpha`` stays in the box.
* **Rejections** (aggressive): a step is rejected when ``Delta D < 0`` beyond
  the rounding of its computation (``-tau`` below; without that margin an exact
  coordinate step near convergence could be refused for a rounding error);
  ``beta`` keeps its adapted value either way (Alg. 2).
* **Certificates.** At every evaluation ``w(alpha)`` is recomputed from
  ``alpha`` in float64 (O(nnz), the cost of evaluating ``P``), so the gap is a
  true certificate for the float32 path too, and the iterate is resynchronised
  with it.  The gap is that of the best primal point, the minimiser of ``P`` on
  the segments between the certified points (:class:`BestPoints`), against the
  latest dual.

The backend runs the iterations (``init_dual_m``, ``sdca_segment_m``; the
reference loop is :meth:`gpusvm.backends.numpy_.NumpyBackend.sdca_segment_m`) and
the certificates' passes (``dual_weights_m``, ``decision_function_m``,
``dual_objective_m``, ``col_dots_m``, ``mix_columns_m``; see
:mod:`gpusvm.backends.base`).  No per-iteration primitive returns a host value, so a
device backend never synchronises inside a segment.
"""

from __future__ import annotations

import math
import time
from typing import Callable

import numpy as np

from .. import spectral
from ..backends._state import S_BETA, S_NREJ
from ..backends.base import SDCAPlan, on_backend_stream
from ._common import LOSSES, SolverResult, default_eval_every, run_output, segment_length
from ._sampling import SAMPLING_MODES, CounterSampler, first_occurrences  # noqa: F401

VARIANTS = ("naive", "safe", "aggressive")


def check_sdca_args(n: int, lam: float, b: int, variant: str, theta: float, tol: float) -> None:
    """Validate the SDCA parameters with errors that say what to change.

    Parameters
    ----------
    n : int
        Number of examples.
    lam, b, variant, theta, tol
        As in :func:`sdca`.
    """
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
    """``(sigma^2, beta_b)`` for the run: ``beta_b`` of eq. (11) on row-normalised data.

    Parameters
    ----------
    backend : Backend
        Exposes ``X`` (used only when ``sigma2`` is None and ``beta_b`` is needed).
    b : int
        Mini-batch size.
    variant : str
        ``"naive"`` needs no ``beta_b`` (1 is returned); ``b = 1`` has ``beta_1 = 1``.
    sigma2 : float or None
        ``sigma^2`` of the row-normalised data, if known.

    Returns
    -------
    sigma2 : float or None
    beta_b : float
    """
    n = backend.n
    if variant == "naive" or b == 1:
        return sigma2, 1.0
    if sigma2 is None:
        sigma2 = spectral.sigma_squared(backend.X, normalize=True)
    if sigma2 == 0.0:          # every row is zero: no interaction at all
        return sigma2, 1.0
    return sigma2, spectral.beta_b(b, n, sigma2)


def primal_from_margins(xp, A, s, sq, lam: float, loss: str = "hinge"):
    """``P_s(w_c) = lam/2 ||w_c||^2 + (1/n) sum_i s_i loss(A_ci)`` of every output.

    Parameters
    ----------
    xp : module
        The array module of ``A`` (NumPy or CuPy).
    A : array of float64, shape (M, n)
        Signed margins ``A_ci = y_ic <w_c, x_i>`` (one row per output).
    s : array of float64, shape (n,) or (n, M), or None
        Example weights, shared by the outputs or per output (None: all 1).
    sq : array of float64, shape (M,)
        ``||w_c||^2``.
    lam : float
    loss : {"hinge", "squared_hinge"}

    Returns
    -------
    array of float64, shape (M,), in ``xp``
    """
    slack = xp.maximum(0.0, 1.0 - A)
    if loss == "squared_hinge":
        slack = slack * slack
    if s is not None:
        slack = slack * by_output(s)
    return 0.5 * lam * sq + slack.sum(axis=1) / A.shape[1]


def by_output(s):
    """Row weights laid out as the margins ``A`` (M, n): ``s`` (n,) as it is, ``s`` (n, M)
    transposed (a view)."""
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
    """Exact ``W(alpha)``, ``P``, ``D``, the gap and the signed margins of every output.

    A synchronisation point; ``W(alpha)`` is recomputed in float64 and the iterate
    resynchronised with it.

    Returns
    -------
    W : array of float64, shape (d, M)
    primal, dual, gap : ndarray of float64, shape (M,)
        ``P_s(w_c(alpha))``, ``D_s(alpha_c)`` (``D2`` for the squared hinge) and their
        difference (ALGORITHMS.md, "Weights, and the squared hinge").
    A : array of float64, shape (M, n)
        ``y_ic <w_c, x_i>``, in the backend's array module.
    sq : ndarray of float64, shape (M,)
        ``||w_c||^2``.
    """
    W = backend.dual_weights_m(lam)
    A, primal, sq = primal_point_m(backend, W, lam, loss)
    dual = np.asarray(backend.to_host(backend.dual_objective_m(lam, W, loss, sq=sq)),
                      dtype=float)
    return W, primal, dual, primal - dual, A, sq


def segment_minimum(xp, A0, E, s, q1, q2, lam: float, loss: str = "hinge"):
    """Per output, the ``t`` in ``[0, 1]`` that minimises ``P_s`` on a segment of primal points.

    The points ``w_t = w_0 + t (w_1 - w_0)`` have the signed margins
    ``A0 + t E`` (``E = A1 - A0``) and ``||w_t||^2 = ||w_0||^2 + 2 t q1 + t^2 q2``
    (``q1 = <w_0, w_1 - w_0>``, ``q2 = ||w_1 - w_0||^2``), so ``f(t) = P_s(w_t)`` is
    a convex function of ``t`` evaluated without touching the data.  Its slope
    ``n f'(t) = n lam (q1 + q2 t) + sum_i s_i loss'(A0_i + t E_i) E_i`` is affine
    between the ``t`` at which a margin crosses 1 inside the segment (the hinge's slope
    jumps there, the squared hinge's bends), and nondecreasing: the rows that do not
    cross add a constant (hinge) or an affine term (squared hinge) computed once, each
    crossing row adds its change at its crossing, and the minimiser is found exactly in
    the piece where the slope reaches 0 (one sort of the crossings, one cumulative sum).

    Parameters
    ----------
    xp : module
    A0, E : arrays of float64, shape (M, n)
    s : array of float64, shape (n,) or (n, M), or None
    q1, q2 : arrays of float64, shape (M,), in ``xp``
    lam : float
    loss : {"hinge", "squared_hinge"}

    Returns
    -------
    array of float64, shape (M,), in ``xp``
        Exactly 0 where ``f'(0) >= 0``, exactly 1 where ``f'(1) <= 0``, else the
        minimiser: a crossing, or the root of the slope's affine piece.
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

    # a crossing row's term while its margin is below 1 is ga + gb t; below 1 before its
    # crossing when E > 0 (it leaves the sum there), after it when E < 0 (it joins)
    ga = -se if not squared else -2.0 * (1.0 - a) * se
    gb = xp.zeros_like(se) if not squared else 2.0 * e * se
    rising = e > 0.0
    base_a = n * lam * q1 + c0 + xp.bincount(oi, weights=xp.where(rising, ga, 0.0), minlength=M)
    base_b = n * lam * q2 + c1 + xp.bincount(oi, weights=xp.where(rising, gb, 0.0), minlength=M)
    tau = (1.0 - a) / e                         # in [0, 1]
    order = xp.lexsort(xp.stack([tau, oi.astype(xp.float64)]))      # by output, then t
    o, tau = oi[order], tau[order]
    da = xp.where(rising, -ga, ga)[order]
    db = xp.where(rising, -gb, gb)[order]
    count = xp.bincount(o, minlength=M)
    start = xp.cumsum(count) - count
    ca, cb = xp.cumsum(da), xp.cumsum(db)
    before_a = xp.concatenate([xp.zeros(1), ca])[start]             # the sums before a group
    before_b = xp.concatenate([xp.zeros(1), cb])[start]
    pa = base_a[o] + ca - before_a[o]          # the piece that starts at tau: pa + pb t
    pb = base_b[o] + cb - before_b[o]
    pos = xp.arange(o.size)
    last = pos == start[o] + count[o] - 1
    end = xp.where(last, 1.0, xp.concatenate([tau[1:], xp.ones(1)]))
    if o.size:                                  # where piece 0 ends: the first crossing, or 1
        first_end = xp.where(count > 0, tau[xp.minimum(start, o.size - 1)], 1.0)
    else:
        first_end = xp.ones(M)
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

    At ``b = 1`` the certified point ``w(alpha)`` moves by up to ``||x_i||/(lam n)``
    at every step, so ``P(w(alpha))`` at one certificate is noisy; the gap of the
    best point seen so far was the remedy (any primal point and any dual-feasible
    ``alpha`` certify each other by weak duality).  Here each new certified point
    ``w_1`` is also combined with the best point ``w_0``: the minimiser of ``P_s``
    on the segment ``[w_0, w_1]`` (:func:`segment_minimum`, from the signed margins
    both certificates computed anyway: no pass over the data) becomes the best
    point, an average of the certified iterates whose weights the objective
    chooses.  Its ``P`` is at most that of both ends, and its gap to the latest
    dual reaches ``tol`` earlier (20 Newsgroups, one-vs-rest: 8.6-11.2 epochs
    against 10.3-17.8 over five seeds).

    Parameters
    ----------
    backend : Backend
        Supplies ``xp`` (NumPy when absent), ``to_host``, ``col_dots_m`` and
        ``mix_columns_m`` (:class:`~gpusvm.backends._general.GeneralEvaluation`).
    lam : float
    loss : {"hinge", "squared_hinge"}
    s : array of float64, shape (n,), or None
        Example weights, in the backend's array module.

    Attributes
    ----------
    W : array of float64, shape (d, M)
        The best points (the first certified ones until a second arrives).
    A : array of float64, shape (M, n)
        Their signed margins.
    P, sq : ndarray of float64, shape (M,)
        Their objectives and squared norms (host).
    """

    def __init__(self, backend, lam: float, loss: str, s=None):
        self.backend, self.lam, self.loss, self.s = backend, lam, loss, s
        self.xp = getattr(backend, "xp", np)
        self.W = self.A = self.P = self.sq = None

    def offer(self, idx, W, A, P, sq) -> None:
        """Combine the certified points ``W`` (d, q) of the outputs ``idx`` with the best ones.

        ``A`` (q, n), ``P`` and ``sq`` (q,) are those of ``W``; the first call must
        offer every output, and keeps its arrays.
        """
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
        E = A - A0
        s = self.s
        if s is not None and s.ndim == 2 and not whole:       # the offered outputs' weights
            s = s[:, xp.asarray(idx)]
        t_d, At, sqt_d, pt_d = segment_point(xp, A0, E, s, q0, cross, xp.asarray(sq),
                                             self.lam, self.loss)
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
         output_scale=None, handover: Callable[[list], bool] | None = None) -> SolverResult:
    """Run mini-batch SDCA (Takáč et al. 2013) on a prepared backend.

    Parameters
    ----------
    backend : Backend
        Holds ``X`` (with the constant feature appended for an augmented bias),
        ``y`` of shape ``(n,)`` or ``(n, M)`` (``M`` outputs, one-vs-rest for
        instance) and optional sample weights ``s`` (:mod:`gpusvm.backends.base`).
    lam : float
        Regularisation ``lam > 0``.
    b : int
        Mini-batch size, ``1 <= b <= n``.
    max_iter : int
        Maximum number of iterations ``T``.
    variant : {"naive", "safe", "aggressive"}, default="aggressive"
        ``beta = 1`` (Sec. 4.1), ``beta = beta_b`` (Sec. 4.2, Theorem 2), or
        Algorithm 2 (Sec. 4.3).
    theta : float, default=0.5
        Aggressive variant: ``beta <- beta^theta rho^(1 - theta)``, ``0 < theta < 1``.
    sigma2 : float, optional
        ``sigma^2`` of the row-normalised data; computed by Lanczos when needed
        and not given (safe and aggressive with ``b > 1``).
    tol : float, default=1e-3
        Stop at the first evaluation with duality gap ``<= tol``.  With several
        outputs (2-D ``y``), each output has its own gap and the run stops when all
        are ``<= tol``; an output certified earlier stops there (its ``alpha`` and
        best point are kept, the later segments and certificates run on the other
        outputs only, through the backend's ``outputs_m`` where it has one), so each
        output ends as its own binary fit would on the same batches and cadence.
    sampling : str
        See :class:`~gpusvm.solvers._sampling.CounterSampler` (``"without_replacement"``
        is the paper's Rand(b)).
    seed : int
        Seed of the batch stream.
    eval_every : int, optional
        Iterations between two certificates; default: adapted to the gap by
        :func:`next_certificate` (unless ``eval_at`` is given).
    max_time : float, optional
        Time budget in seconds, checked at evaluations.
    callback : callable, optional
        ``callback(iteration, objective, elapsed)`` at each evaluation (the
        PegasosSVC convention; ``objective`` is ``P(w(alpha))``); returning
        ``False`` stops the run.
    progress : callable, optional
        ``progress(iterations_done, primal, gap)`` at each evaluation.
    eval_at : callable, optional
        ``eval_at(t) -> bool``, called after every iteration ``t``; when given it
        replaces ``eval_every``: certificates are computed exactly at the
        iterations where it returns True (and at ``max_iter``).
    shrinking : bool, default=False
        With ``b = 1`` (ignored otherwise): LIBLINEAR's shrinking (Hsieh et al.
        2008, Sec. 3.2; :class:`~gpusvm.backends.base.SDCAPlan`), on the CPU
        backends.  The certificates are computed on every row, so they stay
        exact; a certificate whose dual rose by less than :data:`SHRINK_STALL`
        times the gap brings every row back.  One unweighted hinge output only
        (ignored otherwise).
    loss : {"hinge", "squared_hinge"}, default="hinge"
        ``max(0, 1 - m_i)`` or ``max(0, 1 - m_i)^2``; the squared hinge's dual
        ``D2(alpha) = (1/n) sum_i (alpha_i - alpha_i^2/(4 s_i)) - lam/2 ||w(alpha)||^2``
        (alpha_i >= 0) and its closed-form coordinate step are those of
        ALGORITHMS.md, "Weights, and the squared hinge".
    alpha0 : array of the shape of ``y``, optional
        Warm start: the dual variables of a previous fit on the same rows and
        outputs (inside the box ``[0, s_i]`` for the hinge, ``>= 0`` for the
        squared hinge); the iterate starts at ``w(alpha0)``.
    w0 : array of float64 of shape (d,) or (d, M), optional
        With ``alpha0``: the best primal point of that fit (its ``w``), the first
        best point of this one (:class:`BestPoints`), so that a fit certified with
        ``alpha0`` and ``w0`` certifies again at the first certificate.
    handover : callable, optional
        ``handover(history) -> bool`` after every certificate above ``tol`` (``history``
        as returned, so far); True stops the run with ``stop_reason="handover"``, for
        another solver to finish from its point
        (:func:`~gpusvm.solvers.policy.sdca_hands_over`).

    Returns
    -------
    SolverResult
        ``w`` has shape ``(d,)`` for 1-D ``y`` and ``(d, M)`` for 2-D ``y``.
        ``history`` holds ``(iteration, P, D, gap, elapsed_seconds)`` at every
        evaluation (with ``M`` outputs: the mean of ``P`` and of ``D`` over the
        outputs and the largest gap, the one the stopping test reads).  Per
        output, ``P = P(w(alpha))`` and ``gap = P_best - D(alpha)``
        with ``P_best`` the lowest ``P`` so far (weak duality: any dual-feasible
        ``alpha`` bounds ``P*`` from below, so the best primal point and the
        latest dual certify each other; at ``b = 1`` the noise of ``P(w(alpha))``
        between two steps is as large as ``||x_i|| / (lam n)``, and the best
        point reaches ``tol`` epochs earlier than the last one), and ``w`` is that
        best point (per output).  With ``M`` outputs, ``extra["histories"]`` holds
        every output's own rows ``(iteration, P, D, gap, elapsed_seconds)``, the last
        of which is that output's certificate.  ``extra`` holds ``primal``, ``dual``,
        ``gap``, ``beta`` (final) and ``n_rejected`` (floats for 1-D ``y``, arrays of
        shape ``(M,)`` for 2-D ``y``), ``alpha`` (host float64, the shape of ``y``),
        ``beta_b`` and ``sigma2``. ``stop_reason`` is ``"tol"`` (every output's gap ``<= tol``),
        ``"max_iter"``, ``"max_time"``, ``"callback"`` or ``"handover"``.

    Notes
    -----
    *Fastest settings on a CPU* (the compiled backend, ``backend="numba"``;
    measurements in BENCHMARKS.md, ``lam = 1e-4``, eps = 1e-3): ``b = 1``,
    ``variant="safe"`` (at ``b = 1`` safe, naive and aggressive take the same
    step, ``beta_1 = 1``; the aggressive test only adds work) and
    ``sampling="epoch"``.  Why: one core does the same work per epoch for every
    ``b`` (one margin per row, one update per row that moves), so the number of
    epochs decides, and it only grows with ``b``: the safe step is shorter by
    ``beta_b`` (on imdb ``1/sigma^2 = 8.4``, so ``beta_16 = 2.8``), the
    aggressive one adapts but pays a second pass per batch to measure ``rho``,
    and any ``b > 1`` needs ``sigma^2`` first (a Lanczos solve on a
    row-normalised float64 copy of ``X``: seconds, and three times the data's
    memory).  A fresh permutation per epoch (``"epoch"``) reaches eps in 5
    epochs on imdb and 8 on news20 against 8 and 12 for i.i.d. rows; with
    ``b = 1``, ``"without_replacement"`` draws the same rows as
    ``"with_replacement"`` but spends ~0.1 s per epoch of imdb in the sampler.
    Large ``b`` pays off on a GPU, where an iteration costs about as much for
    ``b = 1024`` as for ``b = 1``.
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
    aggressive = variant == "aggressive"
    start = time.perf_counter()
    sigma2, beta_b = step_bound(backend, b, variant, sigma2)                  # eq. (11)
    beta0 = 1.0 if variant == "naive" else beta_b

    if output_scale is not None:
        output_scale = np.asarray(output_scale, dtype=np.float64)
        if output_scale.shape != (backend.n_outputs,) or \
                not np.all(np.isfinite(output_scale) & (output_scale > 0)):
            raise ValueError("output_scale must be positive and finite, one value per output")
    scale = np.ones(backend.n_outputs) if output_scale is None else output_scale
    backend.init_state_m()                                                    # W^(0) = 0
    backend.init_dual_m(beta0, loss, alpha0, lam)                             # alpha^(0), beta^(0)

    best_m = BestPoints(backend, lam, loss, backend.sample_weight)
    latest = None                                   # [P(w(alpha)), D(alpha)] of each output

    def certify():
        """Per output, the best primal point seen and the latest dual; outputs already
        certified (not in ``live``) have not moved since, and keep their figures."""
        nonlocal latest
        if live is None:
            W, p, d_, _, A, sq = certificate_m(backend, lam, loss)
            idx = np.arange(p.size)
        else:
            with backend.outputs_m(live):
                W, p, d_, _, A, sq = certificate_m(backend, lam, loss)
            idx = live
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
    plan = SDCAPlan(lam=lam, beta_b=beta_b, theta=theta, aggressive=aggressive,
                    shrinking=shrinking, loss=loss)
    history: list = []
    # M outputs: every output's own rows (t, P(w(alpha)), D(alpha), gap, seconds) besides the
    # combined ones of ``history``
    histories = [[] for _ in range(backend.n_outputs)] if np.ndim(backend.y) == 2 else None

    def record(t, last, elapsed):
        history.append((t, last[4], last[5], last[6], elapsed))
        for m, rows in enumerate(histories or ()):
            rows.append((t, float(last[7][m]), float(last[2][m]), float(last[3][m]), elapsed))

    t = 0
    stop = "max_iter"
    live = None                 # the outputs whose certificate is above tol
    # a GPU's sums run in the atomics' order, so its fits are not bitwise repeatable anyway:
    # there the cadence also weighs the measured cost of a certificate (not on the emulator,
    # whose fits equal the NumPy reference's whatever the clock says)
    costs = CertificateCosts() if adaptive and getattr(backend, "times_certificates", False) \
        else None
    while t < max_iter:
        if adaptive:
            steps = min(max_iter - t, next_certificate(
                history, tol, epoch, costs.balance() if costs else 0))
        else:
            steps = segment_length(t, max_iter - t, eval_every, eval_at)
        clock = time.perf_counter()
        if live is None:
            backend.sdca_segment_m(sampler, t, t + steps, plan)               # eq. (15) / Alg. 2
        else:
            with backend.outputs_m(live):             # the outputs not yet certified only
                backend.sdca_segment_m(sampler, t, t + steps, plan)
        t += steps
        dual_before = history[-1][2] if history else None
        if costs is not None:
            backend.synchronize()                     # the segment's time apart from the certificate's
            clock = costs.segment(steps, clock)
        last = certify()
        if costs is not None:
            costs.certificate(clock)
        primal, dual, gap = last[4:7]
        elapsed = time.perf_counter() - start
        record(t, last, elapsed)
        if progress is not None:
            progress(t, primal, gap)
        if shrinking and dual_before is not None and dual - dual_before <= SHRINK_STALL * gap:
            backend.sdca_unshrink_m()                     # the active set stalled: every row
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
        if progress is not None:
            progress(t, last[4], last[6])
    w, primal, dual, gap = last[:4]
    if stop == "max_iter" and last[6] <= tol:
        stop = "tol"
    sm = backend.to_host(backend.sm)
    w, _ = run_output(backend, w, None)
    alpha = backend.to_host(backend.alpha).astype(np.float64)
    beta, n_rej = sm[S_BETA].copy(), sm[S_NREJ].astype(np.int64)
    if np.ndim(backend.y) == 1:                        # one output: 1-D out
        alpha = alpha[:, 0]
        primal, dual, gap = float(primal[0]), float(dual[0]), float(gap[0])
        beta, n_rej = float(beta[0]), int(n_rej[0])
    extra = {"primal": primal, "dual": dual, "gap": gap, "alpha": alpha,
             "beta": beta, "beta_b": beta_b, "sigma2": sigma2, "n_rejected": n_rej}
    if histories is not None:
        extra["histories"] = histories
    return SolverResult(w=w, b=0.0, n_iter=t, history=history, stop_reason=stop, extra=extra)


#: with shrinking, a certificate whose dual rose by less than this fraction of the gap left
#: brings every row back (the active set has converged on itself, not necessarily on D*)
SHRINK_STALL = 1e-3

#: the next certificate comes after this multiple of the iterations predicted to reach tol: a
#: certificate costs about as much as half an epoch or more (two passes over the data), so a
#: little overshoot is cheaper than one more certificate
CADENCE_OVERSHOOT = 1.2


class CertificateCosts:
    """Measured seconds of the iterations and of the certificates of one fit.

    On a GPU a certificate (a few passes over the data, dozens of array operations and
    a synchronisation) can cost many epochs of a large-batch fit's iterations (imdb,
    ``b = 4096``: 5.6 ms against 0.5 ms an epoch on an H200), where the CPU's half epoch
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
        """Iterations that cost as much time as a typical certificate (0 before any is measured).

        The median of the certificates but the first: a certificate's cost swings
        several-fold with the rows its best point's segment minimum sorts, and on a cold
        kernel cache some certificates pay CuPy's compiles of their array operations (on
        an H200, 1.5 to 10 ms warm; the mean over a fresh machine's first fits was 30 times
        that, and spaced the certificates of imdb so far apart that the fit ran three times
        the epochs it needed).
        """
        steps, seconds = (self.steps, self.seconds) if self.steps else (self.first or (0, 0.0))
        if not steps or not self.certificates:
            return 0
        typical = float(np.median(self.certificates[1:] or self.certificates))
        per_step = max(seconds / steps, 1e-9)
        return int(min(typical / per_step, 2 ** 30))


def next_certificate(history: list, tol: float, epoch: int, balance: int = 0) -> int:
    """Iterations until the next certificate when the cadence adapts to the gap.

    The gap's rate of decrease per iteration, ``r = log(G_0 / G) / (t - t_0)``,
    predicts the iterations left to ``tol``, ``log(G / tol) / r``; the next
    certificate comes after :data:`CADENCE_OVERSHOOT` times that, at least half
    an epoch and at most 4 times the last interval.  Half an epoch is about what
    a certificate costs (two passes over the data, one of them over the support
    vectors only, against an epoch's two over every row at ``b = 1``): near
    ``tol`` the fit never spends more time certifying than iterating (a quarter
    epoch, as before, cost imdb a fifth certificate at 4.5 epochs whose gap was
    a hair above ``tol``; default fits 3-9% faster on imdb, news20 and 20
    Newsgroups, no slower on a9a and w8a).  The rate is measured
    from the first certificate (``t_0``, ``G_0``) once there are three, else over
    the last interval (before the second certificate: from the starting point
    ``alpha = 0``, ``w = 0``, whose gap is at most 1): SDCA's gap falls at a
    roughly steady linear rate, and the rate of one interval swings with the
    luck of the best primal point, which overshot ``tol`` by several epochs
    (20 Newsgroups, one-vs-rest: the last certificate at 17.8 epochs where 10
    sufficed).  The gap is that of the best primal point (:class:`BestPoints`),
    so it never rises.  Far from ``tol`` few certificates are computed (each
    costs about two passes over the data), near it they come often.

    Parameters
    ----------
    history : list of tuple
        ``(t, P, D, gap, elapsed)`` of the certificates so far.
    tol : float
    epoch : int
        Iterations of one epoch, ``ceil(n / b)``.
    balance : int, optional
        Iterations that cost as much time as one certificate, where measured
        (:class:`CertificateCosts`, device backends): the next certificate comes no
        sooner, so that certificates take no more than about half of the fit's time (and
        waiting for the next one costs at most as much as one more certificate), but at
        most 4 times the last interval later (a mismeasured certificate cannot postpone
        the next one by more).

    Returns
    -------
    int
        At least 1.
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
