"""Textbook mini-batch Pegasos, dense and plain: the oracle of ``test_pegasos.py``.

Written straight from Fig. 1 of Shalev-Shwartz, Singer & Srebro, "Pegasos:
Primal Estimated sub-GrAdient SOlver for SVM" (ICML 2007), with the bias
variants of its Sec. 4, the step sizes compared in its Fig. 2 and the averaged
outputs of its Corollary 1 and of Takáč et al. (2013, Theorem 1).  ``w`` is a
plain dense vector updated literally; there is no scaled representation, no
renormalisation, no sparse bookkeeping and nothing shared with
:mod:`gpusvm.solvers.pegasos` or the backends except the batch stream
(:class:`gpusvm.solvers._sampling.CounterSampler`), so that both consume exactly
the same ``A_t``.

Conventions checked against the solver's docstring:

* the average of all iterates is that of ``w_2 .. w_{T+1}``; the tail average
  is that of the iterates produced by the steps ``t > T/2`` (``T = max_iter``);
* an intermediate evaluation at step ``t`` reports the average so far once
  averaging has started, and the last iterate before;
* ``bias="optimal"``: ``b`` of each batch is the smallest minimiser of the
  batch hinge loss; rows whose breakpoint equals ``b`` sit exactly on the
  margin and are not in ``A_t^+``; the reported ``b`` is the optimal bias of
  the output ``w`` over all rows;
* the objective is ``lam/2 ||w||^2 + mean hinge`` (``b`` never regularised;
  ``bias="augmented"`` puts it in ``w`` through a constant feature);
* the projection radius is the smaller of ``1/sqrt(lam)`` and
  ``sqrt(2 P(u) / lam)``, ``P(u)`` the least objective of a constant predictor
  ``u`` (the bias alone: ``lam/2 ||w*||^2 <= P(w*) <= P(u)``), found here by
  brute force over the candidates of a piecewise quadratic;
* ``bias="augmented"``: the output's bias weight (last entry) is replaced by the
  minimiser of the objective over that entry alone, found the same way.
"""

from __future__ import annotations

import math

import numpy as np

from gpusvm.solvers._sampling import CounterSampler


def primal_objective(X, y, w, b, lam):
    """``P(w, b) = lam/2 ||w||^2 + (1/n) sum_i max(0, 1 - y_i (<w, x_i> + b))``."""
    z = X @ w + b
    return 0.5 * lam * float(np.dot(w, w)) + float(np.mean(np.maximum(0.0, 1.0 - y * z)))


def minimise_hinge_over_bias(y, s):
    """Smallest minimiser of ``g(b) = mean_i max(0, 1 - y_i (s_i + b))``, by brute force.

    ``g`` is convex and piecewise linear with breakpoints ``y_i - s_i`` and
    attains its minimum at one of them, so evaluate ``g`` at every breakpoint
    and keep the smallest breakpoint that attains the minimum (up to rounding:
    values within ``1e-12`` of the minimum count as equal).
    """
    bp = y - s
    g = np.array([np.mean(np.maximum(0.0, 1.0 - y * (s + c))) for c in bp])
    best = g.min()
    return float(np.min(bp[g <= best + 1e-12 * max(1.0, best)]))


def piecewise_minimum(loss, reg, breakpoints):
    """``(argmin, min)`` of ``reg u^2 + loss(u)``, ``loss`` convex piecewise linear, by brute force.

    The minimum of a convex piecewise quadratic is at a breakpoint or at the stationary
    point of a piece: every breakpoint is a candidate, and so is ``-a / (2 reg)`` of each
    piece where it falls inside the piece, ``a`` the slope of ``loss`` there (from two of
    its points; exact, the piece is linear).
    """
    bps = np.unique(np.asarray(breakpoints, dtype=np.float64))
    cands = list(bps)
    if reg > 0:
        edges = np.concatenate([[bps[0] - 2.0], bps, [bps[-1] + 2.0]])
        for lo, hi in zip(edges[:-1], edges[1:]):
            p, q = lo + (hi - lo) / 3.0, lo + 2.0 * (hi - lo) / 3.0
            u = -((loss(q) - loss(p)) / (q - p)) / (2.0 * reg)
            first, last = lo == edges[0], hi == edges[-1]
            if (first or u >= lo) and (last or u <= hi):
                cands.append(u)
    values = [reg * u * u + loss(u) for u in cands]
    j = int(np.argmin(values))
    return float(cands[j]), float(values[j])


def constant_predictor_radius(y, lam, bias, intercept_scaling):
    """``min(1/sqrt(lam), sqrt(2 min_u P(u) / lam))`` over the constant predictors ``u``."""
    dual = 1.0 / math.sqrt(lam)
    if bias not in ("augmented", "unregularized", "optimal"):
        return dual
    c = float(intercept_scaling)
    reg = 0.5 * lam / (c * c) if bias == "augmented" else 0.0

    def loss(u):
        return float(np.mean(np.maximum(0.0, 1.0 - y * u)))
    return min(dual, math.sqrt(2.0 * piecewise_minimum(loss, reg, [-1.0, 1.0])[1] / lam))


def learning_rate(schedule, t, lam, eta0, norma_p):
    """``eta_t`` of Fig. 1 step 3 (``"pegasos"``) and of the Fig. 2 comparisons."""
    if schedule == "pegasos":
        return 1.0 / (lam * t)
    if schedule == "norma":
        return norma_p / (lam * math.sqrt(t))
    if schedule == "constant":
        return eta0
    raise ValueError(schedule)


def draw_batches(n, k, max_iter, sampling, seed):
    """The first ``max_iter`` batches of the counter-based stream every backend draws."""
    return list(CounterSampler(n, k, sampling, seed).batches(0, max_iter)[0])


def reference_pegasos(X, y, *, lam, k, max_iter, sampling="without_replacement", seed=0,
                      projection=True, averaging="none", schedule="pegasos", eta0=None,
                      norma_p=0.7, bias="none", intercept_scaling=1.0, w0=None, b0=0.0,
                      eval_every=None, batches=None):
    """Run textbook Pegasos; return a dict with ``w``, ``b``, ``history`` and ``n_projected``.

    Parameters
    ----------
    X : ndarray of shape (n, d)
        Dense data.
    y : ndarray of shape (n,)
        Labels in {-1, +1}.
    bias : {"none", "augmented", "unregularized", "optimal"}
        ``"augmented"`` appends the constant feature ``intercept_scaling`` to
        ``X`` here, so the returned ``w`` has ``d + 1`` entries and ``b = 0``.
    w0, b0
        Initial point ``w_1`` (``d + 1`` entries with ``"augmented"``) and ``b_1``.
    eval_every : int or None
        Record the objective of the output at steps ``t`` with
        ``t % eval_every == 0`` and ``t < T``, and at the last step ``T``.
    batches : list of int arrays, optional
        The ``A_t``; drawn from ``CounterSampler(n, k, sampling, seed)`` when omitted.

    Returns
    -------
    dict
        ``w``, ``b`` (the output: last iterate or average), ``history`` (list of
        ``(t, P)``) and ``n_projected`` (steps whose projection shrank ``w``).
    """
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n = y.shape[0]
    if bias == "augmented":
        X = np.hstack([X, np.full((n, 1), float(intercept_scaling))])
    d = X.shape[1]
    if batches is None:
        batches = draw_batches(n, k, max_iter, sampling, seed)
    T = max_iter
    first_averaged = 1 if averaging == "all" else T // 2 + 1   # average w_{t+1} for t >= this

    radius = constant_predictor_radius(y, lam, bias, intercept_scaling)
    w = np.zeros(d) if w0 is None else np.array(w0, dtype=np.float64)
    b = float(b0)
    w_sum, b_sum, count = np.zeros(d), 0.0, 0
    history, n_projected = [], 0

    def output():
        if averaging != "none" and count > 0:
            w_out, b_out = w_sum / count, b_sum / count
        else:
            w_out, b_out = w.copy(), b
        if bias == "optimal":
            b_out = minimise_hinge_over_bias(y, X @ w_out)
        return w_out, b_out

    for t in range(1, T + 1):
        A = np.asarray(batches[t - 1])
        XA, yA = X[A], y[A]
        s = XA @ w                                                    # <w_t, x_i>, i in A_t
        if bias == "optimal":
            b = minimise_hinge_over_bias(yA, s)
            # y_i (<w_t, x_i> + b) = 1 + y_i (b - b_i), b_i = y_i - <w_t, x_i>: exactly 1 for
            # the rows whose breakpoint is b (on the margin, not in A_t^+), the solver's rule
            margins = 1.0 + yA * (b - (yA - s))
        else:
            margins = yA * (s + b)
        active = margins < 1.0                                        # A_t^+
        eta = learning_rate(schedule, t, lam, eta0, norma_p)          # eta_t
        w = (1.0 - eta * lam) * w + (eta / k) * (yA * active) @ XA    # w_{t+1/2}
        if bias == "unregularized":
            b = b + (eta / k) * float(np.sum(yA[active]))             # b - eta_t * (-(1/k) sum y_i)
        if projection:
            norm = float(np.linalg.norm(w))
            if norm > radius:
                w = (radius / norm) * w                               # w_{t+1}
                n_projected += 1
        if averaging != "none" and t >= first_averaged:
            w_sum += w
            b_sum += b
            count += 1
        if eval_every is not None and t % eval_every == 0 and t < T:
            history.append((t, primal_objective(X, y, *output(), lam)))

    w_out, b_out = output()
    if bias == "augmented":             # the best bias weight given the other entries
        rest = X[:, :-1] @ w_out[:-1]
        c = float(intercept_scaling)

        def loss(beta):
            return float(np.mean(np.maximum(0.0, 1.0 - y * (rest + c * beta))))
        w_out = w_out.copy()
        w_out[-1] = piecewise_minimum(loss, 0.5 * lam, (y - rest) / c)[0]
    history.append((T, primal_objective(X, y, w_out, b_out, lam)))
    return {"w": w_out, "b": float(b_out), "history": history, "n_projected": n_projected}
