"""Tests of ``gpusvm study`` (gpusvm.study): outputs, resumability, the crossing search, bad input.

The data are real: ``../shared/data/rcv1_small`` (1,000 unit-norm TF-IDF rows of
RCV1 CCAT, 47,236 features).  Small runs only: the whole file takes well under
a minute on 2 cores.
"""

from __future__ import annotations

import csv
import json
import math
import re
import sys

import numpy as np
import pytest

from conftest import REPO_ROOT, shared_data_dir
from gpusvm import spectral
from gpusvm.cli import main as gpusvm_main
from gpusvm.datasets import load_svmlight
from gpusvm.solvers.pegasos import pegasos
from gpusvm.study import (RunSpec, SearchSettings, certify_optimum, find_crossing,
                          pegasos_k_study, prepare_problem, scaling_study, schedules_study)
from gpusvm.study.cli import parse_int_list
from gpusvm.study.search import _EveryPlan, _Observer, run_solver, trace_run
from gpusvm.study.store import CellStore

RCV1_FEATURES = 47236
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def rcv1_path():
    return shared_data_dir() / "rcv1_small" / "vw_rcv1_small.svm"


def first_crossing_brute_force(problem, spec, *, p_star, eps, max_iter):
    """The exact first ``t <= max_iter`` with ``P(w_t) - p_star <= eps`` (None: none), from an
    evaluation after every iteration: the oracle of the search's guarantee."""
    obs = _Observer(plan=_EveryPlan(), spec=spec, n=problem.n, cap=max_iter,
                    settings=SearchSettings(explode=None), p_star=p_star, eps=eps, replay=True)
    run_solver(problem, spec, obs, max_iter)       # stops at the first t with f <= eps
    return obs.T if obs.status == "reached" else None


@pytest.fixture(scope="module")
def a9a():
    X, y = load_svmlight(shared_data_dir() / "a9a" / "a9a", n_features=123, dtype=np.float64)
    return X, y


@pytest.fixture(scope="module")
def tiny(a9a):
    """The first 300 rows of a9a, rows normalised: cheap enough to evaluate every iteration."""
    X, y = a9a
    return prepare_problem(X[:300], y[:300], name="a9a[:300]")


def read_csv(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


# ------------------------------------------------------------------ CLI smoke test
def test_cli_smoke_rcv1_small_outputs_are_complete_and_consistent(tmp_path, capsys):
    out = tmp_path / "study"
    status = gpusvm_main([
        "study", str(rcv1_path()), "--n-features", str(RCV1_FEATURES), "--lam", "1e-2",
        "--eps", "1e-3", "--batch-sizes", "1,32,512", "--seeds", "1", "--max-epochs", "5",
        "--out", str(out), "--no-progress"])
    printed = capsys.readouterr().out
    assert status == 0
    assert "rows scaled to unit L2 norm" in printed
    files = {p.name: p for p in out.iterdir() if p.is_file()}
    for name in ("results.csv", "summary.csv", "results.json", "results.md", "iterations.png",
                 "speedup.png", "accesses.png"):
        assert name in files and files[name].stat().st_size > 0, name
    for name in ("iterations.png", "speedup.png", "accesses.png"):
        assert files[name].read_bytes()[:8] == PNG_MAGIC

    res = json.loads(files["results.json"].read_text())
    meta, cells, summary = res["metadata"], res["cells"], res["summary"]
    assert meta["dataset"]["n"] == 1000 and meta["dataset"]["d"] == RCV1_FEATURES
    assert meta["dataset"]["normalized"] is True
    assert meta["lam"] == 1e-2 and meta["eps"] == 1e-3
    assert meta["command"].startswith("gpusvm study ") and "--lam 0.01" in meta["command"]
    assert set(meta["versions"]) >= {"gpusvm", "numpy", "scipy", "scikit-learn", "python"}
    opt = meta["optimum"]
    assert opt["certified"] and 0 <= opt["gap"] <= 1e-8
    assert opt["lower_bound"] <= meta["p_star"] <= opt["lower_bound"] + opt["gap"] + 1e-15
    assert 1 / 1000 <= meta["sigma2"] <= 1

    # one cell per (method, b, seed), one CSV row per cell, the same numbers in both
    assert len(cells) == 4 * 3
    rows = {r["key"]: r for r in read_csv(files["results.csv"])}
    assert set(rows) == {c["key"] for c in cells}
    for c in cells:
        r = rows[c["key"]]
        assert r["status"] == c["status"]
        assert r["T"] == ("NA" if c["T"] is None else str(c["T"]))
        assert r["accesses"] == ("NA" if c["T"] is None else str(c["b"] * c["T"]))
        bb = spectral.beta_b(c["b"], 1000, meta["sigma2"])
        assert float(r["beta_b_over_b"]) == pytest.approx(bb / c["b"], rel=1e-12)
        assert float(r["predicted_speedup"]) == pytest.approx(c["b"] / bb, rel=1e-12)
        if c["status"] == "reached":
            assert c["final_subopt"] <= 1e-3 and c["T_lower"] < c["T"]
        else:
            assert c["T"] is None and c["accesses"] is None and c["seconds"] is None
        assert (out / "cells" / f"{c['key']}.json").is_file()

    # SDCA with b = 1 reaches 1e-3 within 5 epochs; Pegasos does not: null, NA, n.r.
    by = {(s["method"], s["b"]): s for s in summary}
    assert by[("sdca-safe", 1)]["T_median"] is not None
    assert by[("pegasos", 1)]["T_median"] is None
    peg1 = next(c for c in cells if c["method"] == "pegasos" and c["b"] == 1)
    assert peg1["status"] == "not_reached" and peg1["iterations_run"] == peg1["cap"] == 5000
    md = files["results.md"].read_text()
    for b in (1, 32, 512):
        line = next(ln for ln in md.splitlines() if ln.startswith(f"| {b} | ")
                    and ln.count("|") == 7)
        cols = [x.strip() for x in line.strip("|").split("|")]
        for m, text in zip(meta["methods"], cols[2:]):
            t = by[(m, b)]["T_median"]
            assert text == (str(t) if t is not None else text), (m, b)
            if t is None:
                assert text in ("n.r.", "div.", "stall", "time")
    assert "![iterations](iterations.png)" in md
    summary_rows = read_csv(files["summary.csv"])
    assert len(summary_rows) == len(summary) == 12
    for s, r in zip(summary, summary_rows):
        assert r["T_median"] == ("NA" if s["T_median"] is None else str(s["T_median"]))


# ------------------------------------------------------------------ resumability
def test_interrupted_study_resumes_without_recomputing_finished_cells(tiny, tmp_path):
    kwargs = dict(lam=1e-2, eps=1e-3, batch_sizes=[1, 4, 16], methods=["sdca-safe", "pegasos"],
                  seeds=1, max_epochs=30, out_dir=tmp_path, plots=False, progress=False)

    class Stop(Exception):
        pass

    finished = []

    def stop_after_two(cell):
        finished.append(cell["key"])
        if len(finished) == 2:
            raise Stop

    with pytest.raises(Stop):
        scaling_study(tiny, **kwargs, on_cell=stop_after_two)
    store = CellStore(tmp_path)
    files = sorted(store.dir.glob("*.json"))
    cell_files = [p for p in files if p.stem in finished]
    assert len(cell_files) == 2
    assert not list(store.dir.glob("*.tmp")) and not list(store.dir.glob(".*.tmp"))
    mtimes = {p: p.stat().st_mtime_ns for p in cell_files}
    assert not (tmp_path / "results.json").exists()

    res = scaling_study(tiny, **kwargs)
    assert (res.computed, res.reused) == (4, 2)
    assert {p: p.stat().st_mtime_ns for p in cell_files} == mtimes
    assert res.metadata["cells_reused"] == 2 and len(res.cells) == 6

    again = scaling_study(tiny, **kwargs)
    assert (again.computed, again.reused) == (0, 6)
    assert [c["T"] for c in again.cells] == [c["T"] for c in res.cells]

    # another eps or lam never reuses a cell
    other = scaling_study(tiny, **{**kwargs, "eps": 2e-3, "batch_sizes": [16],
                                   "methods": ["sdca-safe"]})
    assert (other.computed, other.reused) == (1, 0)
    other_lam = scaling_study(tiny, **{**kwargs, "lam": 2e-2, "batch_sizes": [16],
                                       "methods": ["sdca-safe"]})
    assert (other_lam.computed, other_lam.reused) == (1, 0)


def test_killed_cli_study_leaves_only_complete_cells_and_resumes(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "gpusvm.study", str(rcv1_path()), "--n-features",
           str(RCV1_FEATURES), "--lam", "1e-2", "--batch-sizes", "1,2,4,8,16,32,64,128",
           "--methods", "sdca-safe,sdca-aggressive", "--seeds", "1", "--max-epochs", "20",
           "--out", str(out), "--no-plots", "--no-progress"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO_ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    cells_dir = out / "cells"
    deadline = time.monotonic() + 120
    try:
        # the sigma^2 and P* cells come first, then the study cells: kill after the first ones
        while time.monotonic() < deadline and proc.poll() is None:
            if cells_dir.is_dir() and len(list(cells_dir.glob("sdca-*.json"))) >= 1:
                break
            time.sleep(0.01)
        assert proc.poll() is None, proc.stderr.read().decode()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    done = sorted(cells_dir.glob("sdca-*.json"))
    assert 1 <= len(done) < 16
    for p in done:
        json.loads(p.read_text())              # every cell file is complete
    mtimes = {p.name: p.stat().st_mtime_ns for p in done}
    assert gpusvm_main(["study", *cmd[3:]]) == 0
    res = json.loads((out / "results.json").read_text())
    meta = res["metadata"]
    assert meta["cells_total"] == 16
    assert meta["cells_reused"] == len(done) and meta["cells_computed"] == 16 - len(done)
    assert {p.name: p.stat().st_mtime_ns for p in done} == mtimes
    assert not list(cells_dir.glob(".*.tmp"))


# ------------------------------------------------------------------ the crossing search
@pytest.fixture(scope="module")
def tiny_optimum(tiny):
    return certify_optimum(tiny, 1e-2, gap_tol=1e-10, cross_check=False)


@pytest.mark.parametrize("method,b,settings", [
    # Pegasos one row at a time: the brute force takes half a minute, a long run
    pytest.param("pegasos", 1, SearchSettings(), marks=pytest.mark.slow),
    ("pegasos", 4, SearchSettings(predict_dense=False)),
    ("sdca-safe", 2, SearchSettings()),
    ("sdca-naive", 1, SearchSettings()),                      # noisy primal: dips below eps
    ("sdca-aggressive", 2, SearchSettings(probe_ratio=2.0, predict_dense=False)),
])
def test_reported_T_is_within_one_percent_of_the_brute_force_first_crossing(
        tiny, tiny_optimum, method, b, settings):
    lam, eps = 1e-2, 1e-3
    p_star = tiny_optimum["p_star"]
    sigma2 = spectral.sigma_squared(tiny.X)
    spec = RunSpec(method=method, b=b, seed=3, lam=lam,
                   sigma2=sigma2 if method in ("sdca-safe", "sdca-aggressive") else None)
    cap = 40000 // b
    res = find_crossing(tiny, spec, p_star=p_star, eps=eps, cap=cap, settings=settings)
    exact = first_crossing_brute_force(tiny, spec, p_star=p_star, eps=eps, max_iter=cap)
    assert exact is not None and exact > 300          # large enough for the dense step to matter
    assert res["status"] == "reached"
    assert exact <= res["T"] <= 1.01 * exact
    assert res["T_lower"] < res["T"] and res["T"] - res["T_lower"] <= 0.005 * res["T_lower"] + 1
    assert res["evaluations"] < exact / 2              # far fewer evaluations than iterations
    if res["replay"]:
        assert res["replay_consistent"] is True


@pytest.mark.parametrize("method,b", [("pegasos", 4), ("sdca-safe", 2)])
def test_search_gives_the_same_T_on_a_backend_with_fused_iterations(tiny, tiny_optimum,
                                                                     method, b):
    # the compiled backend runs the iterations between two evaluations in one call and asks
    # eval_at about iterations ahead: the search must only be driven through eval_at/callback
    sigma2 = spectral.sigma_squared(tiny.X) if method == "sdca-safe" else None
    found = {}
    for backend in ("numpy", "numba"):
        spec = RunSpec(method=method, b=b, seed=5, lam=1e-2, backend=backend, sigma2=sigma2)
        found[backend] = find_crossing(tiny, spec, p_star=tiny_optimum["p_star"], eps=1e-3,
                                       cap=20000)
    assert found["numba"]["status"] == found["numpy"]["status"] == "reached"
    assert abs(found["numba"]["T"] - found["numpy"]["T"]) <= 0.005 * found["numpy"]["T"] + 1
    assert len(found["numba"]["trace"]) == len(found["numpy"]["trace"])


def test_tail_average_matches_the_solver_tail_averaging(tiny):
    lam = 1e-2
    for T in (7, 40, 64):      # T // 2 <= 32: the snapshot grid holds floor(T/2) exactly
        spec = RunSpec(method="pegasos", b=2, seed=1, lam=lam, pegasos_output="tail")
        hist = trace_run(tiny, spec, points=[T], max_iter=T)
        from gpusvm.backends import make_backend
        ref = pegasos(make_backend("numpy", tiny.X, tiny.y), lam=lam, k=2, max_iter=T,
                      sampling="without_replacement", seed=1, projection=False,
                      averaging="tail", eval_every=T)
        P = next(h[2] for h in hist if h[0] == T)
        assert P == pytest.approx(ref.extra["objective"], rel=1e-12, abs=1e-12)


def test_not_reached_is_null_everywhere(tiny, tmp_path):
    res = scaling_study(tiny, lam=1e-2, eps=1e-3, batch_sizes=[1, 2], methods=["pegasos"],
                        seeds=[0, 1], max_iter=5, max_epochs=None, out_dir=tmp_path,
                        progress=False)
    assert all(c["status"] == "not_reached" and c["T"] is None and c["accesses"] is None
               and c["iterations_run"] == 5 for c in res.cells)
    assert all(s["T_median"] is None and s["measured_speedup"] is None for s in res.summary)
    data = json.loads((tmp_path / "results.json").read_text())
    assert all(c["T"] is None for c in data["cells"])
    rows = read_csv(tmp_path / "results.csv")
    assert {r["T"] for r in rows} == {"NA"} and {r["accesses"] for r in rows} == {"NA"}
    md = (tmp_path / "results.md").read_text()
    assert "| 1 | 1 | n.r. |" in md and "| 2 | " in md


def test_naive_sdca_failure_is_flagged_not_counted(tiny, tiny_optimum):
    res = find_crossing(tiny, RunSpec(method="sdca-naive", b=200, seed=0, lam=1e-2),
                        p_star=tiny_optimum["p_star"], eps=1e-3, cap=5000)
    assert res["status"] in ("diverged", "stalled")
    assert res["T"] is None and res["iterations_run"] < 5000


def test_certified_optimum_agrees_with_liblinear(tiny):
    opt = certify_optimum(tiny, 1e-2, gap_tol=1e-9)
    assert opt["certified"] and opt["gap"] <= 1e-9
    assert abs(opt["liblinear_minus_sdca"]) <= 1e-7
    assert opt["lower_bound"] <= opt["p_star"]


# ------------------------------------------------------------------ the Pegasos-paper presets
def test_pegasos_k_preset_writes_tables_and_plot(tiny, tmp_path):
    res = pegasos_k_study(tiny, lam=1e-2, batch_sizes=[1, 2, 4], T_values=[60], kT_values=[240],
                          seeds=2, out_dir=tmp_path, progress=False)
    assert len(res.cells) == 2 * (3 + 3)
    kt = sorted((c["k"], c["T"]) for c in res.cells if c["setting"] == "kT" and c["seed"] == 0)
    assert kt == [(1, 240), (2, 120), (4, 60)]
    assert all(c["objective"] >= res.metadata["p_star"] - 1e-12 for c in res.cells)
    for name in ("results.csv", "summary.csv", "results.json", "results.md", "pegasos_k.png"):
        assert (tmp_path / name).stat().st_size > 0
    assert (tmp_path / "pegasos_k.png").read_bytes()[:8] == PNG_MAGIC
    md = (tmp_path / "results.md").read_text()
    assert "## T fixed: median objective" in md and "## kT fixed: median objective" in md
    assert len(read_csv(tmp_path / "results.csv")) == 12


def test_schedules_preset_records_objective_and_test_loss(a9a, tiny, tmp_path):
    X, y = a9a
    res = schedules_study(tiny, lam=1e-2, T_max=300, etas=[0.1, 1.0], X_test=X[200:400],
                          y_test=y[200:400], out_dir=tmp_path, progress=False)
    labels = [s["label"] for s in res.summary]
    assert labels[0] == "Pegasos" and labels[1].startswith("NORMA (p=0.71")
    assert labels[2:] == ["fixed eta=0.1", "fixed eta=1"]
    for s in res.summary:
        assert s["T"][-1] == 300 and len(s["T"]) == len(s["objective"]) == len(s["test_loss"])
        assert all(v is not None and v > 0 for v in s["test_loss"])
    assert (tmp_path / "schedules.png").read_bytes()[:8] == PNG_MAGIC
    assert "## Test hinge loss" in (tmp_path / "results.md").read_text()
    with pytest.raises(ValueError, match=re.escape("a fixed step eta=200 needs eta * lam < 1")):
        schedules_study(tiny, lam=1e-2, T_max=100, etas=[200.0], out_dir=tmp_path / "x")


# ------------------------------------------------------------------ bad input
METHODS_TXT = "pegasos, sdca-naive, sdca-safe, sdca-aggressive"


@pytest.mark.parametrize("kwargs,message", [
    ({"methods": ["pegasos", "sgd"]}, f"unknown method 'sgd'; choose from {METHODS_TXT}"),
    ({"methods": []}, f"methods is empty; choose from {METHODS_TXT}"),
    ({"batch_sizes": []},
     "batch_sizes is empty; give at least one batch size, e.g. 1,2,4,...,1024"),
    ({"batch_sizes": [1, 301]},
     "batch size 301 exceeds the number of examples n=300; use batch sizes <= 300"),
    ({"batch_sizes": [0]}, "batch sizes must be positive integers, got 0"),
    ({"eps": 0.0}, "eps must be a finite number > 0, got 0.0"),
    ({"lam": -1.0}, "lam must be a finite number > 0, got -1.0"),
    ({"seeds": 0}, "seeds must be >= 1, got 0"),
    ({"max_epochs": None}, "give max_epochs or max_iter: every cell needs an iteration cap"),
    ({"pegasos_output": "mean"}, "pegasos_output must be one of tail, last, got 'mean'"),
    ({"pstar_gap": 1e-4}, "pstar_gap=0.0001 is too loose for eps=0.001"),
])
def test_bad_input_is_rejected_with_a_clear_message(tiny, tmp_path, kwargs, message):
    args = dict(lam=1e-2, eps=1e-3, batch_sizes=[1, 2], seeds=1, out_dir=tmp_path,
                progress=False)
    args.update(kwargs)
    with pytest.raises(ValueError, match=re.escape(message)):
        scaling_study(tiny, **args)
    assert not (tmp_path / "cells").exists()          # nothing computed before the check


@pytest.mark.parametrize("extra,message", [
    (["--methods", "pegasos,sgd"], f"unknown method 'sgd'; choose from {METHODS_TXT}"),
    (["--batch-sizes", ""], "batch_sizes is empty; give at least one batch size"),
    (["--batch-sizes", "1,2048"],
     "batch size 2048 exceeds the number of examples n=1000; use batch sizes <= 1000"),
    (["--batch-sizes", "1,x"], "--batch-sizes: 'x' is not an integer"),
])
def test_cli_bad_input_exits_2_with_one_line(tmp_path, capsys, extra, message):
    status = gpusvm_main(["study", str(rcv1_path()), "--n-features", str(RCV1_FEATURES),
                          "--lam", "1e-3", "--out", str(tmp_path / "o"), "--no-progress", *extra])
    err = capsys.readouterr().err
    assert status == 2
    assert err.startswith("gpusvm study: error: ") and message in err
    assert len(err.strip().splitlines()) == 1


def test_batch_size_lists_expand():
    assert parse_int_list("1,2,4,...,64") == [1, 2, 4, 8, 16, 32, 64]
    assert parse_int_list("1,4,...,256") == [1, 4, 16, 64, 256]
    assert parse_int_list("10,20,...,50") == [10, 20, 30, 40, 50]
    assert parse_int_list("3, 5 ,7") == [3, 5, 7]
    with pytest.raises(ValueError, match=re.escape("'...' needs two values before it")):
        parse_int_list("1,...,8")
    assert math.isclose(spectral.beta_b(1, 10, 0.5), 1.0)


# ------------------------------------------------------------------ a store that others share
STORE_KW = dict(lam=1e-2, eps=1e-3, batch_sizes=[4, 16], methods=["sdca-safe"], seeds=1,
                max_epochs=30, plots=False, progress=False)


def test_p_star_is_the_same_number_on_every_run(tiny):
    np.random.seed(1)
    first = certify_optimum(tiny, 1e-2, gap_tol=1e-8)
    np.random.seed(2)                          # liblinear once took its shuffle from here
    second = certify_optimum(tiny, 1e-2, gap_tol=1e-8)
    assert first["liblinear"]["primal"] == second["liblinear"]["primal"]
    assert first["p_star"] == second["p_star"]


def test_losing_the_optimum_cell_orphans_nothing(tiny, tmp_path):
    np.random.seed(1)
    first = scaling_study(tiny, **STORE_KW, out_dir=tmp_path)
    assert (first.computed, first.reused) == (2, 0)
    [optimum] = (tmp_path / "cells").glob("optimum-*.json")
    optimum.unlink()
    np.random.seed(2)
    again = scaling_study(tiny, **STORE_KW, out_dir=tmp_path)
    assert (again.computed, again.reused) == (0, 2)
    assert again.metadata["p_star"] == first.metadata["p_star"]


def test_an_edited_cell_or_p_star_is_recomputed(tiny, tmp_path):
    first = scaling_study(tiny, **STORE_KW, out_dir=tmp_path)
    cells = tmp_path / "cells"
    cell_file = sorted(cells.glob("sdca-safe-b16-*.json"))[0]
    cell = json.loads(cell_file.read_text())
    cell["T"] = 1
    cell_file.write_text(json.dumps(cell))
    [optimum_file] = cells.glob("optimum-*.json")
    optimum = json.loads(optimum_file.read_text())
    optimum["p_star"] -= 0.01
    optimum_file.write_text(json.dumps(optimum))
    with pytest.warns(UserWarning) as record:
        again = scaling_study(tiny, **STORE_KW, out_dir=tmp_path)
    messages = sorted(str(w.message) for w in record)
    assert messages == sorted([
        f"the study cell {optimum_file} does not match its checksum (it was edited or damaged); "
        "it is computed again",
        f"the study cell {cell_file} does not match its checksum (it was edited or damaged); "
        "it is computed again"])
    assert (again.computed, again.reused) == (1, 1)
    assert again.metadata["p_star"] == first.metadata["p_star"]
    assert [c["T"] for c in again.cells] == [c["T"] for c in first.cells]


def test_a_p_star_that_contradicts_its_certificate_is_recomputed(tiny, tmp_path):
    from gpusvm.study.store import checksum
    first = scaling_study(tiny, **STORE_KW, out_dir=tmp_path)
    [optimum_file] = (tmp_path / "cells").glob("optimum-*.json")
    optimum = json.loads(optimum_file.read_text())
    optimum["p_star"] -= 0.01                   # with a matching checksum: only the
    optimum["checksum"] = checksum(optimum)     # certificate can tell
    optimum_file.write_text(json.dumps(optimum))
    with pytest.warns(UserWarning, match=re.escape(
            f"the P* cell {optimum_file} does not agree with its own certificate (p_star - "
            "lower_bound != gap); it is computed again")):
        again = scaling_study(tiny, **STORE_KW, out_dir=tmp_path)
    assert again.metadata["p_star"] == first.metadata["p_star"]
    assert (again.computed, again.reused) == (0, 2)


def test_two_studies_on_one_directory_are_refused(tiny, tmp_path):
    import subprocess
    import sys
    code = ("import sys, time\nfrom gpusvm.study.store import study_lock\n"
            "with study_lock(sys.argv[1]):\n    print('locked', flush=True)\n    time.sleep(60)\n")
    env = {**__import__("os").environ, "PYTHONPATH": str(REPO_ROOT)}
    holder = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], env=env,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "locked\n"
        expected = (f"the study directory {tmp_path} is in use by another study (process "
                    f"{holder.pid}); wait for it to finish, or pass another output directory")
        with pytest.raises(RuntimeError, match=f"^{re.escape(expected)}$"):
            scaling_study(tiny, **STORE_KW, out_dir=tmp_path)
        assert not (tmp_path / "cells").exists()
    finally:
        holder.kill()
        holder.wait()
    assert scaling_study(tiny, **STORE_KW, out_dir=tmp_path).computed == 2   # free again


def test_only_stale_temporary_files_are_deleted(tmp_path):
    import os
    import subprocess
    import sys
    import time
    cells = tmp_path / "cells"
    cells.mkdir()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    in_flight = cells / f".sdca-b1-0123.json.{os.getpid()}.abc123.tmp"      # a live writer
    orphan = cells / f".sdca-b2-0123.json.{gone}.def456.tmp"                 # a dead writer
    old = cells / f".sdca-b4-0123.json.{os.getpid()}.ghi789.tmp"             # a day old
    for p in (in_flight, orphan, old):
        p.write_text("{")
    os.utime(old, (time.time() - 86400, time.time() - 86400))
    CellStore(tmp_path)
    assert in_flight.exists() and not orphan.exists() and not old.exists()


# ------------------------------------------------------------------ plots without matplotlib
def test_without_matplotlib_the_default_writes_the_tables_and_plots_true_fails_first(
        tiny, tmp_path, monkeypatch):
    for name in [m for m in sys.modules if m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)       # a plain `pip install gpusvm`
    kwargs = dict(lam=1e-2, eps=1e-3, batch_sizes=[1, 4], methods=["sdca-safe"], seeds=1,
                  max_epochs=30, progress=False)
    # asked for, the plots fail before any work, not after the cells ran
    for study, extra in ((scaling_study, kwargs), (pegasos_k_study, dict(lam=1e-2, seeds=1))):
        with pytest.raises(ImportError, match=re.escape("pip install 'gpusvm[plot]'")):
            study(tiny, **extra, out_dir=tmp_path / "asked", plots=True)
        assert not (tmp_path / "asked" / "cells").exists()
    # by default the study runs and writes its tables without plots
    files = scaling_study(tiny, **kwargs, out_dir=tmp_path / "default").files
    assert {p.name for p in files} == {"results.csv", "summary.csv", "results.json", "results.md"}
    assert "![" not in (tmp_path / "default" / "results.md").read_text()
