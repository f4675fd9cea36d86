r"""Spectral quantities of the data that govern mini-batch speedups.

Takáč, Bijral, Richtárik & Srebro (2013) show that the parallelisation speedup
of mini-batch Pegasos (Theorem 1) and of safe mini-batch SDCA (Theorem 2) is
controlled by

.. math::

    \sigma^2 = \frac{\|X\|^2}{n}, \qquad
    \beta_b = 1 + \frac{(b - 1)(n \sigma^2 - 1)}{n - 1} \quad (\text{eq. 11}),

where ``||X||`` is the largest singular value of the ``n x d`` data matrix,
whose rows are assumed to satisfy ``max_i ||x_i|| <= 1``.  Then
``1/n <= sigma^2 <= 1``, ``1 <= beta_b <= b`` and the predicted speedup of a
mini-batch of size ``b`` over ``b = 1`` is ``b / beta_b``: essentially linear
while ``b <= 1/sigma^2``.

With ``normalize=True`` (the default) :func:`sigma_squared` uses ``X_hat``, the rows
``x_i / ||x_i||`` (zero rows stay zero), which is what the SDCA step of :mod:`gpusvm.solvers.sdca` needs for
*any* row norms: that step divides by ``||x_i||^2``, so its separable surrogate is
``beta sum_i delta_i^2 Q_ii``, and Lemma 1 of the paper applied to the unit-diagonal
``Q_hat = diag(Q)^{-1/2} Q diag(Q)^{-1/2}`` gives the safe ``beta_b`` from the spectral norm
of ``X_hat``. ``normalize=False`` uses ``X`` as given; for unit-norm rows (the paper's
setting) both coincide.

The largest singular value comes from Lanczos iterations (``svds``: ARPACK, or cupyx's for a
CuPy matrix) or from power iteration on the smaller Gram matrix, in the matrix's own array
module, so a device matrix never leaves the device.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

__all__ = ["sigma_squared", "row_normalize", "beta_b", "predicted_speedup", "speedup_table",
           "SpeedupRow", "add_cli", "run_cli"]

SPECTRAL_METHODS = ("lanczos", "power")


def _modules(X):
    """``(xp, xsp, svds)`` for a NumPy/SciPy or a CuPy/cupyx matrix."""
    if type(X).__module__.split(".")[0] in ("cupy", "cupyx"):
        import cupy  # noqa: PLC0415  (optional, device only)
        import cupyx.scipy.sparse as csp  # noqa: PLC0415
        from cupyx.scipy.sparse.linalg import svds  # noqa: PLC0415
        return cupy, csp, svds
    import scipy.sparse as ssp  # noqa: PLC0415
    from scipy.sparse.linalg import svds  # noqa: PLC0415
    return np, ssp, svds


def _as_float64_matrix(X):
    xp, xsp, _ = _modules(X)
    if xsp.issparse(X):
        return xsp.csr_matrix(X, dtype=xp.float64)
    A = xp.asarray(X, dtype=xp.float64)
    if A.ndim != 2:
        raise ValueError(f"X must be a 2-d matrix, got an array of shape {A.shape}")
    return A


def row_normalize(X):
    """Rows ``x_i / ||x_i||`` of ``X`` in float64; all-zero rows stay zero.

    Parameters
    ----------
    X : array or sparse matrix of shape (n, d)
        NumPy/SciPy or CuPy/cupyx; the result lives in the same array module.

    Returns
    -------
    Matrix of shape (n, d), CSR when ``X`` is sparse.
    """
    xp, xsp, _ = _modules(X)
    A = _as_float64_matrix(X)
    sq = xp.asarray(A.multiply(A).sum(axis=1)).ravel() if xsp.issparse(A) else xp.sum(A * A, axis=1)
    norms = xp.sqrt(sq)
    inv = xp.where(norms > 0, 1.0 / xp.where(norms > 0, norms, 1.0), 0.0)
    if xsp.issparse(A):
        return (xsp.diags(inv) @ A).tocsr()
    return A * inv[:, None]


def _largest_sv_sq_power(A, xp, tol: float, max_iter: int, seed: int) -> float:
    """``||A||^2`` by power iteration on ``A A^T`` or ``A^T A`` (the smaller one)."""
    n, d = A.shape
    rng = np.random.default_rng(seed)
    left = n <= d
    z = xp.asarray(rng.standard_normal(n if left else d))
    z /= xp.linalg.norm(z)
    est = 0.0
    for _ in range(max_iter):
        g = A @ (A.T @ z) if left else A.T @ (A @ z)       # Gram-matrix product
        new = float(xp.linalg.norm(g))                      # synchronises a device once per step
        if new == 0.0:
            return 0.0
        z = g / new
        if abs(new - est) <= tol * new:
            return new
        est = new
    return est


def sigma_squared(X, *, normalize: bool = True, method: str = "lanczos", tol: float = 1e-10,
                  max_iter: int = 10_000, seed: int = 0) -> float:
    r"""``sigma^2 = ||X||^2 / n`` (Takáč et al. 2013, Sec. 3), of the row-normalised data by default.

    Parameters
    ----------
    X : array or sparse matrix of shape (n, d)
        NumPy/SciPy or CuPy/cupyx (the computation stays in that array module).
    normalize : bool, default=True
        Use the rows ``x_i / ||x_i||`` (zero rows stay zero): the ``sigma^2`` that the paper
        assumes (``max ||x_i|| <= 1``) and that the SDCA step needs for any row norms (see the
        module docstring). ``False`` uses ``X`` as given.
    method : {"lanczos", "power"}, default="lanczos"
        Lanczos iterations of ``svds`` (ARPACK on the CPU), or power iteration.
    tol : float, default=1e-10
        Relative tolerance on the largest singular value (``svds``) or on the Rayleigh
        quotient ``||A A^T z||`` of the power iteration.
    max_iter : int, default=10000
        Iteration cap of the power iteration / of ARPACK.
    seed : int, default=0
        Seed of the start vector (results are deterministic).

    Returns
    -------
    float
        ``||X||_2^2 / n``; with ``normalize=True`` it lies in ``[1/n, 1]`` (``0`` when every
        row is zero).
    """
    if method not in SPECTRAL_METHODS:
        raise ValueError(f"method must be one of {SPECTRAL_METHODS}, got {method!r}")
    xp, xsp, svds = _modules(X)
    A = row_normalize(X) if normalize else _as_float64_matrix(X)
    n, d = A.shape
    if n == 0 or d == 0:
        raise ValueError(f"X must have at least one row and one column, got shape {(n, d)}")
    if xsp.issparse(A) and A.nnz == 0:
        return 0.0
    if min(n, d) < 3:
        # svds needs k < min(n, d); the Gram matrix is at most 2 x 2: exact eigenvalue
        G = A @ A.T if n <= d else A.T @ A
        G = G.toarray() if xsp.issparse(G) else G
        top = float(xp.linalg.eigvalsh(xp.asarray(G))[-1])
    elif method == "power":
        top = _largest_sv_sq_power(A, xp, tol, max_iter, seed)
    else:
        rng = np.random.default_rng(seed)
        v0 = xp.asarray(rng.standard_normal(min(n, d)))
        start = {"v0": v0} if xp is np else {}      # cupyx's svds (thick-restart Lanczos) has no v0
        s = svds(A, k=1, which="LM", tol=tol, maxiter=max_iter, return_singular_vectors=False, **start)
        top = float(s[0]) ** 2
    return top / n


def beta_b(b: int, n: int, sigma2: float) -> float:
    r"""``beta_b = 1 + (b - 1)(n sigma^2 - 1)/(n - 1)`` (Takáč et al. 2013, eq. 11).

    Parameters
    ----------
    b : int
        Mini-batch size, ``1 <= b <= n``.
    n : int
        Number of examples.
    sigma2 : float
        ``sigma^2`` of data with ``max ||x_i|| <= 1`` (see :func:`sigma_squared`), in
        ``[1/n, 1]``; values outside by less than ``1e-9`` relative (rounding of the singular
        value) are clipped.

    Returns
    -------
    float
        ``beta_b``, in ``[1, b]``; ``beta_1 = 1`` and ``beta_n = n sigma^2``.
    """
    b, n = int(b), int(n)
    if n < 1 or not 1 <= b <= n:
        raise ValueError(f"the batch size must satisfy 1 <= b <= n={n}, got b={b}")
    lo, hi = 1.0 / n, 1.0
    if not (lo * (1 - 1e-9) <= sigma2 <= hi * (1 + 1e-9)):
        raise ValueError(
            f"sigma2={sigma2!r} is outside [1/n, 1] = [{lo:.6g}, 1]: it must be sigma^2 of data "
            "with max row norm <= 1; compute it with sigma_squared(X, normalize=True)")
    if n == 1:
        return 1.0
    s = min(max(float(sigma2), lo), hi)
    return 1.0 + (b - 1) * (n * s - 1.0) / (n - 1)


def predicted_speedup(b: int, n: int, sigma2: float) -> float:
    """Predicted speedup ``b / beta_b`` of mini-batch size ``b`` over ``b = 1`` (Theorems 1-2).

    Parameters
    ----------
    b, n, sigma2
        As in :func:`beta_b`.

    Returns
    -------
    float
        In ``[1, b]``.
    """
    return b / beta_b(b, n, sigma2)


class SpeedupRow(NamedTuple):
    """One row of :func:`speedup_table`."""

    #: mini-batch size
    b: int
    #: ``beta_b`` of eq. (11)
    beta_b: float
    #: predicted speedup ``b / beta_b``
    speedup: float


def speedup_table(n: int, sigma2: float, batch_sizes=None) -> list[SpeedupRow]:
    """``beta_b`` and ``b / beta_b`` for ``b = 1, 2, 4, ..., n`` (``n`` included).

    Parameters
    ----------
    n, sigma2
        As in :func:`beta_b`.
    batch_sizes : iterable of int, optional
        Batch sizes to tabulate instead of the powers of two.

    Returns
    -------
    list of SpeedupRow
    """
    if batch_sizes is None:
        sizes = [1 << k for k in range(int(math.floor(math.log2(n))) + 1)] if n >= 1 else []
        if not sizes or sizes[-1] != n:
            sizes.append(n)
    else:
        sizes = [int(b) for b in batch_sizes]
    return [SpeedupRow(b, beta_b(b, n, sigma2), predicted_speedup(b, n, sigma2)) for b in sizes]


def add_cli(subparsers) -> None:
    """Register the ``spectral`` subcommand (``func=run_cli``) on an ``argparse`` subparsers object.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
        From ``parser.add_subparsers()``.
    """
    import argparse  # noqa: PLC0415
    p = subparsers.add_parser(
        "spectral", help="sigma^2, 1/sigma^2 and the predicted mini-batch speedups of a data set",
        description="Print sigma^2 = ||X||^2/n (largest singular value, row-normalised data by "
                    "default), 1/sigma^2 and the table of beta_b and b/beta_b for b = 1, 2, 4, "
                    "..., n (Takáč et al. 2013, eq. 11).")
    p.add_argument("data", metavar="DATA", help="svmlight/LIBSVM file (plain or .gz)")
    p.add_argument("--normalize", action=argparse.BooleanOptionalAction, default=True,
                   help="scale the rows to unit norm first (default: yes)")
    p.add_argument("--n-features", type=int, default=None,
                   help="number of features (default: inferred from the file)")
    p.set_defaults(func=run_cli)


def run_cli(args) -> int:
    """Run the ``spectral`` subcommand: print sigma^2, 1/sigma^2 and the speedup table.

    Parameters
    ----------
    args : argparse.Namespace
        With ``data``, ``normalize`` and ``n_features``.

    Returns
    -------
    int
        Exit status: 0 on success, 2 when the file cannot be read.
    """
    import sys  # noqa: PLC0415

    from .datasets import load_svmlight  # noqa: PLC0415
    try:
        X, _ = load_svmlight(args.data, n_features=args.n_features, dtype=np.float64)
    except (OSError, ValueError) as exc:
        print(f"gpusvm spectral: cannot read {args.data}: {exc}", file=sys.stderr)
        return 2
    n, d = X.shape
    max_norm = float(np.sqrt(X.multiply(X).sum(axis=1).max()))
    s2 = sigma_squared(X, normalize=args.normalize)
    what = "row-normalised data" if args.normalize else "data as given"
    print(f"{args.data}: n={n} d={d} nnz={X.nnz} max row norm={max_norm:.6g}")
    print(f"sigma^2 = ||X||^2/n ({what}) = {s2:.6g}")
    print(f"1/sigma^2 = {1.0 / s2:.6g}" if s2 > 0 else "1/sigma^2 = inf (all rows are zero)")
    if not args.normalize and max_norm > 1.0 + 1e-6:
        print(f"beta_b assumes max row norm <= 1 but it is {max_norm:.6g} here: rerun with "
              "--normalize for the table")
        return 0
    if s2 <= 0:
        return 0
    print(f"{'b':>10} {'beta_b':>12} {'b/beta_b':>12}")
    for row in speedup_table(n, s2):
        print(f"{row.b:>10d} {row.beta_b:>12.4f} {row.speedup:>12.4f}")
    return 0
