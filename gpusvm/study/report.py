"""Tables of a study: aggregation over seeds, CSV, JSON and Markdown files.

A quantity not measured because the cell did not reach ``eps`` is ``null`` in JSON, ``NA`` in
CSV and ``n.r.``, ``div.``, ``stall`` or ``time`` in Markdown; it is never a number.
"""

from __future__ import annotations

import csv
import io
import math
from collections import Counter
from pathlib import Path

from .. import spectral
from . import plots as plotting
from .store import write_json_atomic, write_text_atomic

__all__ = ["summarize_scaling", "write_scaling_outputs", "write_outputs", "write_csv", "fmt_num"]

CELL_COLUMNS = ["dataset", "method", "b", "seed", "status", "failed", "T", "T_lower", "accesses",
                "seconds", "iterations_run", "cap", "final_subopt", "best_subopt", "evaluations",
                "replay", "replay_consistent", "sigma2", "beta_b", "beta_b_over_b",
                "predicted_speedup", "key"]
SUMMARY_COLUMNS = ["dataset", "method", "b", "seeds", "reached", "failed", "T_median", "T_min",
                   "T_max", "accesses_median", "seconds_median", "beta_b", "beta_b_over_b",
                   "predicted_speedup", "measured_speedup", "b_ref"]
STATUS_MARK = {"not_reached": "n.r.", "diverged": "div.", "stalled": "stall", "time_cap": "time"}


def _median(values):
    """Median where None (not reached) counts as +infinity; None when the median is infinite."""
    vals = sorted(math.inf if v is None else float(v) for v in values)
    m = len(vals) // 2
    if not vals or math.isinf(vals[m]):
        return None
    med = vals[m] if len(vals) % 2 else 0.5 * (vals[m - 1] + vals[m])
    return None if math.isinf(med) else int(med) if med.is_integer() else med


def summarize_scaling(cells, *, methods, batch_sizes, n: int, sigma2: float) -> list[dict]:
    """One row per (method, b): medians over seeds and the theory beside them.

    Rows hold the keys of :data:`SUMMARY_COLUMNS` (but ``dataset``) and ``statuses``.
    ``T_median`` counts a cell that did not reach ``eps`` as +infinity (None when half the
    seeds or more did not); ``measured_speedup = T_median(b_ref) / T_median(b)`` and
    ``predicted_speedup = (b / beta_b) / (b_ref / beta_ref)``, ``b_ref = min(batch_sizes)``.
    """
    b_ref = min(batch_sizes)
    beta = {b: spectral.beta_b(b, n, sigma2) if sigma2 > 0 else 1.0 for b in batch_sizes}
    rows = []
    for method in methods:
        ref = None
        for b in batch_sizes:
            group = [c for c in cells if c["method"] == method and c["b"] == b]
            Ts = [c["T"] for c in group]
            reached = [t for t in Ts if t is not None]
            t_med = _median(Ts)
            if b == b_ref:
                ref = t_med
            rows.append({
                "method": method, "b": b, "seeds": len(group), "reached": len(reached),
                "failed": sum(1 for c in group if c.get("failed")), "T_median": t_med,
                "T_min": min(reached) if reached else None,
                "T_max": max(reached) if len(reached) == len(Ts) and reached else None,
                "accesses_median": _median([c.get("accesses") for c in group]),
                "seconds_median": _median([c.get("seconds") for c in group]),
                "beta_b": beta[b], "beta_b_over_b": beta[b] / b,
                "predicted_speedup": (b / beta[b]) / (b_ref / beta[b_ref]),
                "measured_speedup": (ref / t_med) if (ref is not None and t_med) else None,
                "b_ref": b_ref, "statuses": dict(Counter(c["status"] for c in group))})
    return rows


def fmt_num(x, digits: int = 4) -> str:
    """Compact number for tables: integers as such, floats with ``digits`` significant digits."""
    if x is None:
        return "NA"
    if isinstance(x, bool):
        return str(x).lower()
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer() and abs(x) < 1e15):
        return str(int(x))
    return f"{x:.{digits}g}"


def fmt_ratio(x) -> str:
    """A speedup for tables: 3 significant digits, no exponent (``1036``, ``58.1``, ``3.88``)."""
    if x is None:
        return "NA"
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"


def write_csv(path, columns, rows) -> None:
    """Write ``rows`` (dicts) as CSV with ``NA`` for missing values, atomically."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    w.writerows([_csv_field(r.get(c)) for c in columns] for r in rows)
    write_text_atomic(path, buf.getvalue())


def _csv_field(v) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "NA"
    if isinstance(v, bool):
        return str(v).lower()
    return repr(v) if isinstance(v, float) else str(v)


def _cell_rows(cells, metadata):
    n, s2 = metadata["dataset"]["n"], metadata["sigma2"]
    beta = {c["b"]: spectral.beta_b(c["b"], n, s2) if s2 > 0 else 1.0 for c in cells}
    return [{**c, "dataset": metadata["dataset"]["name"], "sigma2": s2, "beta_b": beta[c["b"]],
             "beta_b_over_b": beta[c["b"]] / c["b"], "predicted_speedup": c["b"] / beta[c["b"]]}
            for c in cells]


def _t_cell(row) -> str:
    """Markdown text of a median T: the number, or why there is none."""
    if row["T_median"] is not None:
        return fmt_num(row["T_median"])
    st = row["statuses"]
    worst = max((s for s in st if s != "reached"), key=lambda s: st[s], default="not_reached")
    return STATUS_MARK.get(worst, "n.r.")


def _scaling_lines(metadata, summary) -> list:
    """The lines of a scaling study's ``results.md``, but its plots."""
    ds, opt = metadata["dataset"], metadata["optimum"]
    methods, sizes = metadata["methods"], metadata["batch_sizes"]
    cap_txt = ", ".join(f"{k}={v}" for k, v in metadata["caps"].items() if v is not None)
    lines = [
        f"# Batch-size scaling study: {ds['name']}",
        "",
        f"Reproduces {metadata['reproduces']}: iterations T to reach P(w_T) - P* <= "
        f"eps = {metadata['eps']:g}, against the mini-batch size b.",
        "",
        f"- data: `{ds['source'] or ds['name']}`: n = {ds['n']}, d = {ds['d']}, nnz = {ds['nnz']}; "
        f"{metadata['normalization']}",
        f"- objective: {metadata['objective']}; lam = {metadata['lam']:g}",
        f"- P* = {metadata['p_star']:.10f}, certified: 0 <= P* - lower bound <= gap = "
        f"{opt['gap']:.2e} ({opt['how']})",
        f"- sigma^2 = ||X||^2/n = {metadata['sigma2']:.5g}, 1/sigma^2 = "
        f"{fmt_num(metadata['one_over_sigma2'])}",
        f"- Pegasos: {metadata['pegasos']['algorithm']}; evaluated iterate: "
        f"{metadata['pegasos']['iterate']}",
        f"- SDCA: start {metadata['sdca']['start']}; safe beta = {metadata['sdca']['safe_beta']}; "
        f"aggressive theta = {metadata['sdca']['aggressive_theta']}; iterate "
        f"{metadata['sdca']['iterate']}",
        f"- seeds: {', '.join(str(s) for s in metadata['seeds'])}; caps per cell: {cap_txt} "
        "(the data-access cap is max_epochs * n / b iterations)",
        f"- T search: {metadata['search']['guarantee']}",
        f"- backend: {metadata['backend']}; cells: {metadata['cells_total']} "
        f"({metadata['cells_computed']} computed by the last run, {metadata['cells_reused']} "
        f"reused); compute time of all cells {metadata['cells_seconds']:.0f} s (sum over cells, "
        f"evaluations and replays included); the last run took {metadata['seconds']:.0f} s "
        f"with {metadata['jobs']} job(s)",
        f"- command: `{metadata['command']}`",
        "",
        "n.r. = not reached within the cap, div. = diverged (non-finite or exploding P), "
        "stall = no progress over the last 3/4 of the run; medians count these as infinite.",
        "",
        "## Median T over seeds (the data of Figure 1)",
        "",
        "| b | beta_b / b | " + " | ".join(methods) + " |",
        "|---:|---:|" + "---:|" * len(methods),
    ]
    by = {(r["method"], r["b"]): r for r in summary}
    for b in sizes:
        r0 = by[(methods[0], b)]
        lines.append(f"| {b} | {r0['beta_b_over_b']:.4g} | "
                     + " | ".join(_t_cell(by[(m, b)]) for m in methods) + " |")
    b_ref = min(sizes)
    lines += ["", f"## Speedup over b = {b_ref}: measured T({b_ref})/T(b) against predicted "
              + ("b/beta_b" if b_ref == 1 else f"(b/beta_b)/({b_ref}/beta_{b_ref})"), "",
              "| b | predicted | " + " | ".join(methods) + " |",
              "|---:|---:|" + "---:|" * len(methods)]
    for b in sizes:
        r0 = by[(methods[0], b)]
        lines.append(f"| {b} | {fmt_ratio(r0['predicted_speedup'])} | " + " | ".join(
            fmt_ratio(by[(m, b)]["measured_speedup"]) for m in methods) + " |")
    lines += ["", "## Per method", ""]
    for m in methods:
        lines += [f"### {m}", "",
                  "| b | T median | T min - max | reached / seeds | data accesses b T (median) "
                  "| training s (median) | measured speedup | predicted speedup |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for b in sizes:
            r = by[(m, b)]
            rng = (f"{fmt_num(r['T_min'])} - {fmt_num(r['T_max'])}" if r["T_max"] is not None
                   else (f">= {fmt_num(r['T_min'])}" if r["T_min"] is not None else "NA"))
            sec = f"{r['seconds_median']:.3g}" if r["seconds_median"] is not None else "NA"
            lines.append(f"| {b} | {_t_cell(r)} | {rng} | {r['reached']} / {r['seeds']} | "
                         f"{fmt_num(r['accesses_median'])} | {sec} | {fmt_ratio(r['measured_speedup'])} | "
                         f"{fmt_ratio(r['predicted_speedup'])} |")
        lines.append("")
    return lines


def write_scaling_outputs(out_dir, metadata, cells, summary, *, plots: bool = True) -> list:
    """Write the CSV, JSON, Markdown and PNG files of a scaling study; return their paths."""
    out = Path(out_dir)
    name = metadata["dataset"]["name"]
    figures = [(plotting.plot_iterations, out / "iterations.png"),
               (plotting.plot_speedup, out / "speedup.png"),
               (plotting.plot_accesses, out / "accesses.png")] if plots else []
    return write_outputs(out, metadata, cells, summary, [
        ("results.csv", CELL_COLUMNS, _cell_rows(cells, metadata)),
        ("summary.csv", SUMMARY_COLUMNS, [{**r, "dataset": name} for r in summary])],
        figures, _scaling_lines(metadata, summary), "Plots")


def write_outputs(out, metadata, cells, summary, tables, figures, lines, heading="Plot") -> list:
    """Write the CSV ``tables`` ``(file, columns, rows)``, the ``figures`` ``(plot, path)``,
    ``results.json`` and ``results.md`` (``lines``, then the plots under ``heading``), in this
    order; return the paths."""
    for file, columns, rows in tables:
        write_csv(out / file, columns, rows)
    pngs = [plot(metadata, summary, path) for plot, path in figures]
    write_json_atomic(out / "results.json", {"metadata": metadata, "summary": summary,
                                             "cells": cells})
    if pngs:
        lines = lines + [f"## {heading}", ""] + [f"![{p.stem}]({p.name})" for p in pngs] + [""]
    write_text_atomic(out / "results.md", "\n".join(lines))
    return [out / t[0] for t in tables] + [out / "results.json", out / "results.md"] + pngs
