"""A performance model of the device backend: bytes, launches, atomics and time per iteration.

Run it on a data set::

    python benchmarks/roofline.py DATA --batch-sizes 1024,4096,16384 [--device h100|h200]
    python benchmarks/roofline.py imdb --batch-sizes 4096 --iterations iterations.json

``DATA`` is an svmlight file or one of the names ``a9a``, ``imdb``, ``news20`` (read from
``../shared/data``).  For every batch size the model samples the solver's own batches
(:class:`~gpusvm.solvers._sampling.CounterSampler`, seed 0) and counts, per kernel of one
iteration, from the batches' actual rows:

* **bytes** through device memory: the CSR rows of the batch streamed (8 B of ``indptr``
  twice, 4 B of index and ``itemsize`` of value per nonzero), the per-row vectors, and the
  gathers and read-modify-writes of ``v`` (32 B sectors; in L2 when ``v`` fits in half of it;
  a gather request of consecutive nonzeros of a row costs one sector per distinct sector of its
  columns, :attr:`BatchStats.coalesced`, and the scatters make one read-modify-write per
  distinct column of a tile, :attr:`BatchStats.aggregated`, both counted from the batches);
* **launches** (graph nodes: the segments replay captured graphs);
* **hot-column atomics**: the updates the most updated column of ``v`` receives, which
  serialise at one L2 atomic unit: one per block, as a tile sums its rows' updates per column
  before one atomic.

The kernels modelled are the segment kernels the device backend runs (``kernels/*.cu`` over
``kernels/balanced.cuh``: work balanced by nonzeros, the gather drawing the batch itself, so an
iteration has no sampler launch), in their one-output instance (template flag ``M1``: one
output, the hinge, no row weights; docs/gpu.md lists the flags).  The squared hinge (``SQ``)
and row weights (``WT``) read one more value per active row, which the model leaves out.

The modelled time of a kernel is ``floor + max(HBM bytes / bandwidth, L2 bytes / L2
bandwidth, dependent chain, hot-column atomics)``; the traffic roofline of an iteration is
its HBM bytes over the bandwidth alone.  Every parameter is in :data:`DEVICES`, each with its
source; they are leads (datasheets, one copy-bandwidth reading, published micro-benchmarks),
so every figure the model prints is *modelled*, never measured.

Time to ``P - P* <= eps``: the iteration counts come from the CPU backends at the same batch
size (the batches and the arithmetic are the device's: same seed, same iterates up to
rounding), measured with ``--measure-iterations`` or read from a JSON file; the setup adds the
host-to-device upload of the CSR and the evaluations (one pass over all rows each).  A measured
run evaluates on the solver's own cadence (Pegasos: the doubling average's evaluations at
``2^j`` epochs, the estimators' default; SDCA: the certificate cadence adapted to the gap with
``tol = eps``), and the model takes the number of evaluations that run made (its history), not
one per epoch; a JSON file from an older run, which evaluated once per epoch, is read as it is
and its rows say so.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import scipy.sparse as sp

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

__all__ = ["DEVICES", "Device", "KernelCost", "batch_stats", "block_product_seconds",
           "break_even_node_cost",
           "iteration_costs", "main", "summarise", "time_to_eps"]


@dataclass(frozen=True)
class Device:
    """The parameters of the model for one GPU.

    Attributes
    ----------
    name : str
    hbm_bandwidth : float
        Achievable device-memory bandwidth, bytes/s (read plus write).
    l2_bytes : int
        L2 cache size.
    l2_bandwidth : float
        L2 bandwidth, bytes/s.
    sms : int
        Streaming multiprocessors.
    graph_node_s : float
        Fixed cost of one kernel node replayed in a CUDA graph (launch, ramp-up, drain).
    atomic_same_address_s : float
        Seconds per atomic to one address (they serialise at one L2 slice).
    lane_step_s : float
        Seconds per dependent step of one lane (a load and a shuffle in flight).
    upload_bandwidth : float
        Host-to-device copy bandwidth, bytes/s (pageable host memory).
    sm_bandwidth : float
        What one multiprocessor moves from L2, bytes/s (a one-block kernel's ceiling).
    sources : str
        Where the numbers come from.
    """

    name: str
    hbm_bandwidth: float
    l2_bytes: int
    l2_bandwidth: float
    sms: int
    graph_node_s: float
    atomic_same_address_s: float
    lane_step_s: float
    upload_bandwidth: float
    sm_bandwidth: float = 110e9
    sources: str = ""


#: the devices the model knows (every figure a lead: see each ``sources``)
DEVICES = {
    "h100": Device(
        name="NVIDIA H100 80GB HBM3 (SXM)", hbm_bandwidth=3.0e12, l2_bytes=50 * 2**20,
        l2_bandwidth=10.0e12, sms=132, graph_node_s=1.5e-6,
        atomic_same_address_s=0.6e-9, lane_step_s=0.12e-6, upload_bandwidth=20e9,
        sources=("HBM: 3.35 TB/s datasheet, 3.0 TB/s device-to-device copy read on one such "
                 "machine (2026-11-13); L2 50 MB, 132 SMs (device properties); L2 bandwidth, "
                 "graph-node cost, same-address atomic rate and lane step latency: published "
                 "micro-benchmarks of Hopper/Ampere, not measured here; one SM from L2: 64 B per "
                 "clock at 1.755 GHz; upload: PCIe Gen5 x16 from pageable memory")),
    "h200": Device(
        name="NVIDIA H200 (SXM)", hbm_bandwidth=4.3e12, l2_bytes=60 * 2**20,
        l2_bandwidth=10.0e12, sms=132, graph_node_s=1.5e-6,
        atomic_same_address_s=0.6e-9, lane_step_s=0.12e-6, upload_bandwidth=20e9,
        sources=("HBM: 4.8 TB/s datasheet, 4.3 TB/s device-to-device copy read on such "
                 "machines (2026-10-28, 2026-11-04); L2 60 MB; the rest as for the H100 "
                 "(same SM)")),
}

SECTOR = 32          # bytes of one L2/DRAM sector
INDPTR = 8           # int64 row pointers (two read per row)
INDEX = 4            # int32 column indices


@dataclass
class KernelCost:
    """The modelled cost of one kernel of an iteration.

    Attributes
    ----------
    kernel : str
    hbm_bytes : float
        Bytes through device memory.
    l2_bytes : float
        Bytes served by L2 (gathers and atomics on ``v`` when it fits there).
    launches : int
        Kernel launches (graph nodes).
    hot_atomics : int
        Updates of the most updated column (serialised atomics).
    chain_s : float
        A dependent chain of steps that bounds the kernel (the one-block selection of the
        optimal bias).
    """

    kernel: str
    hbm_bytes: float = 0.0
    l2_bytes: float = 0.0
    launches: int = 1
    hot_atomics: int = 0
    chain_s: float = 0.0

    def seconds(self, dev: Device) -> float:
        """Modelled seconds: fixed graph-node cost plus the largest of the four bounds."""
        body = max(self.hbm_bytes / dev.hbm_bandwidth, self.l2_bytes / dev.l2_bandwidth,
                   self.chain_s, self.hot_atomics * dev.atomic_same_address_s)
        return body + dev.graph_node_s * self.launches

    def roofline(self, dev: Device) -> float:
        """Seconds of its device-memory traffic alone."""
        return self.hbm_bytes / dev.hbm_bandwidth


@dataclass
class BatchStats:
    """What the model needs of a batch size's sampled batches (means over the batches).

    Attributes
    ----------
    k : int
    nnz : float
        Nonzeros of a batch.
    max_row : float
        Nonzeros of its longest row (reported; balanced kernels have no per-row chain).
    hot : float
        Rows of the batch that contain its most frequent column.
    batches : int
        Batches sampled.
    aggregated : float
        Global atomics of the scatters per nonzero of their active rows: a tile sums
        its rows' updates per column in a shared table of ``TABLE`` slots, so a tile costs one
        atomic per distinct column; a tile with more than ``TABLE / 2`` distinct columns is
        counted at one atomic per nonzero (its linear probes start to fail: no credit taken).
    coalesced : dict
        Sectors per nonzero of the gathers' reads of ``v``, by ``(32, item size)``: one
        request reads 32 consecutive nonzeros of a row at once (a warp on a chunk of
        balanced.cuh), and the columns of a request that fall in one 32 B sector cost one
        sector.
    """

    k: int
    nnz: float
    max_row: float
    hot: float
    batches: int
    aggregated: float = 1.0
    coalesced: dict | None = None


#: slots of the scatters' per-block column table (``TABLE`` in kernels/balanced.cuh)
TABLE = 2048


def batch_stats(X: sp.csr_matrix, k: int, batches: int = 8, seed: int = 0,
                mode: str = "without_replacement", active: float = 0.5,
                blocks: int = 132 * 4) -> BatchStats:
    """Nonzeros, longest row and hottest column of the solver's own batches of ``k`` rows.

    Parameters
    ----------
    X : scipy.sparse.csr_matrix
    k : int
        Batch size.
    batches : int
        Batches ``t = 0 .. batches - 1`` of the counter-based stream to average over.
    seed : int
    mode : str
        Sampling mode of :class:`~gpusvm.solvers._sampling.CounterSampler`.
    active : float
        Fraction of the rows that update ``v`` (drawn at random, seeded) for ``aggregated``.
    blocks : int
        Blocks of the kernels' grid (``min(k, blocks)``; tiles of
        ``ceil(k / grid)`` batch positions, as the device backend cuts them).

    Returns
    -------
    BatchStats
    """
    from gpusvm.solvers._sampling import CounterSampler  # noqa: PLC0415

    X = sp.csr_matrix(X)
    lengths = np.diff(X.indptr)
    sampler = CounterSampler(X.shape[0], k, mode, seed)
    rng = np.random.default_rng(seed)
    tile = math.ceil(k / max(1, min(k, blocks)))
    nnz, longest, hot, entries, atomics = [], [], [], 0, 0
    sectors = {(32, item): 0 for item in (4, 8)}
    for t in range(batches):
        rows, _ = sampler.batch(t)
        nnz.append(int(lengths[rows].sum()))
        longest.append(int(lengths[rows].max()))
        cols = np.concatenate([X.indices[X.indptr[r]:X.indptr[r + 1]] for r in rows])
        hot.append(int(np.bincount(cols, minlength=X.shape[1]).max()) if cols.size else 0)
        # the gathers' requests: runs of 32 consecutive nonzeros of a row
        starts = np.repeat(np.cumsum(lengths[rows]) - lengths[rows], lengths[rows])
        position = np.arange(cols.size) - starts
        owner = np.repeat(np.arange(k), lengths[rows]).astype(np.int64) * (2**31)
        for width, item in sectors:
            if cols.size:
                pairs = np.stack([owner + position // width, cols.astype(np.int64) * item // SECTOR])
                sectors[(width, item)] += np.unique(pairs, axis=1).shape[1]
        # the active rows' nonzeros, by tile: one atomic per distinct (tile, column) pair
        moving = rng.random(k) < active
        tiles = np.repeat(np.arange(k) // tile, lengths[rows])[np.repeat(moving, lengths[rows])]
        acols = cols[np.repeat(moving, lengths[rows])].astype(np.int64)
        if acols.size:
            pairs = np.unique(tiles.astype(np.int64) * X.shape[1] + acols)
            distinct = np.bincount(pairs // X.shape[1], minlength=tiles.max() + 1)
            per_tile = np.bincount(tiles, minlength=tiles.max() + 1)
            crowded = distinct > TABLE // 2
            entries += int(per_tile.sum())
            atomics += int(distinct[~crowded].sum() + per_tile[crowded].sum())
    total = float(np.sum(nnz))
    return BatchStats(k=int(k), nnz=float(np.mean(nnz)), max_row=float(np.mean(longest)),
                      hot=float(np.mean(hot)), batches=int(batches),
                      aggregated=atomics / entries if entries else 1.0,
                      coalesced={key: (c / total if total else 1.0)
                                 for key, c in sectors.items()})


def _gather_bytes(dev: Device, d: int, itemsize: int, count: float) -> tuple[float, float]:
    """(HBM, L2) bytes of ``count`` random accesses to a vector of ``d`` items."""
    if d * itemsize <= dev.l2_bytes // 2:
        return 0.0, count * SECTOR
    return count * SECTOR, 0.0


def iteration_costs(X, stats: BatchStats, dev: Device, *, solver: str = "pegasos",
                    active: float = 0.5,
                    itemsize: int | None = None) -> list[KernelCost]:
    """Per-kernel costs of one iteration of ``solver`` at the batch of ``stats``.

    Parameters
    ----------
    X : scipy.sparse matrix
        The data (its shape and dtype).
    stats : BatchStats
    dev : Device
    solver : {"pegasos", "pegasos-optimal", "sdca-safe", "sdca-aggressive"}
    active : float
        Fraction of the batch's rows that update ``v`` (Pegasos: margin < 1; SDCA:
        ``delta != 0``).
    itemsize : int, optional
        Bytes per value (default: ``X``'s dtype; float64 is stored as is).

    Returns
    -------
    list of KernelCost
    """
    n, d = X.shape
    item = int(itemsize or np.dtype(X.dtype).itemsize)
    k, nnz = stats.k, stats.nnz
    blocks = dev.sms * 4
    row_bytes = k * (4 + 2 * INDPTR + item)                    # rows[g], indptr[r..r+1], y[r]
    stream = nnz * (INDEX + item)                               # the batch's CSR nonzeros
    # the batch is drawn by the gather (rows[j] and first[j] written there)
    costs = []
    drawn = k * 4.0
    # the gathers of v: one sector per distinct sector of a request (a chunk of 32 nonzeros);
    # one per nonzero where the batches were not counted
    per = (stats.coalesced or {}).get((32, item), 1.0)
    g_hbm, g_l2 = _gather_bytes(dev, d, item, nnz * per)
    if solver.startswith("pegasos"):
        costs.append(KernelCost("margins", hbm_bytes=row_bytes + drawn + stream + k * 8 + g_hbm,
                                l2_bytes=g_l2))
        if solver == "pegasos-optimal":
            # radix selection over the k breakpoints by ONE block: the breakpoints written once,
            # 8 passes reading them, the margins written; all through one multiprocessor
            one_sm = (k * (4 + item + 8 + 8) + 8 * k * 8 + k * 8) / dev.sm_bandwidth
            costs.append(KernelCost("optimal_bias", hbm_bytes=k * (8 + 4 + item) + k * 8,
                                    chain_s=one_sm + 8 * 2 * dev.lane_step_s))
        a_nnz = active * nnz
        atoms = a_nnz * stats.aggregated                           # global atomics on v
        a_hbm, a_l2 = _gather_bytes(dev, d, item, 2 * atoms)   # read-modify-write of v
        hot = min(int(round(active * stats.hot)), blocks)      # one atomic per block and column
        costs.append(KernelCost("pegasos_step",
                                hbm_bytes=k * (4 + 8) + active * row_bytes
                                + a_nnz * (INDEX + item) + a_hbm,
                                l2_bytes=a_l2, hot_atomics=hot))
        return costs
    # SDCA: margins + deltas, the step (and, aggressive, rho, deltas again and the settle)
    costs.append(KernelCost("sdca_margins",
                            hbm_bytes=row_bytes + drawn + stream + k * (8 + 8 + 16) + g_hbm,
                            l2_bytes=g_l2))
    a_nnz = active * nnz
    atoms = a_nnz * stats.aggregated                               # one per column and tile
    a_hbm, a_l2 = _gather_bytes(dev, d, item, 2 * atoms)
    hot = min(int(round(active * stats.hot)), blocks)  # column table: one atomic per block, column
    step = KernelCost("sdca_apply", hbm_bytes=k * (4 + 8) + active * (row_bytes + k * 8)
                      + a_nnz * (INDEX + item) + a_hbm, l2_bytes=a_l2, hot_atomics=hot)
    if solver == "sdca-aggressive":
        s_hbm, s_l2 = _gather_bytes(dev, d, 8, 2 * atoms)      # float64 scratch vector
        costs.append(KernelCost("sdca_rho", hbm_bytes=k * (4 + 8) + active * row_bytes
                                + a_nnz * (INDEX + item) + s_hbm, l2_bytes=s_l2,
                                hot_atomics=hot))
        # the steps with beta^(t+1) folded into the step (m, alpha, row_sq read; delta written
        # where it was read), the zeroing of rho's scratch into the settle (the tentative
        # steps read, their rows' indices and one store a nonzero)
        zeroing = active * k * 16 + a_nnz * INDEX
        z_hbm, z_l2 = _gather_bytes(dev, d, 8, a_nnz)
        step.kernel = "sdca_apply (with the steps)"
        step.hbm_bytes += k * 8 * 3
        settle = KernelCost("sdca_apply (settle, zeroing)",
                            hbm_bytes=k * (4 + 8) + active * k * 8 + k * 8 + zeroing + z_hbm,
                            l2_bytes=z_l2)
        costs += [step, settle]
    else:
        costs.append(step)
    return costs


def block_product_seconds(X, M: int, dev: Device, itemsize: int = 8) -> float:
    """Modelled seconds of one ``X @ P`` (or ``X^T Z``) with a dense ``M``-column block.

    The M-column step of a one-pass search (:func:`gpusvm.solvers.newton.newton_block`):
    the CSR stream once for all ``M`` columns, one ``M``-wide row of ``P`` gathered per
    nonzero (``ceil(8 M / 32)`` sectors; from L2 when ``P`` fits in half of it), the ``n x M``
    result written, one graph node; against ``2 M`` flops per nonzero, far under the
    device's arithmetic rate for any ``M`` a search has, so bandwidth decides.

    Parameters
    ----------
    X : scipy.sparse matrix
    M : int
    dev : Device
    itemsize : int, default=8
        Bytes per value of ``X`` (the Newton products run in float64).

    Returns
    -------
    float
    """
    n, d = X.shape
    stream = X.nnz * (INDEX + itemsize) + (n + 1) * INDPTR
    sectors = X.nnz * math.ceil(8 * M / SECTOR)
    g_hbm, g_l2 = _gather_bytes(dev, d, 8 * M, sectors)
    hbm = stream + n * M * 8 + g_hbm
    return dev.graph_node_s + max(hbm / dev.hbm_bandwidth, g_l2 / dev.l2_bandwidth)


def summarise(costs: list[KernelCost], dev: Device) -> dict:
    """Totals of one iteration: bytes, launches, modelled time, roofline and its fraction."""
    seconds = sum(c.seconds(dev) for c in costs)
    roof = sum(c.roofline(dev) for c in costs)
    return {"hbm_bytes": sum(c.hbm_bytes for c in costs),
            "l2_bytes": sum(c.l2_bytes for c in costs),
            "launches": sum(c.launches for c in costs),
            "hot_atomics": max((c.hot_atomics for c in costs), default=0),
            "seconds": seconds, "roofline_seconds": roof,
            "fraction_of_roofline": roof / seconds if seconds > 0 else 0.0}


def setup_seconds(X, dev: Device) -> float:
    """Upload of the CSR arrays, labels and row norms (host to device)."""
    n = X.shape[0]
    item = np.dtype(X.dtype).itemsize
    nbytes = X.nnz * (INDEX + item) + (n + 1) * INDPTR + n * (item + 8)
    return nbytes / dev.upload_bandwidth + 2 * dev.graph_node_s


def evaluation_seconds(X, dev: Device) -> float:
    """One certificate or objective: a pass over every row (decision values) and a few d-vectors."""
    n, d = X.shape
    item = np.dtype(X.dtype).itemsize
    full = X.nnz * (INDEX + item) + n * (2 * INDPTR + item + 8) + 4 * d * 8
    g_hbm, g_l2 = _gather_bytes(dev, d, 8, X.nnz)
    c = KernelCost("evaluation", hbm_bytes=full + g_hbm, l2_bytes=g_l2, launches=4)
    return c.seconds(dev) + 10e-6                 # one device-to-host copy and host arithmetic


def time_to_eps(X, per_iteration_s: float, iterations: int, evaluations: int,
                dev: Device) -> dict:
    """Modelled wall time to ``P - P* <= eps``: setup, iterations, evaluations."""
    setup = setup_seconds(X, dev)
    ev = evaluations * evaluation_seconds(X, dev)
    loop = iterations * per_iteration_s
    return {"setup_s": setup, "iterations": int(iterations), "loop_s": loop,
            "evaluations": int(evaluations), "evaluation_s": ev, "total_s": setup + loop + ev}


def break_even_node_cost(seconds_at, target: float) -> float | None:
    """The graph-node cost at which a modelled time equals ``target`` (its largest allowed).

    Every modelled time is affine in ``Device.graph_node_s`` (a fixed cost per kernel node,
    per upload and per evaluation), so ``seconds_at(c)``, the modelled time with a node cost of
    ``c`` seconds, is evaluated at ``c = 0`` and ``c = 1 us`` and solved for ``target``: the
    node cost up to which a target such as "within 2x of the roofline" holds.  ``None`` when
    no node cost meets it (the rest alone exceeds ``target``).

    Parameters
    ----------
    seconds_at : callable
        ``seconds_at(graph_node_s) -> float``.
    target : float
        Seconds not to exceed.

    Returns
    -------
    float or None
        Seconds per node.
    """
    base = seconds_at(0.0)
    slope = (seconds_at(1e-6) - base) / 1e-6
    if base > target:
        return None
    return math.inf if slope <= 0 else (target - base) / slope


# ---------------------------------------------------------------- iteration counts (CPU)
def measure_iterations(X, y, lam: float, k: int, solver: str, p_star: float, eps: float,
                       max_epochs: int = 300, seed: int = 1, backend: str = "numba") -> dict:
    """Iterations and evaluations the solver needs at batch size ``k`` to reach ``P - P* <= eps``.

    Runs ``backend`` (by default the numba backend: the same counter-based batches as the
    device) with the solver's own evaluation cadence, as the estimators run it: Pegasos with
    the doubling average (evaluations at ``T_j = 2^j`` epochs only), SDCA with the
    certificate cadence adapted to the gap (``eval_every=None``, ``tol = eps``).  The run
    stops at the first evaluation with ``P - P* <= eps`` (or, SDCA, a certified gap
    ``<= eps``); ``iterations`` is that evaluation's iteration and ``evaluations`` the number
    of evaluations the run made up to it (its history).  ``benchmarks/bench_gpu.py`` runs it
    on the ``cupy`` backend for the measured time to eps: the run ends with a copy to the
    host, so its wall time includes every kernel it launched.

    Returns
    -------
    dict
        ``{"solver", "k", "iterations", "evaluations", "cadence", "reached", "objective",
        "seconds", "setup_seconds"}``; ``cadence`` is ``"solver"`` (what the model reads to
        label the evaluations as the solver's own); ``setup_seconds`` is the construction of
        the backend (the upload, on a device), ``seconds`` the solver's run after it.
    """
    from gpusvm.backends import make_backend  # noqa: PLC0415
    from gpusvm.solvers.pegasos import pegasos  # noqa: PLC0415
    from gpusvm.solvers.sdca import sdca  # noqa: PLC0415

    n = X.shape[0]
    epoch = max(1, math.ceil(n / k))
    max_iter = max_epochs * epoch
    t_setup = time.perf_counter()
    be = make_backend(backend, X, y)
    t0 = time.perf_counter()
    if solver.startswith("pegasos"):
        res = pegasos(be, lam=lam, k=k, max_iter=max_iter, seed=seed, averaging="doubling",
                      tol=None, target_objective=p_star + eps,            # stop at eps only
                      bias="optimal" if solver == "pegasos-optimal" else "none")
        hist = [(h[0], h[1]) for h in res.history]
        reached = res.stop_reason == "target_objective" or bool(hist and hist[-1][1] - p_star
                                                                 <= eps)
    else:
        variant = solver.split("-")[1]
        res = sdca(be, lam=lam, b=k, max_iter=max_iter, variant=variant, seed=seed,
                   tol=eps, callback=lambda it, obj, el: obj - p_star > eps)
        hist = [(h[0], h[1]) for h in res.history]
        reached = res.stop_reason in ("tol", "callback")
    seconds = time.perf_counter() - t0
    return {"solver": solver, "k": int(k), "iterations": int(res.n_iter) if reached else None,
            "evaluations": len(hist), "cadence": "solver", "reached": bool(reached),
            "objective": float(hist[-1][1]) if hist else None, "seconds": seconds,
            "setup_seconds": t0 - t_setup}


def liblinear_reference(X, y, lam: float) -> dict:
    """LinearSVC (single-threaded LIBLINEAR): ``P*`` (tight tolerance) and its default-settings time.

    Returns ``seconds`` (the CPU time of the process during the default fit, the one-core time
    whatever the load of a shared machine), ``wall_seconds``, ``objective`` and ``p_star``.
    """
    import os  # noqa: PLC0415

    from sklearn.svm import LinearSVC  # noqa: PLC0415
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    n = X.shape[0]
    X64 = X.astype(np.float64)

    def objective(w):
        return float(0.5 * lam * w @ w + np.maximum(0.0, 1.0 - y * (X64 @ w)).mean())

    t0, c0 = time.perf_counter(), time.process_time()
    clf = LinearSVC(C=1.0 / (lam * n), loss="hinge", fit_intercept=False, dual=True).fit(X64, y)
    seconds, wall = time.process_time() - c0, time.perf_counter() - t0
    tight = LinearSVC(C=1.0 / (lam * n), loss="hinge", fit_intercept=False, dual=True,
                      tol=1e-8, max_iter=200_000).fit(X64, y)
    return {"seconds": seconds, "wall_seconds": wall, "objective": objective(clf.coef_.ravel()),
            "p_star": objective(tight.coef_.ravel())}


# ---------------------------------------------------------------- CLI
DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
NAMED = {"a9a": ("a9a/a9a", 123),
         "imdb": ("imdb/imdb_tfidf_unigram.train.svm.gz", 74849),
         "news20": ("news20/news20bydate_binary_uni+bigram.train.svm.gz", 1181833)}
SOLVERS = ("pegasos", "pegasos-optimal", "sdca-safe", "sdca-aggressive")


def load(data: str):
    """A data set as float32 CSR with labels in {-1, +1}: a name of :data:`NAMED` or a path."""
    from gpusvm.datasets import load_svmlight  # noqa: PLC0415
    if data in NAMED:
        rel, d = NAMED[data]
        X, y = load_svmlight(DATA / rel, n_features=d, dtype=np.float32)
    else:
        X, y = load_svmlight(data, dtype=np.float32)
    classes = np.unique(y)
    y = np.where(y == classes[-1], 1.0, -1.0).astype(np.float32)
    X = sp.csr_matrix(X)
    X.sort_indices()
    return X, y


def model_table(X, ks, dev: Device, solvers=SOLVERS, active: float = 0.5,
                iterations: dict | None = None, batches: int = 8) -> list[dict]:
    """Rows of the model: one per (solver, k), with time to eps where counts are known."""
    rows = []
    for k in ks:
        stats = batch_stats(X, k, batches=batches, active=active, blocks=dev.sms * 4)
        for solver in solvers:
            costs = iteration_costs(X, stats, dev, solver=solver, active=active)
            tot = summarise(costs, dev)
            row = {"solver": solver, "k": int(k), "batch_nnz": stats.nnz,
                   "longest_row": stats.max_row, "hot_rows": stats.hot,
                   "kernels": [dict(asdict(c), seconds=c.seconds(dev)) for c in costs], **tot}

            def per_it(c, costs=costs):          # the node cost the targets allow
                return summarise(costs, replace(dev, graph_node_s=c))["seconds"]
            row["node_cost_for_half_roofline"] = break_even_node_cost(
                per_it, 2.0 * tot["roofline_seconds"])
            it = (iterations or {}).get(f"{solver}@{k}")
            if isinstance(it, dict) and it.get("iterations"):
                row["time_to_eps"] = time_to_eps(X, tot["seconds"], it["iterations"],
                                                 it.get("evaluations", 1), dev)
                row["time_to_eps"]["cadence"] = it.get("cadence", "epoch")
                ref = (iterations or {}).get("liblinear")
                if isinstance(ref, dict) and ref.get("seconds"):
                    def eps_at(c, it=it, per_it=per_it):
                        d = replace(dev, graph_node_s=c)
                        return time_to_eps(X, per_it(c), it["iterations"],
                                           it.get("evaluations", 1), d)["total_s"]
                    row["time_to_eps"]["node_cost_for_twentieth"] = \
                        break_even_node_cost(eps_at, ref["seconds"] / 20.0)
            rows.append(row)
    return rows


def _node(c: float | None) -> str:
    """A break-even node cost as printed: the bound in microseconds, or why there is none."""
    if c is None:
        return "at no graph-node cost (the rest of the time alone exceeds it)"
    return "at any graph-node cost" if math.isinf(c) else \
        f"for a graph node of at most {c * 1e6:.2f} us"


def _print(rows, dev: Device, data: str, reference: dict | None) -> None:
    print(f"# modelled on {dev.name}: {data}")
    print(f"# HBM {dev.hbm_bandwidth / 1e12:.2f} TB/s, L2 {dev.l2_bytes >> 20} MB, graph node "
          f"{dev.graph_node_s * 1e6:.1f} us, "
          f"same-address atomic {dev.atomic_same_address_s * 1e9:.1f} ns")
    for r in rows:
        print(f"\n## {r['solver']}  k={r['k']}  "
              f"(batch: {r['batch_nnz']:.0f} nnz, "
              f"longest row {r['longest_row']:.0f}, hottest column in {r['hot_rows']:.0f} rows)")
        print(f"{'kernel':<22} {'HBM MB':>8} {'L2 MB':>8} {'launch':>6} {'hot atom':>8} "
              f"{'chain us':>8} {'us':>8}")
        for c in r["kernels"]:
            print(f"{c['kernel']:<22} {c['hbm_bytes'] / 1e6:>8.3f} {c['l2_bytes'] / 1e6:>8.3f} "
                  f"{c['launches']:>6} {c['hot_atomics']:>8} {c['chain_s'] * 1e6:>8.2f} "
                  f"{c['seconds'] * 1e6:>8.2f}")
        print(f"{'iteration':<22} {r['hbm_bytes'] / 1e6:>8.3f} {r['l2_bytes'] / 1e6:>8.3f} "
              f"{r['launches']:>6} {r['hot_atomics']:>8} {'':>8} {r['seconds'] * 1e6:>8.2f}   "
              f"roofline {r['roofline_seconds'] * 1e6:.2f} us = "
              f"{100 * r['fraction_of_roofline']:.0f}% of the modelled time")
        if "node_cost_for_half_roofline" in r:
            print(f"within 2x of the roofline {_node(r['node_cost_for_half_roofline'])} "
                  f"(the model's node: {dev.graph_node_s * 1e6:.2f} us)")
        if "time_to_eps" in r:
            e = r["time_to_eps"]
            how = ("as the measured run made them, on the solver's own cadence"
                   if e.get("cadence") == "solver" else "one per epoch, as recorded")
            line = (f"time to eps (modelled): {e['total_s'] * 1e3:.2f} ms = setup "
                    f"{e['setup_s'] * 1e3:.2f} + {e['iterations']} iterations "
                    f"{e['loop_s'] * 1e3:.2f} + {e['evaluations']} evaluations "
                    f"({how}) {e['evaluation_s'] * 1e3:.2f}")
            if reference:
                line += (f"; LinearSVC (one core, measured CPU time) "
                         f"{reference['seconds'] * 1e3:.0f} ms = "
                         f"{reference['seconds'] / e['total_s']:.0f}x")
            print(line)
            if "node_cost_for_twentieth" in e:
                print(f"at most 1/20 of LinearSVC's time {_node(e['node_cost_for_twentieth'])}")


def main(argv=None) -> int:
    """Command line: ``python benchmarks/roofline.py DATA --batch-sizes 1024,4096,16384``."""
    p = argparse.ArgumentParser(prog="python benchmarks/roofline.py",
                                description="Modelled bytes, launches and time per iteration of "
                                            "the device backend on a named GPU.")
    p.add_argument("data", help="svmlight file, or a9a, imdb, news20 (from ../shared/data)")
    p.add_argument("--batch-sizes", default="1024,4096,16384")
    p.add_argument("--device", choices=sorted(DEVICES), default="h100")
    p.add_argument("--solvers", default=",".join(SOLVERS))
    p.add_argument("--active", type=float, default=0.5,
                   help="fraction of a batch's rows that update v (default 0.5)")
    p.add_argument("--batches", type=int, default=8, help="batches sampled per batch size")
    p.add_argument("--lam", type=float, default=1e-4)
    p.add_argument("--eps", type=float, default=1e-3)
    p.add_argument("--iterations", type=Path,
                   help="JSON of iteration counts to eps ({'solver@k': {...}}, as written by "
                        "--measure-iterations)")
    p.add_argument("--measure-iterations", type=Path, metavar="JSON",
                   help="measure the iteration counts on the CPU (numba backend) and LinearSVC's "
                        "one-core time, and write them to JSON")
    p.add_argument("--max-epochs", type=int, default=300,
                   help="epochs a measured run may take before it counts as not reached")
    p.add_argument("--json", type=Path, help="write the model's rows to this file")
    args = p.parse_args(argv)
    ks = [int(x) for x in args.batch_sizes.split(",") if x]
    solvers = [s for s in args.solvers.split(",") if s]
    bad = [s for s in solvers if s not in SOLVERS]
    if bad:
        p.error(f"unknown solver(s) {bad}; choose from {SOLVERS}")
    dev = DEVICES[args.device]
    X, y = load(args.data)
    skipped = [k for k in ks if k > X.shape[0]]
    if skipped:
        print(f"# batch sizes {skipped} exceed n = {X.shape[0]}: left out")
        ks = [k for k in ks if k <= X.shape[0]]
    iterations, reference = None, None
    if args.measure_iterations:
        reference = liblinear_reference(X, y, args.lam)
        iterations = {"liblinear": reference, "max_epochs": args.max_epochs}
        for k in ks:
            for s in solvers:
                r = measure_iterations(X, y, args.lam, k, s, reference["p_star"], args.eps,
                                       max_epochs=args.max_epochs)
                iterations[f"{s}@{k}"] = r
                print(f"# measured on the CPU: {s} k={k}: {r['iterations']} iterations, "
                      f"{r['evaluations']} evaluations on the solver's own cadence "
                      f"({r['seconds']:.1f} s)", flush=True)
                args.measure_iterations.write_text(json.dumps(iterations, indent=2))
    elif args.iterations:
        iterations = json.loads(args.iterations.read_text())
        reference = iterations.get("liblinear")
    rows = model_table(X, ks, dev, solvers, args.active, iterations, args.batches)
    _print(rows, dev, args.data, reference)
    if args.json:
        args.json.write_text(json.dumps({"device": asdict(dev), "data": args.data,
                                         "reference": reference, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
