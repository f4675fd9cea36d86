"""Solver policy: the defaults that depend on the data or the backend, decided in one place.

The estimators validate their parameters and call these; what is measured behind each
rule is in BENCHMARKS.md.
"""

from __future__ import annotations

import math
from typing import NamedTuple

#: the CPU backends (one core: every row costs the same whatever the batch)
CPU_BACKENDS = ("numpy", "numba")
#: ``batch_size="auto"`` on a device backend when the data are not known (the estimators
#: choose from them, :func:`device_batch`; the C search, :class:`~gpusvm.SDCASVCCV`, and
#: ``partial_fit`` keep this)
DEVICE_AUTO_BATCH = 4096
#: the smallest batch for ``bias="optimal"``: the optimal bias of a batch puts a margin at
#: exactly 1, so a batch of one row never moves ``w``, and on a9a batches of 2 and 4 stay at
#: the majority class's accuracy
MIN_OPTIMAL_BIAS_BATCH = 8
#: Pegasos' default cap with the doubling tail average: 2^6 epochs (10 with the others)
MAX_EPOCHS_DOUBLING = 64
#: Pegasos with ``batch_size="auto"`` on a CPU backend uses every row in every batch up to
#: this many rows: 10 to 100 times closer to the optimum than single rows at the same
#: iterations, and an integer sample weight gives the fit of as many repeated rows.  With
#: ``max_iter=None`` it runs as many iterations as single-row epochs on this many rows: one
#: cap for every n, so a weighted fit and the fit on the repeated rows stop together.
FULL_BATCH_ROWS = 64
#: SDCA's default cap, in epochs (it normally stops on ``tol`` first)
SDCA_EPOCHS = 100
#: ``dual="auto"`` with ``n_samples >= n_features`` takes SDCA while ``C * mean_i ||x_i||^2``
#: is at most this, Newton above it (the measured crossover, :func:`choose_solver`)
DUAL_MAX_C_SQNORM = 0.2


#: ``gpusvm.LinearSVC`` iterates in float32 (half the memory traffic) unless ``tol`` is below
#: this: float32 margins stop the dual's steps short of a relative gap of about 1e-7 (the
#: 16-row problem of scikit-learn's ``test_linearsvm_liblinear_sample_weight``, hinge: gaps of
#: 3e-9 to 6e-7 after 1,000 epochs; 1e-12 in float64 after 90-190), so a tighter ``tol``
#: iterates in float64 as liblinear does
FLOAT32_MIN_TOL = 1e-6


def working_dtype(tol: float) -> str:
    """The dtype ``gpusvm.LinearSVC`` fits in: ``"float32"``, ``"float64"`` when ``tol`` is
    below :data:`FLOAT32_MIN_TOL`."""
    return "float64" if tol < FLOAT32_MIN_TOL else "float32"


def batch_size(backend: str, n: int, batch_size) -> int:
    """The batch a fit runs with: ``"auto"`` is 1 on a CPU backend (the fewest epochs win) and
    ``min(n, DEVICE_AUTO_BATCH)`` on a device when the data are not known (the estimators
    choose it from the data, :func:`device_batch`); never more than ``n``."""
    k = batch_size
    if k == "auto":
        k = 1 if backend in CPU_BACKENDS else min(n, DEVICE_AUTO_BATCH)
    return int(min(k, n))


def _model_sigma2(n: int, sigma2: float) -> float:
    """``sigma^2`` in the range :func:`gpusvm.spectral.beta_b` accepts (all-zero rows give 0)."""
    return min(max(float(sigma2), 1.0 / n), 1.0)


def device_batch(n: int, batch_size, lam: float, sigma2: float, mean_row_nnz: float,
                 solver: str = "sdca") -> tuple[int, float]:
    """The batch of a fit on a device backend and its ``beta_b``: ``batch_size="auto"`` is the
    batch that minimises the predicted device time (:func:`device_batch_size`).

    A batch of ``n`` overlapping rows buys only ``n / beta_n = 1 / sigma^2`` coordinate steps
    (a9a: about 2 an epoch), so a fixed batch (the whole set of a few thousand rows) stalls;
    the model weighs those iterations against the cost of each on the device.

    Parameters
    ----------
    n : int
        Rows.
    batch_size : int or "auto"
    lam : float
        Regularisation ``lam > 0``.
    sigma2 : float
        ``sigma^2`` of the row-normalised training rows (:func:`gpusvm.spectral.sigma_squared`).
    mean_row_nnz : float
        Nonzeros per row.
    solver : {"sdca", "pegasos"}, default="sdca"

    Returns
    -------
    (int, float)
        The batch, in ``[1, n]``, and its ``beta_b`` (eq. 11).
    """
    from .. import spectral  # noqa: PLC0415  (policy stays importable without numpy work)
    s2 = _model_sigma2(n, sigma2)
    if batch_size == "auto":
        b = device_batch_size(n, lam, s2, mean_row_nnz, solver)
    else:
        b = int(min(batch_size, n))
    return b, spectral.beta_b(b, n, s2)


def epoch_iterations(backend: str, n: int, b: int, beta: float = 1.0) -> float:
    """The iterations of one epoch of a default cap (``max_iter`` counted in epochs).

    ``n / b`` on a CPU backend; ``n beta_b / b`` on a device: Takáč et al.'s bound (Theorems
    1-2) takes ``beta_b / b`` times the iterations of ``b = 1`` at any batch, so a device's
    cap allows the progress of as many single-row epochs, whatever the batch (at ``b = n``
    on rows alike, ``n sigma^2`` iterations an epoch, not one).

    Parameters
    ----------
    backend : str
        The backend's name.
    n, b : int
        Rows and batch size.
    beta : float, default=1.0
        ``beta_b`` of the batch (:func:`device_batch`); not used on a CPU.

    Returns
    -------
    float
    """
    return n / b * (1.0 if backend in CPU_BACKENDS else max(float(beta), 1.0))


#: the device's seconds per iteration, ``t(b) = t0 + b * mean_row_nnz * per_nnz``: ``t0`` of
#: each solver and ``per_nnz`` fitted to the H200's replayed segments (BENCHMARKS.md, "Per
#: iteration, replayed segment", 2026-11-25: imdb and news20 at k = 256 and 4096; about 3 %
#: of the traffic limit, which the kernels' rewrite is to raise; refit then)
DEVICE_ITERATION_SECONDS = {"pegasos": 17e-6, "sdca": 32e-6}
DEVICE_SECONDS_PER_NNZ = 0.05e-9


def predicted_device_seconds(b: int, n: int, lam: float, sigma2: float, mean_row_nnz: float,
                             solver: str = "sdca", *, t0: float | None = None,
                             per_nnz: float | None = None) -> float:
    """Predicted device time to a fixed tolerance at batch ``b``, up to a constant factor.

    Mini-batch SDCA and Pegasos need about ``(n + beta_b / lam) / b`` iterations times a
    factor of the tolerance alone (Takáč et al. 2013, Theorems 1-2: the batch divides the
    iterations by ``b / beta_b`` when ``beta_b / lam`` dominates, by ``b`` when ``n`` does),
    each costing :data:`DEVICE_ITERATION_SECONDS` plus :data:`DEVICE_SECONDS_PER_NNZ` for
    every nonzero of the batch.

    Parameters
    ----------
    b, n : int
        Batch size ``1 <= b <= n`` and rows.
    lam : float
        Regularisation ``lam > 0`` (``1 / (C n)``).
    sigma2 : float
        ``sigma^2`` of the row-normalised data (:func:`gpusvm.spectral.sigma_squared`).
    mean_row_nnz : float
        Nonzeros per row.
    solver : {"sdca", "pegasos"}
        Whose per-iteration cost.
    t0, per_nnz : float, optional
        Replace the fitted cost model (seconds per iteration, per nonzero).

    Returns
    -------
    float
        ``(n + beta_b / lam) / b * (t0 + b * mean_row_nnz * per_nnz)``.
    """
    from .. import spectral  # noqa: PLC0415  (policy stays importable without numpy work)
    t0 = DEVICE_ITERATION_SECONDS[solver] if t0 is None else t0
    per_nnz = DEVICE_SECONDS_PER_NNZ if per_nnz is None else per_nnz
    iterations = (n + spectral.beta_b(b, n, sigma2) / lam) / b
    return iterations * (t0 + b * mean_row_nnz * per_nnz)


def device_batch_size(n: int, lam: float, sigma2: float, mean_row_nnz: float,
                      solver: str = "sdca", **cost) -> int:
    """The power of two (or ``n``) that minimises :func:`predicted_device_seconds`.

    With ``n`` large the prediction is ``A t0 / b + B c b + const`` (``A = n + (1 -
    sigma^2) / lam``, ``B = sigma^2 / lam``, ``c`` the cost of a row), least at
    ``b* = sqrt(A t0 / (B c))``: a larger ``sigma^2`` (rows alike, hot columns) or a costlier
    row asks for a smaller batch, a dearer launch for a larger one.

    Notes
    -----
    ``beta_b`` is the safe step's worst case; the aggressive variant the device runs measured
    below it (imdb, ``b = 256``: 1.3 against 31).  On a9a (4,000 rows, ``C = 0.1`` and 1) the
    iterations that SDCA needed to a gap of 1e-4 were flat from ``b = 64`` to ``n``, as the
    model's are past ``b ~ 1/sigma^2``, and rose below it; the default of
    ``batch_size="auto"`` on a device (:func:`device_batch`).

    Returns
    -------
    int
        The batch size, in ``[1, n]``.
    """
    n = int(n)
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    candidates = sorted({min(n, 1 << j) for j in range(max(1, n.bit_length()) + 1)} | {n})
    return min(candidates, key=lambda b: predicted_device_seconds(
        b, n, lam, sigma2, mean_row_nnz, solver, **cost))


def default_max_iter(n: int, b: int, epochs: int = SDCA_EPOCHS, backend: str = "numpy",
                     beta: float = 1.0) -> int:
    """``ceil(epochs n / b)``: the default iteration cap; on a device ``ceil(epochs n beta_b / b)``
    (:func:`epoch_iterations`)."""
    return int(math.ceil(epochs * epoch_iterations(backend, n, b, beta)))


def pegasos_settings(backend: str, n: int, k, averaging: str, max_iter, bias: str,
                     stream: bool = False, *, lam: float | None = None,
                     sigma2: float | None = None, mean_row_nnz: float | None = None):
    """Pegasos' ``(k, averaging, max_iter)`` for a fit of ``n`` rows on ``backend`` (a name).

    ``averaging="auto"``: ``"doubling"`` without ``max_iter`` (stopped by ``tol``),
    ``"tail"`` with it, ``"none"`` for one chunk of a stream (``stream``, ``partial_fit``).
    ``max_iter=None``: :data:`MAX_EPOCHS_DOUBLING` epochs with the doubling average, 10 with
    the others, one for a chunk (:data:`FULL_BATCH_ROWS` iterations an epoch for a full
    batch).  ``bias="optimal"`` with ``k="auto"`` takes at least
    :data:`MIN_OPTIMAL_BIAS_BATCH` rows.  On a device, with ``lam``, ``sigma2`` and
    ``mean_row_nnz`` given (a whole problem, not a stream's chunk), ``k="auto"`` is
    :func:`device_batch`'s and an epoch of the cap :func:`epoch_iterations`' ``n beta_k / k``.
    """
    auto = k == "auto"
    beta = 1.0
    if backend not in CPU_BACKENDS and not stream and sigma2 is not None:
        k, beta = device_batch(n, k, lam, sigma2, mean_row_nnz, "pegasos")
    else:
        k = batch_size(backend, n, k)
    full = auto and not stream and backend in CPU_BACKENDS and n <= FULL_BATCH_ROWS
    if full:
        k = n
    if bias == "optimal" and auto:               # the batch needs rows
        k = max(k, min(n, MIN_OPTIMAL_BIAS_BATCH))
    if averaging == "auto":
        averaging = "none" if stream else ("doubling" if max_iter is None else "tail")
    if max_iter is None:
        epochs = 1 if stream else (MAX_EPOCHS_DOUBLING if averaging == "doubling" else 10)
        max_iter = epochs * FULL_BATCH_ROWS if full else default_max_iter(n, k, epochs, backend,
                                                                           beta)
    return k, averaging, int(max_iter)


class SDCASettings(NamedTuple):
    """What :func:`sdca_settings` resolves."""

    #: the batch size
    b: int
    #: the step variant
    variant: str
    #: the iteration cap
    max_iter: int
    #: LIBLINEAR's shrinking
    shrinking: bool
    #: iterations of one epoch of the cap (:func:`epoch_iterations`)
    epoch: float


def sdca_settings(backend: str, n: int, b, variant: str, max_iter, shrinking: bool, *,
                  lam: float | None = None, sigma2: float | None = None,
                  mean_row_nnz: float | None = None, epochs: int | None = None) -> SDCASettings:
    """SDCA's settings for a fit of ``n`` rows (:class:`SDCASettings`).

    ``variant="auto"``: ``"safe"`` at ``b = 1`` (every variant takes the same step there,
    the aggressive test only adds work), ``"aggressive"`` above; ``max_iter=None``:
    ``epochs`` (default :data:`SDCA_EPOCHS`) epochs; shrinking on the CPU backends only.
    On a device with ``lam``, ``sigma2`` and ``mean_row_nnz`` given, ``b="auto"`` is
    :func:`device_batch`'s choice and an epoch of the cap :func:`epoch_iterations`'
    ``n beta_b / b`` iterations (without them ``min(n, DEVICE_AUTO_BATCH)`` and ``n / b``).
    ``epochs`` replaces ``max_iter`` (``gpusvm.LinearSVC`` counts its cap in epochs).
    """
    beta = 1.0
    if backend not in CPU_BACKENDS and sigma2 is not None:
        b, beta = device_batch(n, b, lam, sigma2, mean_row_nnz, "sdca")
    else:
        b = batch_size(backend, n, b)
    if variant == "auto":
        variant = "safe" if b == 1 else "aggressive"
    epoch = n / b * beta
    if epochs is not None:
        # 0 epochs run no iteration (LinearSVC(max_iter=0): zeros, as scikit-learn's)
        max_iter = 0 if epochs <= 0 else max(int(math.ceil(epochs * epoch)), 1)
    elif max_iter is None:
        max_iter = int(math.ceil(SDCA_EPOCHS * epoch))
    return SDCASettings(b, variant, int(max_iter), bool(shrinking) and backend in CPU_BACKENDS,
                        epoch)


def choose_solver(n_samples: int, n_features: int, C: float, mean_sq_norm: float,
                  n_classes: int = 2, loss: str = "squared_hinge", dual="auto") -> str:
    """The solver ``gpusvm.LinearSVC`` runs: ``"sdca"`` (dual) or ``"newton"`` (primal).

    ``loss="hinge"`` has only the dual; ``dual=True``/``False`` choose as in LinearSVC.
    ``dual="auto"`` (measured on a CPU, BENCHMARKS.md, "gpusvm.LinearSVC"; a GPU backend
    applies the same rule until a measurement there says otherwise):

    * more features than rows (text): SDCA, whose epoch is one pass over the nonzeros and
      which needs few, while every CG step of Newton costs two passes and their number grows
      with the dimension (the estimator hands a slow SDCA fit over to Newton,
      :func:`sdca_hands_over`);
    * otherwise by ``C * mean_i ||x_i||^2``, which sets the dual's conditioning (its
      coordinate curvature is ``||x_i||^2 + 1/(2C)``): SDCA up to :data:`DUAL_MAX_C_SQNORM`,
      Newton above.

    Parameters
    ----------
    n_samples, n_features : int
        Shape of the training data (without the intercept column).
    C : float
        LinearSVC's regularisation.
    mean_sq_norm : float
        ``mean_i ||x_i||^2`` of the training rows (the intercept column included).
    n_classes : int, default=2
        The number of classes (not used by the rule today).
    loss : {"hinge", "squared_hinge"}, default="squared_hinge"
    dual : bool or "auto", default="auto"

    Returns
    -------
    {"sdca", "newton"}
    """
    if loss == "hinge" or dual is True:
        return "sdca"
    if dual is False:
        return "newton"
    if n_features > n_samples:
        return "sdca"
    return "sdca" if C * mean_sq_norm <= DUAL_MAX_C_SQNORM else "newton"


#: ``gpusvm.LinearSVC``'s hand-over (:func:`sdca_hands_over`): looked at from this epoch on
HANDOVER_MIN_EPOCHS = 50
#: ... and taken when SDCA's certified gap, at the rate it fell over the second half of the
#: epochs run, would reach ``tol`` only after this many epochs (twice the 200 at which the
#: estimator hands over anyway, :data:`~gpusvm.estimators.linear_svc.SWITCH_EPOCHS`)
HANDOVER_PROJECTED_EPOCHS = 400


def sdca_hands_over(history, iterations_per_epoch: float, tol: float) -> bool:
    """Whether SDCA should stop for Newton to finish (``gpusvm.LinearSVC``, ``dual="auto"``).

    SDCA's certified gap falls geometrically in the epochs, at a rate set by the dual's
    conditioning, which a large ``C`` ruins.  From :data:`HANDOVER_MIN_EPOCHS` epochs on, at
    every certificate of ``history`` (:func:`gpusvm.solvers.sdca.sdca`'s rows ``(iteration,
    P, D, gap, seconds)``) still above ``tol``, the rate over the second half of the run (the
    last certificate at or before half the epochs, against this one) projects the gap: SDCA
    hands over when it would reach ``tol`` only after :data:`HANDOVER_PROJECTED_EPOCHS`
    epochs, or when the gap did not fall over that half (measurements: BENCHMARKS.md,
    "gpusvm.LinearSVC").  ``iterations_per_epoch`` is ``n / b``.
    """
    if not history:
        return False
    t, gap = history[-1][0], history[-1][3]
    epochs = t / iterations_per_epoch
    if epochs < HANDOVER_MIN_EPOCHS or gap <= tol:
        return False
    base = [row for row in history if row[0] <= t / 2]
    if not base:
        return False
    t0, gap0 = base[-1][0], base[-1][3]
    if gap >= gap0:                                 # no progress over the second half
        return True
    rate = math.log(gap0 / gap) / ((t - t0) / iterations_per_epoch)   # per epoch
    return epochs + math.log(gap / tol) / rate > HANDOVER_PROJECTED_EPOCHS


def choose_cv_solver(loss: str, n: int, d: int, n_problems: int, solver: str = "auto") -> str:
    """SDCASVCCV's solver: ``"auto"`` takes Newton for the squared hinge on data with
    ``4 d <= n``, SDCA otherwise (measured: BENCHMARKS.md, "Choosing C").  ``n_problems``
    (binary problems per model) does not enter the rule today."""
    if solver != "auto":
        return solver
    return "newton" if loss == "squared_hinge" and 4 * d <= n else "sdca"
