"""PNG plots of the studies (matplotlib, the ``plot`` extra; imported only when plotting).

The figures are ``matplotlib.figure.Figure`` objects on the Agg canvas, so plotting never touches
pyplot's global state or the user's interactive backend; each PNG is written atomically.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

from .._output import write_output
from .store import iteration_cap

__all__ = ["plot_iterations", "plot_speedup", "plot_accesses", "plot_figure1",
           "plot_pegasos_k", "plot_schedules", "require_matplotlib", "plots_wanted"]

COLORS = {"pegasos": "tab:blue", "sdca-naive": "tab:red", "sdca-safe": "tab:green",
          "sdca-aggressive": "tab:purple"}
MARKERS = {"pegasos": "o", "sdca-naive": "x", "sdca-safe": "s", "sdca-aggressive": "D"}


def require_matplotlib():
    """``(Figure, FigureCanvasAgg)`` from matplotlib, or an ImportError that says how to get it."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415
        from matplotlib.figure import Figure  # noqa: PLC0415
    except ImportError as exc:
        raise ImportError(
            "the study plots need matplotlib, which is not installed: pip install "
            "'gpusvm[plot]' (or run the study with plots=False / --no-plots)") from exc
    return Figure, FigureCanvasAgg


def plots_wanted(plots) -> bool:
    """Whether a study writes its plots: ``None`` when matplotlib imports, ``True`` raising
    :func:`require_matplotlib`'s ImportError without it (before any cell runs), ``False`` not."""
    if plots is None:
        return importlib.util.find_spec("matplotlib") is not None
    if plots:
        require_matplotlib()
    return bool(plots)


def _log_axes(ax) -> None:
    """Log scales where there is positive data to scale (an empty panel stays linear)."""
    ax.set_xscale("log", base=2)
    if any(len(line.get_ydata()) and (line.get_ydata() > 0).any()
                 for line in ax.get_lines()):
        ax.set_yscale("log")


def _save(fig, path) -> Path:
    _, Canvas = require_matplotlib()
    Canvas(fig)
    write_output(path, lambda f: fig.savefig(f, format="png", dpi=110, bbox_inches="tight"),
                 what="plot")
    return Path(path)


def _cap(metadata, b):
    c = metadata["caps"]
    return iteration_cap(metadata["dataset"]["n"], b, c["max_epochs"], c["max_iter"])


def _no_t_kind(row) -> str:
    """``"fail"`` when most seeds without T diverged or stalled, else ``"cap"``."""
    st = row.get("statuses") or {}
    failed = st.get("diverged", 0) + st.get("stalled", 0)
    capped = st.get("not_reached", 0) + st.get("time_cap", 0)
    return "fail" if failed > capped else "cap"


def _draw_iterations(ax, metadata, summary, *, legend=True):
    methods, sizes = metadata["methods"], metadata["batch_sizes"]
    shown = set()
    for m in methods:
        rows = [r for r in summary if r["method"] == m]
        xs = [r["b"] for r in rows if r["T_median"] is not None]
        ys = [r["T_median"] for r in rows if r["T_median"] is not None]
        ax.plot(xs, ys, marker=MARKERS.get(m, "o"), color=COLORS.get(m), label=m, ms=5, lw=1.5)
        for kind, marker, label in (("cap", "^", "not reached within the cap (drawn at it)"),
                                    ("fail", "X", "diverged or stalled (drawn at the cap)")):
            bs = [r["b"] for r in rows if r["T_median"] is None and _no_t_kind(r) == kind]
            if bs:
                ax.plot(bs, [_cap(metadata, b) for b in bs], ls="none", marker=marker,
                        mfc="none", color=COLORS.get(m), ms=7,
                        label=None if kind in shown else label)
                shown.add(kind)
    _log_axes(ax)
    ax.set(xlabel="mini-batch size b", ylabel=f"iterations T to P - P* <= {metadata['eps']:g}")
    ax.grid(True, which="major", alpha=0.3)
    s2 = metadata["sigma2"]
    if s2 and 1.0 / s2 <= max(sizes):
        ax.axvline(1.0 / s2, color="gray", ls=":", lw=1, label="b = 1/sigma^2")
    ax2 = ax.twinx()
    bb = [r["beta_b_over_b"] for r in summary if r["method"] == methods[0]]
    ax2.plot(sizes, bb, "k--", lw=1.2, label="beta_b / b (right axis)")
    ax2.set(yscale="log", ylabel="beta_b / b")
    ds = metadata["dataset"]
    ax.set_title(f"{ds['name']} (n={ds['n']}, lam={metadata['lam']:g}, "
                 f"1/sigma^2={1 / s2:.3g})" if s2 else ds["name"], fontsize=9)
    if legend:
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = ax2.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="best")
    return ax2


def plot_iterations(metadata, summary, path) -> Path:
    """Figure 1 of Takáč et al.: median T against b (log-log) per method, ``beta_b/b`` on the right.

    ``metadata`` and ``summary`` are a scaling study's; the PNG goes to ``path``, returned.
    """
    Figure, _ = require_matplotlib()
    fig = Figure(figsize=(6.4, 4.6))
    _draw_iterations(fig.add_subplot(1, 1, 1), metadata, summary)
    return _save(fig, path)


def plot_speedup(metadata, summary, path) -> Path:
    """Measured speedup ``T(b_ref)/T(b)`` per method against the predicted ``b/beta_b``."""
    Figure, _ = require_matplotlib()
    fig = Figure(figsize=(6.4, 4.6))
    ax = fig.add_subplot(1, 1, 1)
    methods, sizes = metadata["methods"], metadata["batch_sizes"]
    b_ref = min(sizes)
    ax.plot(sizes, [b / b_ref for b in sizes], color="gray", ls=":", lw=1, label="linear (b/b_ref)")
    pred = [r["predicted_speedup"] for r in summary if r["method"] == methods[0]]
    ax.plot(sizes, pred, "k--", lw=1.5, label="predicted b/beta_b")
    for m in methods:
        rows = [r for r in summary if r["method"] == m and r["measured_speedup"] is not None]
        ax.plot([r["b"] for r in rows], [r["measured_speedup"] for r in rows],
                marker=MARKERS.get(m, "o"), color=COLORS.get(m), label=f"measured: {m}", ms=5)
    _log_axes(ax)
    ax.set(xlabel="mini-batch size b", ylabel=f"speedup T({b_ref}) / T(b)")
    ax.grid(True, alpha=0.3)
    ds = metadata["dataset"]
    ax.set_title(f"{ds['name']}: measured (median over seeds) vs predicted speedup", fontsize=9)
    ax.legend(fontsize=7)
    return _save(fig, path)


def plot_accesses(metadata, summary, path) -> Path:
    """Data accesses ``b T`` (serial work) against ``b``; flat means a linear speedup."""
    Figure, _ = require_matplotlib()
    fig = Figure(figsize=(6.4, 4.6))
    ax = fig.add_subplot(1, 1, 1)
    for m in metadata["methods"]:
        rows = [r for r in summary if r["method"] == m and r["accesses_median"] is not None]
        ax.plot([r["b"] for r in rows], [r["accesses_median"] for r in rows],
                marker=MARKERS.get(m, "o"), color=COLORS.get(m), label=m, ms=5)
    n = metadata["dataset"]["n"]
    ax.plot(metadata["batch_sizes"], [n] * len(metadata["batch_sizes"]), color="gray", ls=":",
            lw=1, label="one pass over the data (n)")
    _log_axes(ax)
    ax.set(xlabel="mini-batch size b", ylabel="data accesses b T (median over seeds)")
    ax.grid(True, alpha=0.3)
    ax.set_title(f"{metadata['dataset']['name']}: serial work to reach eps", fontsize=9)
    ax.legend(fontsize=7)
    return _save(fig, path)


def plot_figure1(results, path, *, ncols: int = 2) -> Path:
    """Several scaling studies side by side, one panel each (the layout of Figure 1).

    Parameters
    ----------
    results : list of dict
        ``results.json`` contents (``metadata`` and ``summary``), e.g. from :func:`gpusvm.study.load_results`.
    path : str or os.PathLike
        The PNG to write.
    ncols : int, default=2
        Panels per row.

    Returns
    -------
    pathlib.Path
    """
    Figure, _ = require_matplotlib()
    k = len(results)
    if k == 0:
        raise ValueError("plot_figure1 needs at least one study")
    rows, cols = int(math.ceil(k / ncols)), min(ncols, k)
    fig = Figure(figsize=(5.6 * cols, 4.2 * rows + 0.6))
    handles: dict = {}
    for i, res in enumerate(results):
        ax = fig.add_subplot(rows, cols, i + 1)
        ax2 = _draw_iterations(ax, res["metadata"], res["summary"], legend=False)
        for a in (ax, ax2):
            for h, label in zip(*a.get_legend_handles_labels()):
                handles.setdefault(label, h)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=4, fontsize=8,
               frameon=False)
    return _save(fig, path)


def plot_pegasos_k(metadata, summary, path) -> Path:
    """Figure 3 of the Pegasos paper: objective against k, with T fixed and with kT fixed."""
    Figure, _ = require_matplotlib()
    fig = Figure(figsize=(11, 4.2))
    p_star = metadata.get("p_star")
    for i, (setting, title) in enumerate((("T", "T fixed"), ("kT", "kT fixed"))):
        ax = fig.add_subplot(1, 2, i + 1)
        values = sorted({r["value"] for r in summary if r["setting"] == setting})
        for v in values:
            rows = sorted((r for r in summary if r["setting"] == setting and r["value"] == v
                           and r["objective_median"] is not None), key=lambda r: r["k"])
            ks = [r["k"] for r in rows]
            ax.plot(ks, [r["objective_median"] for r in rows], marker="o", ms=4,
                    label=f"{setting}={v:g}")
            lo, hi = [r["objective_min"] for r in rows], [r["objective_max"] for r in rows]
            if len(rows) and all(x is not None for x in lo + hi):
                ax.fill_between(ks, lo, hi, alpha=0.15)
        if p_star is not None:
            ax.axhline(p_star, color="k", ls=":", lw=1, label="P*")
        ax.set(xscale="log", yscale="log", xlabel="k (mini-batch size)",
               ylabel="objective P(w_{T+1})")
        ax.set_title(f"{metadata['dataset']['name']}: {title}", fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, path)


def plot_schedules(metadata, traces, path) -> Path:
    """Figure 2 of the Pegasos paper: Pegasos against NORMA (left) and fixed step sizes (right).

    ``traces``: the ``summary`` of :func:`gpusvm.study.schedules_study`.
    """
    Figure, _ = require_matplotlib()
    fig = Figure(figsize=(11, 4.2))
    axl, axr = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    for tr in traces:
        pts = [(t, o) for t, o in zip(tr["T"], tr["objective"]) if o is not None]
        if tr["group"] in ("pegasos", "norma"):
            line, = axl.plot([p[0] for p in pts], [p[1] for p in pts], lw=1.5,
                             label=f"{tr['label']}: objective")
            if tr.get("test_loss"):
                tl = [(t, v) for t, v in zip(tr["T"], tr["test_loss"]) if v is not None]
                axl.plot([p[0] for p in tl], [p[1] for p in tl], ls="--", color=line.get_color(),
                         lw=1.2, label=f"{tr['label']}: test hinge loss")
        if tr["group"] in ("pegasos", "constant"):
            axr.plot([p[0] for p in pts], [p[1] for p in pts], lw=1.5, label=tr["label"],
                     color="k" if tr["group"] == "pegasos" else None)
    axl.set(xscale="log", yscale="log", xlabel="T", ylabel="objective (solid), test loss (dashed)")
    axl.set_title(f"{metadata['dataset']['name']}: Pegasos vs NORMA", fontsize=9)
    axr.set(xscale="log", xlabel="T", ylabel="objective", ylim=(0.0, 1.0))
    axr.set_title(f"{metadata['dataset']['name']}: Pegasos vs fixed eta (Zhang 2004)", fontsize=9)
    p_star = metadata.get("p_star")
    for ax in (axl, axr):
        if p_star is not None:
            ax.axhline(p_star, color="gray", ls=":", lw=1, label="P*")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, path)
