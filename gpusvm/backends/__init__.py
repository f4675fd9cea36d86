"""Backends: the same primitives on NumPy/SciPy, on CuPy, and on the CPU kernel emulator.

``make_backend(name, X, y)`` builds one for a CSR matrix and labels in {-1, +1}.
"""

from __future__ import annotations

import importlib
import warnings

from .numpy_ import NumpyBackend

BACKENDS = ("auto", "numpy", "numba", "cupy", "emulated")


def cuda_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # ImportError, CUDARuntimeError, missing driver
        return False


def _imports(module: str) -> bool:
    try:
        importlib.import_module(module)
        return True
    except ImportError:
        return False


def wait_for_compiles() -> None:
    """Block until the background compilations of the fits so far have ended
    (:data:`gpusvm.backends._compile_nb.AHEAD`; nothing when numba was never loaded).

    numba compiles inside ``warnings.catch_warnings(record=True)``, which swaps the process'
    warning handler while it runs: a compilation left running after a fit returned would
    swallow or reorder the warnings of the caller's next lines (and restore, on its way out,
    a handler the caller has since replaced).  The fits and the command line call this before
    they return.  A compiling process's jobs (helpers it leaves in numba's disk cache) are not
    waited for: they touch nothing of this process."""
    import sys  # noqa: PLC0415

    ahead = sys.modules.get(f"{__name__}._compile_nb")
    if ahead is not None:
        ahead.AHEAD.wait_here()


def numba_available() -> bool:
    """True when numba imports (the optional ``fast`` extra, for the compiled CPU backend)."""
    return _imports("numba")


def emulator_available() -> bool:
    """True when the CPU kernel emulator imports (``gpusvm_emulator``, from ``emulator/``)."""
    return _imports("gpusvm_emulator")


#: why ``backend="emulated"`` cannot run without the emulator, and what to do
NO_EMULATOR = ("backend='emulated' needs the CPU kernel emulator that verifies gpusvm's CUDA "
               "kernels, a package of its own: run `pip install ./emulator` in gpusvm's source "
               "tree (the repository or the sdist); backend='numba' or 'numpy' fit the same "
               "models on the CPU")
NO_CUPY = "CuPy is not installed"  #: :func:`device_problem`'s cause without CuPy (no warning)
NO_DEVICE = "CuPy sees no CUDA device"  #: its cause when the driver reports no device
MIN_COMPUTE_CAPABILITY = 60  #: the oldest the kernels run on (FP64 atomics: 6.0)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _probe_device() -> str | None:
    """Why the ``"cupy"`` backend cannot run here, or None: CuPy, the driver, the device, the compile."""
    try:
        import cupy  # noqa: PLC0415
    except ImportError:
        return NO_CUPY
    except Exception as exc:  # a broken install: a missing CUDA library, for example
        return f"CuPy fails to import ({_first_line(exc)})"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return NO_DEVICE
        cc = int(cupy.cuda.Device().compute_capability)
    except Exception as exc:  # CUDARuntimeError, CUDADriverError: no or too old a driver
        return f"the CUDA driver cannot be used ({_first_line(exc)})"
    if cc < MIN_COMPUTE_CAPABILITY:
        return (f"the GPU's compute capability {cc // 10}.{cc % 10} is below "
                f"{MIN_COMPUTE_CAPABILITY // 10}.{MIN_COMPUTE_CAPABILITY % 10}, which the kernels' "
                "double-precision atomics need")
    try:
        from .. import _kernels  # noqa: PLC0415
        _kernels.load_module("cupy")
    except Exception as exc:  # NVRTC's CompileException, a missing libnvrtc
        return f"the CUDA kernels do not compile for this GPU ({_first_line(exc)})"
    return None


_problem: list = []


def device_problem() -> str | None:
    """Why ``backend="cupy"`` cannot run in this process, or None when it can (checked once).

    Imports CuPy, asks the driver for a device, checks its compute capability and compiles
    the kernels (which the first fit would do anyway; cached on disk).

    Returns
    -------
    str or None
        A one-line cause (:data:`NO_CUPY` when CuPy is not installed).
    """
    if not _problem:
        _problem.append(_probe_device())
    return _problem[0]


def resolve_backend_name(name: str) -> str:
    """Map ``"auto"`` to ``"cupy"`` when the device backend can run, else ``"numba"`` when numba
    imports, else ``"numpy"``; check the name.

    With CuPy installed but unusable (no driver, too old a GPU, a failed compile),
    ``"auto"`` falls back to the CPU with one warning per process naming the cause, and
    ``"cupy"`` raises one ``RuntimeError`` that names it.
    """
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    if name == "auto":
        problem = device_problem()
        if problem is None:
            return "cupy"
        fallback = "numba" if numba_available() else "numpy"
        if problem != NO_CUPY and not _warned:
            _warned.append(problem)
            warnings.warn(f"backend='auto' runs on the CPU ({fallback!r}): CuPy is installed but "
                          f"{problem}", RuntimeWarning, stacklevel=3)
        return fallback
    if name == "cupy":
        problem = device_problem()
        if problem is not None:
            cause = ("needs CuPy and a CUDA device, and none was found" if problem in (NO_CUPY, NO_DEVICE)
                     else f"cannot run here: {problem}")
            raise RuntimeError(
                f"backend='cupy' {cause}; install gpusvm[cuda12] or gpusvm[cuda13] on a CUDA machine, "
                "or use backend='numpy' (run `gpusvm info` to see which backends can run here)")
    if name == "emulated" and not emulator_available():
        raise RuntimeError(NO_EMULATOR)
    return name


_warned: list = []


def make_backend(name: str, X, y, sample_weight=None, device=None):
    """Build the backend ``name`` for CSR ``X`` and labels ``y`` in {-1, +1}.

    Parameters
    ----------
    name : {"auto", "numpy", "numba", "cupy", "emulated"}
        ``"numba"`` is the compiled CPU backend (needs the ``fast`` extra);
        ``"emulated"`` runs the device backend's orchestration with NumPy arrays
        and the CUDA kernels on the CPU kernel emulator (slow; for verification; the
        ``gpusvm_emulator`` package in the source tree's ``emulator/``).
    X : scipy.sparse.csr_matrix (or a CuPy CSR matrix for ``"cupy"``)
    y : array of shape (n,) or (n, M)
        One column per output (docs/algorithms.md, "Many outputs at once");
        ``backend.n_outputs`` is ``M`` (1 for 1-D ``y``).
    sample_weight : array of shape (n,) or (n, M), optional
        Example weights ``s_i >= 0``: one per row, shared by every output (sample_weight
        times class_weight[y_i]; docs/algorithms.md, "Weights"), or one per row and output,
        ``s_ic`` (a cross-validation fold's rows have weight 0 for the outputs that hold
        it out; docs/algorithms.md, "Model selection in one pass").
    device : int, optional
        CUDA device id the device backend is bound to (as ``cupy.cuda.Device(id)``;
        default: the current device); ``"emulated"`` emulates one device, id 0.  Refused
        with a CPU backend (``"numpy"``, ``"numba"``, or ``"auto"`` without a GPU), where it
        would be silently ignored.

    Returns
    -------
    Backend
    """
    name = resolve_backend_name(name)
    if device is not None and name in ("numpy", "numba"):
        raise ValueError(f"device={device!r} selects a GPU, but the backend is {name!r}, which "
                         "runs on the CPU; use backend='cupy' (or leave device=None)")
    if name == "numpy":
        return NumpyBackend(X, y, sample_weight)
    if name == "numba":
        from .numba_ import NumbaBackend  # noqa: PLC0415  (optional: numba)
        return NumbaBackend(X, y, sample_weight)
    from .device import make_device_backend  # noqa: PLC0415  (optional, heavy)
    options = {} if device is None else {"device": device}
    if sample_weight is not None or getattr(y, "ndim", 1) != 1:
        options["sample_weight"] = sample_weight
    return make_device_backend(name, X, y, **options)
