"""The optimum ``P*`` of a study, with a duality-gap certificate.

``P*`` lies between any dual value ``D(alpha)`` and any primal value.  :func:`certify_optimum`
runs mini-batch SDCA until its duality gap is below ``gap_tol`` and cross-checks the primal
value with scikit-learn's ``LinearSVC`` (liblinear's dual coordinate descent on the same
objective, ``C = 1/(lam n)``, no intercept).  ``p_star`` is the smaller primal value and
``gap = p_star - D(alpha) >= p_star - P*``: every suboptimality of the study is exact to ``gap``.
"""

from __future__ import annotations

import time
import warnings

import numpy as np

__all__ = ["certify_optimum"]


def _sdca_attempt(problem, lam, variant, b, gap_tol, max_epochs, sigma2, backend):
    from ..backends import make_backend          # noqa: PLC0415
    from ..solvers.sdca import sdca              # noqa: PLC0415
    n = problem.n
    be = make_backend(backend, problem.X, problem.y)
    t0 = time.perf_counter()
    res = sdca(be, lam=lam, b=b, max_iter=int(np.ceil(max_epochs * n / b)), variant=variant,
               sigma2=sigma2, tol=gap_tol, sampling="without_replacement", seed=0)
    return {"method": f"sdca-{variant}", "b": int(b), "seed": 0, "iterations": int(res.n_iter),
            "epochs": res.n_iter * b / n, "primal": float(res.extra["primal"]),
            "dual": float(res.extra["dual"]), "gap": float(res.extra["gap"]),
            "stop_reason": res.stop_reason, "seconds": time.perf_counter() - t0}


def _liblinear(problem, lam, tol):
    from sklearn.exceptions import ConvergenceWarning   # noqa: PLC0415
    from sklearn.svm import LinearSVC                   # noqa: PLC0415
    n = problem.n
    t0 = time.perf_counter()
    # a fixed random_state: liblinear shuffles the coordinates, and P* must be the same number
    # on every run (a study's cells are only comparable with one P*)
    model = LinearSVC(C=1.0 / (lam * n), loss="hinge", dual=True, fit_intercept=False, tol=tol,
                      max_iter=1_000_000, random_state=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        model.fit(problem.X, problem.y)
        converged = not any(issubclass(w.category, ConvergenceWarning) for w in caught)
    w = model.coef_.ravel().astype(np.float64)
    margins = problem.y * (problem.X @ w)
    primal = 0.5 * lam * float(w @ w) + float(np.mean(np.maximum(0.0, 1.0 - margins)))
    return {"method": "sklearn LinearSVC (liblinear dual CD, hinge, no intercept)",
            "C": 1.0 / (lam * n), "tol": tol, "primal": primal,
            "n_iter": int(np.max(model.n_iter_)), "converged": converged,
            "seconds": time.perf_counter() - t0}


def certify_optimum(problem, lam: float, *, gap_tol: float = 1e-8, sigma2: float | None = None,
                    backend: str = "numpy", batch_size: int | None = None,
                    max_epochs: float = 2000.0, cross_check: bool = True) -> dict:
    """``P*`` of ``P(w) = lam/2 ||w||^2 + mean hinge`` with a duality-gap certificate.

    Parameters
    ----------
    problem : Problem
    lam : float
        Regularisation, ``> 0``.
    gap_tol : float, default=1e-8
        Target duality gap of the SDCA solve.
    sigma2 : float, optional
        ``sigma^2`` of the row-normalised data (saves a Lanczos run).
    backend : str, default="numpy"
    batch_size : int, optional
        Mini-batch of the aggressive SDCA solve (default ``min(64, n)``); if it misses
        ``gap_tol`` within ``max_epochs``, safe SDCA with ``b = 1`` (provably convergent) runs too.
    max_epochs : float, default=2000
        Epoch cap of each SDCA attempt.
    cross_check : bool, default=True
        Also solve with LinearSVC (``tol=1e-10``) and keep the smaller primal value.

    Returns
    -------
    dict
        ``p_star`` (best primal value), ``lower_bound`` (best dual value), ``gap`` (their
        difference: ``0 <= p_star - P* <= gap``), ``gap_tol``, ``certified`` (``gap <=
        gap_tol``), ``attempts`` (the SDCA runs), ``liblinear`` (the cross-check, or None),
        ``liblinear_minus_sdca``, ``how`` (one sentence), ``seconds``.
    """
    if not lam > 0:
        raise ValueError(f"lam must be > 0, got {lam!r}")
    if not gap_tol > 0:
        raise ValueError(f"gap_tol must be > 0, got {gap_tol!r}")
    from .runner import _single_thread_blas  # noqa: PLC0415
    with _single_thread_blas():
        t0 = time.perf_counter()
        b = int(min(64, problem.n) if batch_size is None else batch_size)
        attempts = [_sdca_attempt(problem, lam, "aggressive", b, gap_tol, max_epochs, sigma2,
                                  backend)]
        if attempts[-1]["gap"] > gap_tol:
            attempts.append(_sdca_attempt(problem, lam, "safe", 1, gap_tol, max_epochs, sigma2,
                                          backend))
        best = min(attempts, key=lambda a: a["gap"])
        upper, lower = min(a["primal"] for a in attempts), max(a["dual"] for a in attempts)
        lib = _liblinear(problem, lam, 1e-10) if cross_check else None
        how = (f"{best['method']} with b={best['b']} run to duality gap {best['gap']:.2e} "
               f"({best['iterations']} iterations)")
        if lib is not None:
            upper = min(upper, lib["primal"])
            how += ("; cross-checked with scikit-learn LinearSVC (tol=1e-10), P* = the smaller "
                    "primal value")
        gap = upper - lower
        return {"p_star": upper, "lower_bound": lower, "gap": gap, "gap_tol": gap_tol,
                "certified": bool(gap <= gap_tol), "attempts": attempts, "liblinear": lib,
                "liblinear_minus_sdca": (lib["primal"] - best["primal"]) if lib is not None
                else None, "how": how, "lam": lam, "seconds": time.perf_counter() - t0}
