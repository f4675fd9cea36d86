"""Solver policy: the defaults that depend on the data or the backend, decided in one place.

The estimators validate their parameters and call these; what is measured behind each
rule is in BENCHMARKS.md.
"""

from __future__ import annotations

import math

#: the CPU backends (one core: every row costs the same whatever the batch)
CPU_BACKENDS = ("numpy", "numba")
#: ``batch_size="auto"`` on a device backend (an iteration costs about as much for 4096 rows
#: as for 1)
DEVICE_AUTO_BATCH = 4096
#: the smallest batch for ``bias="optimal"``: the optimal bias of a batch puts a margin at
#: exactly 1, so a batch of one row never moves ``w``, and on a9a batches of 2 and 4 stay at
#: the majority class's accuracy
MIN_OPTIMAL_BIAS_BATCH = 8
#: Pegasos' default cap with the doubling tail average: 2^6 epochs (10 with the others)
MAX_EPOCHS_DOUBLING = 64
#: Pegasos with ``batch_size="auto"`` on a CPU backend uses every row in every batch (the
#: deterministic subgradient method) up to this many rows.  Measured on 15-500 rows of a9a
#: and letter (C = 1 and 100, lam = 1e-4): at the same number of iterations the full batch
#: ends 10 to 100 times closer to the optimum than single rows, for n times the work per
#: iteration, which stays within milliseconds up to about 64 rows; it also makes an integer
#: sample weight and as many repeated rows give the same fit.  With ``max_iter=None`` a
#: full-batch fit may run as many iterations as single-row epochs run on this many rows: the
#: same cap for every n, so that a weighted fit and the fit on the repeated rows (more rows)
#: stop at the same iteration.
FULL_BATCH_ROWS = 64
#: SDCA's default cap, in epochs (it normally stops on ``tol`` first)
SDCA_EPOCHS = 100
#: ``dual="auto"`` with ``n_samples >= n_features`` takes the dual (SDCA) while
#: ``C * mean_i ||x_i||^2`` is at most this, the primal Newton solver above it (measured
#: crossover, see :func:`choose_solver`)
DUAL_MAX_C_SQNORM = 0.2

def batch_size(backend: str, n: int, batch_size) -> int:
    """The batch a fit runs with: ``"auto"`` is 1 on a CPU backend, where every row costs the
    same whatever the batch and the fewest epochs win, and ``min(n, DEVICE_AUTO_BATCH)`` on a
    device, where an iteration costs about as much for thousands of rows as for one; never
    more than ``n`` (a small one-vs-one or ordinal problem uses all its rows)."""
    k = batch_size
    if k == "auto":
        k = 1 if backend in CPU_BACKENDS else min(n, DEVICE_AUTO_BATCH)
    return int(min(k, n))


def default_max_iter(n: int, b: int, epochs: int = SDCA_EPOCHS) -> int:
    """``ceil(epochs n / b)``: the default iteration cap."""
    return int(math.ceil(epochs * n / b))


def pegasos_settings(backend: str, n: int, k, averaging: str, max_iter, bias: str,
                     stream: bool = False):
    """Pegasos' batch size, averaging and iteration cap for a fit of ``n`` rows.

    Parameters
    ----------
    backend : str
        The resolved backend name.
    n : int
    k : int or "auto"
    averaging : str
        ``"auto"``: ``"doubling"`` without ``max_iter`` (stopped by ``tol``), ``"tail"``
        with it, ``"none"`` for one chunk of a stream.
    max_iter : int or None
        None: :data:`MAX_EPOCHS_DOUBLING` epochs with the doubling average, 10 with the
        others, one for a chunk of a stream (:data:`FULL_BATCH_ROWS` for a full batch).
    bias : str
        ``"optimal"`` with ``"auto"`` takes at least :data:`MIN_OPTIMAL_BIAS_BATCH` rows.
    stream : bool
        One chunk of a stream (``partial_fit``).

    Returns
    -------
    k : int
    averaging : str
    max_iter : int
    """
    auto = k == "auto"
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
        max_iter = epochs * FULL_BATCH_ROWS if full else math.ceil(epochs * n / k)
    return k, averaging, int(max_iter)


def sdca_settings(backend: str, n: int, b, variant: str, max_iter, shrinking: bool):
    """SDCA's batch size, variant, iteration cap and shrinking for a fit of ``n`` rows.

    ``variant="auto"``: ``"safe"`` at ``b = 1`` (every variant takes the same step there,
    the aggressive test only adds work), ``"aggressive"`` above; ``max_iter=None``:
    :data:`SDCA_EPOCHS` epochs; shrinking on the CPU backends only.

    Returns
    -------
    b : int
    variant : str
    max_iter : int
    shrinking : bool
    """
    b = batch_size(backend, n, b)
    if variant == "auto":
        variant = "safe" if b == 1 else "aggressive"
    if max_iter is None:
        max_iter = default_max_iter(n, b)
    return b, variant, int(max_iter), bool(shrinking) and backend in CPU_BACKENDS


def choose_solver(n_samples: int, n_features: int, C: float, mean_sq_norm: float,
                  n_classes: int = 2, loss: str = "squared_hinge", dual="auto") -> str:
    """The solver ``gpusvm.LinearSVC`` runs: ``"sdca"`` (dual) or ``"newton"`` (primal).

    ``loss="hinge"`` has only the dual; ``dual=True``/``False`` choose it as in
    LinearSVC.  ``dual="auto"``:

    * more features than rows (text): SDCA.  Its epoch is one pass over the
      nonzeros, and it needs few of them, while every conjugate-gradient step of
      Newton costs two passes and their number grows with the dimension (imdb,
      news20 and 20 Newsgroups TF-IDF, every C from 0.01 to 100: SDCA 1.6 to 8
      times faster; BENCHMARKS.md, "gpusvm.LinearSVC").  The exception is
      handled by the estimator, not by this rule: SDCA (squared hinge) that has
      not converged after :data:`~gpusvm.estimators.linear_svc.SWITCH_EPOCHS` epochs hands over to Newton,
      started from its point, or earlier when its gap falls too slowly
      (:func:`sdca_hands_over`; news20 with 20 classes at ``C = 100``);
    * otherwise by ``C * mean_i ||x_i||^2``, which sets the conditioning of the
      dual (its coordinate curvature is ``||x_i||^2 + 1/(2C)``): SDCA up to
      :data:`DUAL_MAX_C_SQNORM` (0.2), Newton above.  At ``C = 0.01`` (0.03 to
      0.15 on a9a, w8a, ijcnn1, letter, pendigits) SDCA needs 4 epochs and is as
      fast as Newton or faster (pendigits: 0.03 s against 0.05 s); at ``C >= 1``
      SDCA needs tens of epochs (a9a: 136 at ``C = 1``) or stops at ``max_iter``
      (every one of them at ``C = 100``), while Newton takes 4 to 14 iterations
      (letter, 26 classes, ``C = 1``: 0.26 s against 0.53 s for SDCA).

    Parameters
    ----------
    n_samples, n_features : int
        Shape of the training data (without the intercept column).
    C : float
        LinearSVC's regularisation.
    mean_sq_norm : float
        ``mean_i ||x_i||^2`` of the training rows (the intercept column included).
    n_classes : int, default=2
        The number of classes (the rule does not depend on it today; kept so that
        callers pass what a rule may need).
    loss : {"hinge", "squared_hinge"}, default="squared_hinge"
    dual : bool or "auto", default="auto"

    The rule was measured on a CPU (compiled SDCA loops, SciPy or BLAS products for
    Newton); a GPU backend applies the same rule, both solvers running on the device,
    until a measurement there says otherwise.

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

    SDCA's certified gap falls about linearly in the epochs (geometrically), at a rate set
    by the conditioning of the dual, which a large ``C`` ruins.  From
    :data:`HANDOVER_MIN_EPOCHS` epochs on, at every certificate still above ``tol``, the
    rate is read over the second half of the run (the last certificate at or before half
    the epochs, against this one) and the gap projected: SDCA hands over when it would
    reach ``tol`` only after :data:`HANDOVER_PROJECTED_EPOCHS` epochs, or when the gap
    did not fall over that half.  Measured (``C = 100``, certificates of one fit, tol
    1e-4): news20 with 20 classes, gap 2.9e-2 at epoch 19 and 2.0e-2 at 72, projected
    ~830 epochs (it still had 5.6e-3 at 300): hands over at 72 instead of 200, which
    saved a third of the fit; 20 Newsgroups TF-IDF, 4.3e-4 at 46 and 3.3e-4 at 58,
    projected ~110 to 160 epochs all along: stays, and certifies at 154.

    Parameters
    ----------
    history : list of tuple
        The solver's certificates so far, ``(iteration, P, D, gap, seconds)``
        (:func:`gpusvm.solvers.sdca.sdca`'s ``history``).
    iterations_per_epoch : float
        ``n / b``.
    tol : float
        The gap at which SDCA stops.

    Returns
    -------
    bool
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
    ``4 d <= n``, SDCA otherwise (measured: BENCHMARKS.md, "Choosing C", 2 cores: Newton
    0.39 s against SDCA 1.6 s on a9a, 0.49 against 2.9 on w8a, 0.45 against 1.0 on ijcnn1;
    with 26 and 10 classes, whose problems share the block products and the compiled line
    searches, 1.7 against 4.4 on letter and 0.36 against 1.2 on pendigits; SDCA 6.2 against
    12.6 on imdb, whose columns outnumber a quarter of its rows).  ``n_problems`` (binary
    problems per model) does not enter the rule today."""
    if solver != "auto":
        return solver
    return "newton" if loss == "squared_hinge" and 4 * d <= n else "sdca"
