"""The wheel ships the CUDA kernels, and the installed package finds them; the kernel emulator
is a distribution of its own."""

from __future__ import annotations

import importlib.util
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from gpusvm import _kernels

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """Build the wheel from a copy of the project files (the work tree stays untouched)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md"):
        if (REPO / name).exists():
            shutil.copy2(REPO / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so")
    shutil.copytree(REPO / "gpusvm", src / "gpusvm", ignore=ignore)
    shutil.copytree(REPO / "kernels", src / "kernels", ignore=ignore)
    out = tmp_path_factory.mktemp("wheel")
    # build with the installed hatchling when there is one (fast, no download); else let pip
    # fetch the build backend into an isolated environment
    isolation = [] if importlib.util.find_spec("hatchling") is None else ["--no-build-isolation"]
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", *isolation, "-w", str(out)],
        capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"building the wheel failed:\n{proc.stdout}\n{proc.stderr}"
    wheels = list(out.glob("gpusvm-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_wheel_contains_every_kernel_file(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {p.name for p in (REPO / "kernels").iterdir() if p.suffix in (".cu", ".cuh")}
    assert shipped, "no kernel sources in the checkout"
    for name in shipped:
        assert f"gpusvm/kernels/{name}" in names, f"{name} missing from {wheel.name}"
    assert set(_kernels.KERNEL_FILES) <= shipped
    assert "gpusvm/_kernels.py" in names


def test_installed_wheel_loads_kernels_from_its_own_directory(wheel, tmp_path):
    target = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", str(target),
         str(wheel)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    probe = (
        "import sys\n"
        f"assert not any(p and __import__('os').path.realpath(p) == {str(REPO.resolve())!r} "
        "for p in sys.path), 'the checkout is on sys.path'\n"
        "from gpusvm import _kernels\n"
        "d = _kernels.kernel_dir()\n"
        "src = _kernels.module_source()\n"
        "assert all('#include' not in line for line in src.splitlines()), 'include left'\n"
        "assert 'gpusvm_margins' in src and 'gpusvm_pegasos_step' in src\n"
        "print(_kernels.__file__)\n"
        "print(d)\n"
        "print(_kernels.source_hash())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # the dependencies from this environment's site-packages, but not its .pth files (``-S``):
    # an editable install of the checkout puts the checkout on sys.path through one
    env["PYTHONPATH"] = os.pathsep.join([str(target), *site.getsitepackages()])
    # run from an empty directory, so neither the checkout nor its kernels/ are importable
    proc = subprocess.run([sys.executable, "-S", "-c", probe], capture_output=True, text=True,
                          cwd=tmp_path, env=env, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    module_file, kdir, digest = proc.stdout.split()
    assert Path(module_file).resolve().is_relative_to(target.resolve())
    assert Path(kdir).resolve() == (target / "gpusvm" / "kernels").resolve()
    assert digest == _kernels.source_hash(), "installed kernels differ from the checkout's"


def test_wheel_leaves_the_kernel_emulator_to_its_own_distribution(wheel, tmp_path):
    # users' installs carry no emulator; `pip install ./emulator` builds it, header included
    assert not [n for n in zipfile.ZipFile(wheel).namelist() if "emulator" in n]
    isolation = [] if importlib.util.find_spec("hatchling") is None else ["--no-build-isolation"]
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(REPO / "emulator"), "--no-deps", *isolation,
         "-w", str(tmp_path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (emu,) = tmp_path.glob("gpusvm_emulator-*.whl")
    names = set(zipfile.ZipFile(emu).namelist())
    assert {"gpusvm_emulator/__init__.py", "gpusvm_emulator/streams.py",
            "gpusvm_emulator/cuda_emu.h"} <= names


def test_emulated_backend_without_the_emulator_says_how_to_install_it(monkeypatch):
    import numpy as np  # noqa: PLC0415
    import scipy.sparse as sp  # noqa: PLC0415

    from gpusvm import SDCASVC, backends  # noqa: PLC0415
    monkeypatch.setitem(sys.modules, "gpusvm_emulator", None)     # import raises ImportError
    assert not backends.emulator_available()
    X = sp.random(40, 6, density=0.5, format="csr", random_state=0)
    with pytest.raises(RuntimeError) as info:
        SDCASVC(backend="emulated").fit(X, np.arange(40) % 2)
    assert str(info.value) == backends.NO_EMULATOR
    assert "pip install ./emulator" in backends.NO_EMULATOR
