"""Every kernel compiles with NVRTC for Volta, Ampere and Hopper, cleanly and without spills.

No GPU is needed: NVRTC and ptxas come from the ``nvidia-cuda-nvrtc-cu12`` and
``nvidia-cuda-nvcc-cu12`` wheels (the test extra).  The options and template
instances are exactly those the device backend compiles.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from gpusvm import _kernels

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import nvrtc_check as nvrtc  # noqa: E402


@pytest.fixture(scope="module")
def compiled():
    """NVRTC logs of every file and of the module, and the ptxas report, computed once."""
    return nvrtc.check_all()


def test_nvrtc_is_a_cuda_12_release():
    major, _ = nvrtc.version()
    assert major == 12, "CUDA 12.x NVRTC is needed: it is the last to accept compute_70"


@pytest.mark.parametrize("arch", nvrtc.ARCHS + nvrtc.OPTIONAL_ARCHS)
def test_module_compiles_without_warnings(compiled, arch):
    """The module (every kernel file, as the backend loads it) for every architecture."""
    logs, _ = compiled
    if arch not in nvrtc.archs():
        pytest.skip(f"the installed NVRTC {nvrtc.version()} does not know {arch}")
    assert nvrtc.warnings_in(logs[("module", arch)]) == "", logs[("module", arch)]


@pytest.mark.parametrize("name", _kernels.KERNEL_FILES)
def test_each_file_compiles_on_its_own_without_warnings(compiled, name):
    logs, _ = compiled
    log = logs[(name, nvrtc.FILE_ARCH)]
    assert nvrtc.warnings_in(log) == "", log


def test_blackwell_is_checked_where_nvrtc_knows_it():
    known = nvrtc.supported()
    assert 75 in known and 90 in known
    assert ("compute_100" in nvrtc.archs()) == (100 in known)
    assert ("compute_120" in nvrtc.archs()) == (120 in known)


def test_warning_would_be_reported():
    src = "__global__ void gpusvm_probe(int* out) { int unused; out[0] = 1; }\n"
    res = nvrtc.compile_ptx(src, "compute_80", _kernels.compile_options(), ())
    assert "unused" in nvrtc.warnings_in(res.log)


def test_every_file_holds_its_template_instances():
    for name in _kernels.KERNEL_FILES:
        exprs = _kernels.file_name_expressions(name)
        assert exprs, f"no instance of gpusvm_{name[:-3]} in {name}"
        res = nvrtc.compile_ptx(_kernels.read_source(name), "compute_90",
                                _kernels.compile_options(), exprs, name)
        entries = set(re.findall(r"\.entry\s+(\S+)\(", res.ptx))
        assert set(res.lowered.values()) <= entries, name
    covered = sum((_kernels.file_name_expressions(n) for n in _kernels.KERNEL_FILES), [])
    assert sorted(covered) == sorted(_kernels.all_name_expressions())
    assert len(_kernels.name_expressions("int64")) == 2 * 28     # the int64 column instances


def test_ptxas_reports_no_spills(compiled):
    _, resources = compiled
    expected = {(e, sm) for e in _kernels.all_name_expressions() for sm in nvrtc.sm_archs()}
    assert {(r.kernel, r.arch) for r in resources} == expected
    print()
    print(nvrtc.format_table(resources))
    for r in resources:
        assert r.spill_stores == 0 and r.spill_loads == 0, r
        # the launch bound (BLOCK threads, MIN_BLOCKS blocks per SM) allows 64 registers
        assert 0 < r.registers <= 64, r


def test_cli_prints_the_table(compiled, capsys, monkeypatch):
    chosen = []

    def check_all(archs):                # the compilations of the fixture, for the chosen arch
        chosen.append(archs)
        logs, resources = compiled
        return ({k: v for k, v in logs.items() if k[1] in archs},
                [r for r in resources if "compute_" + r.arch.split("_")[1] in archs])
    monkeypatch.setattr(nvrtc, "check_all", check_all)
    assert nvrtc.main(["--arch", "compute_90"]) == 0
    assert chosen == [("compute_90",)]
    out = capsys.readouterr().out
    assert "gpusvm_pegasos_step<float,1,0,0>" in out and "sm_90" in out
    assert "0 compilations with warnings; 0 with spills" in out
    assert "sm_80" not in out


@pytest.mark.parametrize("arch", nvrtc.ARCHS + nvrtc.OPTIONAL_ARCHS)
def test_the_while_module_compiles_and_assembles(arch):
    """kernels/while_more.cu, a module of its own: the device runtime's
    ``cudaGraphSetConditional`` is a builtin of the compiler (no header, no device runtime
    library), and ptxas assembles the kernel without relocatable code."""
    if arch not in nvrtc.archs():
        pytest.skip(f"the installed NVRTC {nvrtc.version()} does not know {arch}")
    res = nvrtc.compile_ptx(_kernels.read_source(_kernels.WHILE_FILE), arch,
                            _kernels.compile_options(), (_kernels.WHILE_KERNEL,),
                            _kernels.WHILE_FILE)
    assert nvrtc.warnings_in(res.log) == "", res.log
    assert "cudaGraphSetConditional" in res.ptx
    entries = set(re.findall(r"\.entry\s+(\S+)\(", res.ptx))
    assert set(res.lowered.values()) == entries and len(entries) == 1
    if arch == "compute_90":
        (r,) = nvrtc.ptxas_resources(res.ptx, "sm_90")
        assert r.spill_stores == 0 and r.spill_loads == 0 and 0 < r.registers <= 64, r
