"""``benchmarks/gpu_session.sh plan``: the part's time rule (a step starts only with its NEED
seconds, default half its cap, left), the resume (a step whose record exists is skipped) and the bundle of the results."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None,
                                reason="the plan is a bash script run under coreutils' timeout")


def test_plan_resumes_skips_by_time_and_bundles(tmp_path):
    plan, out = tmp_path / "plan", tmp_path / "out"
    plan.mkdir()
    (plan / "env.json").write_text(json.dumps({"step": "env", "status": "pass", "line": "before"}))
    fake = tmp_path / "mc" / "liblinear"            # the peer's interpreter: a stand-in module
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "liblinearutil.py").write_text("")
    mc = tmp_path / "mc" / "python"
    mc.write_text(f'#!/bin/sh\nPYTHONPATH={fake.parent} exec {sys.executable} "$@"\n')
    mc.chmod(0o755)
    env = dict(os.environ, PLAN_DIR=str(plan), OUT=str(out), PYTHON=sys.executable,
               MC_PYTHON=str(mc), PART_LIMIT="40", CAP_while="200", CAP_scale_gpu="400")
    r = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu_session.sh"), "plan", "1",
                        "--emulated"], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert "[env] done before: skipped" in r.stdout
    for step in ("while", "scale-gpu", "newton", "threads", "read"):
        assert f"[{step}] not started:" in r.stdout
    setup = json.loads((plan / "setup.json").read_text())
    assert setup["status"] == "pass", (plan / "setup.log").read_text()
    assert str(fake) in setup["line"]                        # MC_PYTHON's liblinear, checked
    with tarfile.open(out / "plan-1.tar.gz") as tar:
        names = {Path(n).name for n in tar.getnames()}
    assert {"setup.json", "setup.log", "env.json"} <= names
    summary = (out / "plan-1.txt").read_text()
    assert "setup        PASS" in summary and "env          PASS  before" in summary


def test_plan_refuses_an_unknown_part(tmp_path):
    r = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu_session.sh"), "plan", "3"],
                       cwd=REPO, env=dict(os.environ, OUT=str(tmp_path)), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "usage: gpu_session.sh plan 1|2" in r.stdout


def _fake_mc(tmp_path):
    """An interpreter for the peers with a stand-in ``liblinear`` module."""
    fake = tmp_path / "mc" / "liblinear"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "liblinearutil.py").write_text("")
    mc = tmp_path / "mc" / "python"
    mc.write_text(f'#!/bin/sh\nPYTHONPATH={fake.parent} exec {sys.executable} "$@"\n')
    mc.chmod(0o755)
    return mc


HEAVY = "setup env lsvc newton scale cpu16 newton-cv threads read"


def _all(tmp_path, **env):
    plan, out = tmp_path / "plan", tmp_path / "out"
    env = dict(os.environ, PLAN_DIR=str(plan), OUT=str(out), PYTHON=sys.executable,
               MC_PYTHON=str(_fake_mc(tmp_path)), **env)
    r = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu_session.sh"), "all", "--emulated"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    return r, plan, out


def test_all_turns_while_nodes_off_for_the_later_steps_when_the_probe_fails(tmp_path):
    """The probe fails (WHILE nodes refused by the setting): while.env turns them off, the
    WHILE comparison is not run and says so, and every step passed: exit status 0."""
    r, plan, out = _all(tmp_path, GPUSVM_GRAPH_WHILE="0", PLAN_SKIP=HEAVY)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (plan / "while.env").read_text().strip() == "GPUSVM_GRAPH_WHILE=0"
    probe = json.loads((plan / "while-probe.json").read_text())
    assert probe["status"] == "pass" and probe["line"].startswith("WHILE nodes off")
    assert json.loads((plan / "while.json").read_text())["line"] == \
        "not run: while-probe turned WHILE nodes off"
    summary = (out / "plan-all.txt").read_text()
    assert "while-probe  PASS  WHILE nodes off" in summary


def test_all_keeps_a_stopped_step_and_fails_when_steps_are_left(tmp_path):
    """A step stopped at its cap leaves <step>.stopped.json (and WHILE nodes off); a step
    that the time left cannot start makes the exit status 1."""
    r, plan, out = _all(tmp_path, CAP_while_probe="1", ALL_LIMIT="50",
                        PLAN_SKIP="setup env newton scale cpu16 while newton-cv threads read")
    assert r.returncode == 1, r.stdout + r.stderr
    stopped = json.loads((plan / "while-probe.stopped.json").read_text())
    assert stopped["status"] == "stopped" and "stopped at its cap of 1 s" in stopped["line"]
    assert not (plan / "while-probe.json").exists()
    assert (plan / "while.env").read_text().strip() == "GPUSVM_GRAPH_WHILE=0"
    assert "[lsvc] not started:" in r.stdout
    assert "while-probe  STOPPED" in (out / "plan-all.txt").read_text()
