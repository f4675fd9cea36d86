r"""Worker-local compiled loops of the distributed solvers (numba, over CSR arrays).

Everything a worker computes between two communications lives here, in small
``@njit(cache=True, nogil=True)`` functions over the CSR triple
``(indptr, indices, data)`` of the worker's row block, so that each can later
be exchanged for a backend's segment primitive without touching the
distributed drivers.  ``nogil`` lets the worker's event loop (heartbeats,
transfers) run while a loop computes.

Local CoCoA+ solver (Ma et al. 2015, Algorithm 1 with the local subproblem
(9) and ``sigma' = K``; Smith et al. 2018, Algorithm 1 and eq. (10)).  With
``v = w + sigma' u`` and ``u = (1/(lam n)) sum_{i in P_k} dalpha_i y_i x_i`` the
coordinate maximiser of the local subproblem in ``dalpha_i`` is

``delta_i = clip_[-a_i, 1 - a_i](lam n (1 - y_i <v, x_i>) / (K ||x_i||^2))``,
``a_i = alpha_i + dalpha_i``,

and the step moves ``v`` by ``K delta_i y_i x_i / (lam n)``.  Writing
``lam' = lam / K`` this is exactly plain SDCA (``beta = 1``) with
``lam'`` and the *global* ``n``:
``delta_i = clip(lam' n (1 - y_i <v, x_i>) / ||x_i||^2)``,
``v += delta_i y_i x_i / (lam' n)``, started at ``v = w``; the worker's
update is ``u_k = (v - w) / K``.  (Derivation: the local objective's
quadratic term is ``(lam/2) K ||u||^2`` and its linear term ``-<w, u> lam``
per unit of ``u``; the coordinate step solves a 1-D box-constrained
quadratic with curvature ``K ||x_i||^2 / (lam n)`` and slope
``(1 - y_i <w + K u, x_i>) / n`` at ``delta = 0``.)
"""

from __future__ import annotations

import numpy as np

try:  # numba is a hard requirement of the distributed estimators (see gpusvm.dask)
    from numba import njit
except ImportError as exc:  # pragma: no cover - exercised only without numba
    raise ImportError(
        "gpusvm.dask needs numba for its worker-local loops: pip install \"gpusvm[dask]\"") from exc


@njit(cache=True, nogil=True)
def row_sq_norms(indptr, data):
    """Squared Euclidean norm of every CSR row.

    Parameters
    ----------
    indptr : ndarray of int, shape (n + 1,)
    data : ndarray of float64, shape (nnz,)

    Returns
    -------
    ndarray of float64, shape (n,)
    """
    n = indptr.shape[0] - 1
    out = np.zeros(n)
    for i in range(n):
        s = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            s += data[p] * data[p]
        out[i] = s
    return out


@njit(cache=True, nogil=True)
def hinge_sum(indptr, indices, data, y, w, scale):
    """``sum_i max(0, 1 - y_i scale <w, x_i>)`` over the block's rows.

    Parameters
    ----------
    indptr, indices, data : CSR arrays of the block
    y : ndarray of float64, labels in {-1, +1}
    w : ndarray of float64, shape (d,)
    scale : float
        ``w`` is used as ``scale * w`` (Pegasos keeps ``w = a v``).

    Returns
    -------
    float
    """
    n = indptr.shape[0] - 1
    s = 0.0
    for i in range(n):
        m = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            m += data[p] * w[indices[p]]
        z = 1.0 - y[i] * scale * m
        if z > 0.0:
            s += z
    return s


@njit(cache=True, nogil=True)
def dual_weights(indptr, indices, data, y, alpha, d):
    """``X_k^T (alpha_k * y_k)``, the block's share of ``lam n w(alpha)``.

    Parameters
    ----------
    indptr, indices, data : CSR arrays of the block
    y, alpha : ndarray of float64, shape (n_k,)
    d : int

    Returns
    -------
    ndarray of float64, shape (d,)
    """
    out = np.zeros(d)
    n = indptr.shape[0] - 1
    for i in range(n):
        c = alpha[i] * y[i]
        if c != 0.0:
            for p in range(indptr[i], indptr[i + 1]):
                out[indices[p]] += c * data[p]
    return out


@njit(cache=True, nogil=True)
def local_sdca_epoch(indptr, indices, data, y, sqnorm, alpha, dalpha, v, lam_local_n, order):
    """CoCoA+ local solver: SDCA steps (``beta = 1``) on the block's local subproblem.

    Performs one coordinate step for every entry of ``order`` (e.g. one or more
    permutations of the block's rows), on the local subproblem of Ma et al.
    (2015), eq. (9), with ``sigma' = K``: ordinary SDCA with ``lam' = lam / K``
    and the global ``n``.  See the module docstring for the derivation.

    Parameters
    ----------
    indptr, indices, data : CSR arrays of the block (data float64)
    y : ndarray of float64, labels in {-1, +1}
    sqnorm : ndarray of float64
        ``||x_i||^2``; rows with ``0`` are skipped (their ``alpha_i`` is 1 already).
    alpha : ndarray of float64
        Committed dual variables of the block (read only).
    dalpha : ndarray of float64
        Accumulated local change, updated in place (start at 0).
    v : ndarray of float64, shape (d,)
        Local point ``w + K u``; start at the broadcast ``w``; updated in place.
    lam_local_n : float
        ``lam' n = lam n / K``.
    order : ndarray of int64
        Rows to step, in order.
    """
    inv = 1.0 / lam_local_n
    for j in range(order.shape[0]):
        i = order[j]
        q = sqnorm[i]
        if q <= 0.0:
            continue
        a = alpha[i] + dalpha[i]
        m = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            m += data[p] * v[indices[p]]
        delta = lam_local_n * (1.0 - y[i] * m) / q
        if delta < -a:
            delta = -a
        elif delta > 1.0 - a:
            delta = 1.0 - a
        if delta != 0.0:
            dalpha[i] += delta
            c = delta * y[i] * inv
            for p in range(indptr[i], indptr[i + 1]):
                v[indices[p]] += c * data[p]


@njit(cache=True, nogil=True)
def local_pegasos_partial(indptr, indices, data, y, rows, v, a, weight, acc, mark, touched):
    """One block's share of a mini-batch Pegasos subgradient, as a sparse vector.

    Computes ``weight * sum_{i in rows, y_i <w, x_i> < 1} y_i x_i`` for
    ``w = a v`` (Shalev-Shwartz et al. 2007, Fig. 1, steps 2 and 4).

    Parameters
    ----------
    indptr, indices, data : CSR arrays of the block
    y : ndarray of float64
    rows : ndarray of int64
        The block's rows of this iteration's batch.
    v : ndarray of float64, shape (d,)
    a : float
        Scale of ``w = a v``.
    weight : float
        ``n_k / (n k_k)`` so that the blocks' sum is an unbiased estimate of
        ``(1/n) sum_{i active} y_i x_i`` (and equals ``(1/k) sum_{A^+} y_i x_i``
        when the batch shares are proportional).
    acc : ndarray of float64, shape (d,)
        All-zero scratch; left all-zero on return.
    mark : ndarray of uint8, shape (d,)
        All-zero scratch; left all-zero on return.
    touched : ndarray of int64
        Scratch of length >= nnz of the batch rows.

    Returns
    -------
    idx : ndarray of int32
        Touched feature indices, in order of first touch.
    vals : ndarray of float64
    n_active : int
        Rows with margin ``< 1``.
    """
    nt = 0
    n_active = 0
    for j in range(rows.shape[0]):
        i = rows[j]
        m = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            m += data[p] * v[indices[p]]
        if y[i] * a * m < 1.0:
            n_active += 1
            c = weight * y[i]
            for p in range(indptr[i], indptr[i + 1]):
                col = indices[p]
                if mark[col] == 0:
                    mark[col] = 1
                    touched[nt] = col
                    nt += 1
                acc[col] += c * data[p]
    idx = touched[:nt].astype(np.int32)
    vals = np.empty(nt)
    for j in range(nt):
        vals[j] = acc[idx[j]]
        acc[idx[j]] = 0.0
        mark[idx[j]] = 0
    return idx, vals, n_active


@njit(cache=True, nogil=True)
def pegasos_apply(v, s, idx, vals, eta, lam, radius, project):
    """Apply one Pegasos step ``w <- Proj((1 - eta lam) w + eta g)`` to ``w = a v``.

    Every replica of ``w`` (driver and workers) runs this same function on the
    same inputs, so all replicas stay bitwise identical.

    Parameters
    ----------
    v : ndarray of float64, shape (d,)
    s : ndarray of float64, shape (2,)
        ``[a, nu]`` with ``w = a v`` and ``nu = ||w||^2`` (updated in place).
    idx, vals : ndarray
        The all-reduced sparse subgradient sum ``g``.
    eta : float
        ``1 / (lam t)``.
    lam : float
    radius : float
        ``1 / sqrt(lam)``.
    project : bool
    """
    shrink = 1.0 - eta * lam
    if shrink <= 0.0:  # t = 1: w_{3/2} = eta g exactly
        for j in range(v.shape[0]):
            v[j] = 0.0
        s[0] = 1.0
        s[1] = 0.0
    else:
        s[0] *= shrink
        s[1] *= shrink * shrink
    a = s[0]
    nu = s[1]
    for j in range(idx.shape[0]):
        col = idx[j]
        old = a * v[col]
        v[col] += eta * vals[j] / a
        new = a * v[col]
        nu += new * new - old * old
    if nu < 0.0:
        nu = 0.0
    s[1] = nu
    if project and nu > radius * radius:
        f = radius / np.sqrt(nu)
        s[0] = a * f
        s[1] = radius * radius
    if abs(s[0]) < 1e-6:  # fold the scale back before it underflows; resync nu exactly
        a = s[0]
        nu = 0.0
        for j in range(v.shape[0]):
            v[j] *= a
            nu += v[j] * v[j]
        s[0] = 1.0
        s[1] = nu


@njit(cache=True, nogil=True)
def local_pegasos_steps(indptr, indices, data, y, v, s, batches, t0, lam, radius, project,
                        active):
    """``H`` mini-batch Pegasos steps on the block's own rows (local-steps variant).

    Iteration ``t = t0 + h`` (``h = 0 .. H-1``) uses the rows ``batches[h]``:
    ``w <- Proj((1 - eta_t lam) w + (eta_t / k_b) sum_{A^+} y_i x_i)`` with
    ``eta_t = 1 / (lam t)`` (Shalev-Shwartz et al. 2007, Fig. 1) on ``w = a v``.
    The driver averages the blocks' results (weights ``n_k / n``) after the
    ``H`` steps.

    Parameters
    ----------
    indptr, indices, data : CSR arrays of the block
    y : ndarray of float64
    v : ndarray of float64, shape (d,)
        Updated in place.
    s : ndarray of float64, shape (2,)
        ``[a, nu]``, updated in place.
    batches : ndarray of int64, shape (H, k_b)
    t0 : int
        Global iteration number of the first step.
    lam, radius : float
    project : bool
    active : ndarray of int64, shape (k_b,)
        Scratch.
    """
    H = batches.shape[0]
    kb = batches.shape[1]
    for h in range(H):
        t = t0 + h
        eta = 1.0 / (lam * t)
        a = s[0]
        na = 0
        for j in range(kb):
            i = batches[h, j]
            m = 0.0
            for p in range(indptr[i], indptr[i + 1]):
                m += data[p] * v[indices[p]]
            if y[i] * a * m < 1.0:
                active[na] = i
                na += 1
        shrink = 1.0 - eta * lam
        if shrink <= 0.0:
            for j in range(v.shape[0]):
                v[j] = 0.0
            s[0] = 1.0
            s[1] = 0.0
        else:
            s[0] *= shrink
            s[1] *= shrink * shrink
        a = s[0]
        nu = s[1]
        for j in range(na):
            i = active[j]
            c = eta * y[i] / (kb * a)
            for p in range(indptr[i], indptr[i + 1]):
                col = indices[p]
                old = v[col]
                new = old + c * data[p]
                v[col] = new
                nu += a * a * (new * new - old * old)
        if nu < 0.0:
            nu = 0.0
        s[1] = nu
        if project and nu > radius * radius:
            s[0] = a * radius / np.sqrt(nu)
            s[1] = radius * radius
        if abs(s[0]) < 1e-6:
            a = s[0]
            nu = 0.0
            for j in range(v.shape[0]):
                v[j] *= a
                nu += v[j] * v[j]
            s[0] = 1.0
            s[1] = nu
