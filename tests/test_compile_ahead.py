"""Helpers compiled ahead: a cold first fit waits for its loop only, and gets the same model.

:class:`gpusvm.backends._compile_nb.CompileAhead` compiles the functions a fit calls
after its loop (the certificates' products, the epochs' orders) in a background thread
while the fit runs on their NumPy equivalents.  What must hold: the compilation happens
in that thread and ends with the function compiled; a failure there is raised where the
caller compiles; the switch works; a fork does not inherit the compiler lock held; and a
fit whose helpers are not compiled yet gives the model of a fit whose helpers are, bit
for bit (the NumPy equivalents sum in the same order).
"""

from __future__ import annotations

import ast
import multiprocessing
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from numba import njit
from numba.core import event
from sklearn.datasets import load_svmlight_file

import gpusvm
from gpusvm import PegasosSVC, SDCASVC
from gpusvm.backends import _compile_nb, make_backend, numba_
from gpusvm.backends import _csr_nb as csr
from gpusvm.backends._compile_nb import CompileAhead
from gpusvm.backends.base import SDCAPlan
from gpusvm.solvers._sampling import CounterSampler


class Threads(event.Listener):
    """The threads of the outermost ``numba:compile`` events, with the functions' names."""

    def __init__(self):
        self.depth, self.seen = 0, []

    def on_start(self, ev):
        if self.depth == 0:
            disp = (ev.data or {}).get("dispatcher")
            self.seen.append((threading.get_ident(), getattr(disp, "__qualname__", "?")))
        self.depth += 1

    def on_end(self, ev):
        self.depth -= 1


def test_a_helper_compiles_in_the_background_thread_and_is_then_ready(monkeypatch):
    monkeypatch.delenv("GPUSVM_COMPILE_AHEAD", raising=False)

    @njit
    def helper(x):
        return x.sum() * 2.0

    ahead = CompileAhead()
    args = (np.ones(3),)
    listener = Threads()
    with event.install_listener("numba:compile", listener):
        assert ahead.ready(helper, args) is False            # queued: the caller uses NumPy
        assert ahead.ready(helper, args) is False            # queued once
        ahead.wait()
    assert [name for _, name in listener.seen] == [helper.__qualname__]
    assert listener.seen[0][0] != threading.get_ident()       # not the caller's thread
    assert len(helper.overloads) == 1
    assert ahead.ready(helper, args) is True                  # compiled: the caller runs it
    assert helper(*args) == 6.0


def test_a_failed_compilation_is_raised_where_the_caller_compiles(monkeypatch):
    monkeypatch.delenv("GPUSVM_COMPILE_AHEAD", raising=False)

    @njit
    def broken(x):
        return x.no_such_attribute

    ahead = CompileAhead()
    assert ahead.ready(broken, (np.ones(2),)) is False
    ahead.wait()
    assert ahead.ready(broken, (np.ones(2),)) is True         # not queued again
    with pytest.raises(Exception, match="no_such_attribute"):
        broken(np.ones(2))


def test_the_switch(monkeypatch):
    @njit
    def helper(x):
        return x + 1

    ahead = CompileAhead()
    monkeypatch.setenv("GPUSVM_COMPILE_AHEAD", "0")
    assert ahead.ready(helper, (1.0,)) is True                # compiled where it is called
    assert ahead._thread is None and not helper.overloads
    monkeypatch.setenv("GPUSVM_COMPILE_AHEAD", "yes")
    with pytest.raises(ValueError, match=r"GPUSVM_COMPILE_AHEAD='yes': set 1 \(compile a fit's "
                       r"helpers in a background thread\) or 0 \(compile each where it is "
                       r"first called\)"):
        ahead.ready(helper, (1.0,))


def _compile_in_child(queue):
    @njit
    def fresh(x):
        return x * 3

    queue.put(fresh(2))


def test_a_fork_waits_for_the_background_compilation(monkeypatch):
    """A child forked while the thread compiles must not inherit numba's compiler lock held
    (its own first compilation would hang): the fork waits for the queue to end."""
    monkeypatch.delenv("GPUSVM_COMPILE_AHEAD", raising=False)

    @njit
    def slow(x):
        s = 0.0
        for i in range(x.size):
            s += np.sin(x[i]) * np.cos(x[i]) + np.exp(-x[i] * x[i])
        return s

    assert _compile_nb.AHEAD.ready(slow, (np.ones(4),)) is False
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_compile_in_child, args=(queue,))
    child.start()
    child.join(timeout=120)
    assert child.exitcode == 0
    assert queue.get(timeout=5) == 6
    _compile_nb.AHEAD.wait()


class NeverReady:
    """Helpers never compiled: every call takes the NumPy equivalent (counted)."""

    def __init__(self):
        self.asked = []

    def ready(self, dispatcher, args, **kwargs):
        self.asked.append(dispatcher.py_func.__name__)
        return False


@pytest.fixture(scope="module")
def letter():
    from conftest import shared_data_dir  # noqa: PLC0415

    X, y = load_svmlight_file(str(shared_data_dir() / "letter" / "letter.scale"))
    return sp.csr_matrix(X[:3000], dtype=np.float32), y[:3000]


def _fit(est, X, y, monkeypatch, never):
    if never:
        fake = NeverReady()
        monkeypatch.setattr(numba_, "AHEAD", fake)
    model = est.fit(X, y)
    monkeypatch.setattr(numba_, "AHEAD", _compile_nb.AHEAD)
    return model, (fake.asked if never else None)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("make, expected", [
    (lambda: SDCASVC(C=1.0, loss="squared_hinge", random_state=3),
     {"epoch_order", "dual_weights", "csr_matmat"}),
    (lambda: SDCASVC(C=1.0, random_state=3, sampling="with_replacement"),
     {"dual_weights", "csr_matmat"}),
    (lambda: PegasosSVC(C=1.0, random_state=3, batch_size=1, sampling="epoch",
                        max_iter=30_000, tol=0.0),
     {"epoch_order", "csr_matmat"}),
])
def test_a_multiclass_fit_on_the_numpy_equivalents_is_the_same_model(letter, monkeypatch,
                                                                       make, expected):
    """Letter (3,000 rows, 26 classes): every helper on its NumPy equivalent gives the
    coefficients, intercepts and iteration counts of the compiled helpers, bit for bit."""
    X, y = letter
    compiled, _ = _fit(make(), X, y, monkeypatch, never=False)
    numpy_, asked = _fit(make(), X, y, monkeypatch, never=True)
    assert set(asked) == expected
    np.testing.assert_array_equal(numpy_.coef_, compiled.coef_)
    np.testing.assert_array_equal(numpy_.intercept_, compiled.intercept_)
    assert numpy_.n_iter_ == compiled.n_iter_


def test_a_binary_fit_on_the_numpy_equivalents_is_the_same_model(rcv1_small, monkeypatch):
    """RCV1 slice, SDCA's defaults (epoch batches of one row, shrinking): the epochs' orders,
    ``X w``, ``X^T (alpha y)`` and the best point's segment minimum from NumPy, the same
    model bit for bit."""
    X = sp.csr_matrix(rcv1_small.X, dtype=np.float32)
    compiled, _ = _fit(SDCASVC(random_state=1), X, rcv1_small.y, monkeypatch, never=False)
    numpy_, asked = _fit(SDCASVC(random_state=1), X, rcv1_small.y, monkeypatch, never=True)
    assert set(asked) == {"epoch_order", "csr_rmatvec", "csr_matvec", "segment_point_one"}
    np.testing.assert_array_equal(numpy_.coef_, compiled.coef_)
    np.testing.assert_array_equal(numpy_.intercept_, compiled.intercept_)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_numpy_matvec_is_the_compiled_one_bit_for_bit(dtype):
    """``four_lane_matvec`` (one output's ``X w`` while ``csr_matvec`` compiles ahead) gives
    its sums exactly: rows of every length mod 4 (empty ones too), values spanning 12 orders
    of magnitude, where a sum in another order differs in the last bits."""
    rng = np.random.default_rng(5)
    lengths = np.r_[0, 1, 2, 3, 4, 5, 7, 8, 9, 13, 30, 31, rng.integers(0, 40, 60)]
    d = 64
    indices = np.concatenate([np.sort(rng.choice(d, k, replace=False)) for k in lengths])
    data = (rng.standard_normal(indices.size) * 10.0 ** rng.integers(-6, 6, indices.size))
    X = sp.csr_matrix((data.astype(dtype), indices.astype(np.int32),
                       np.r_[0, np.cumsum(lengths)].astype(np.int32)), shape=(lengths.size, d))
    w = rng.standard_normal(d)
    out = np.empty(X.shape[0])
    csr.csr_matvec(X.indptr, X.indices, X.data, w, 0.5, out, False)
    got = numba_.four_lane_matvec(X.indptr, X.indices, X.data, w, 0.5)
    np.testing.assert_array_equal(got, out)
    assert not np.array_equal(X.astype(np.float64) @ w + 0.5, out)   # SciPy's order differs


def _sdca_state(X, y, cuts, monkeypatch, entries=None):
    if entries is not None:
        monkeypatch.setattr(numba_, "ORDER_ENTRIES", entries)
    be = make_backend("numba", X, y)
    be.init_state_m()
    be.init_dual_m(1.0)
    sampler = CounterSampler(X.shape[0], 1, "epoch", 11)
    plan = SDCAPlan(lam=1e-3)
    for t0, t1 in zip(cuts[:-1], cuts[1:]):
        be.sdca_segment_m(sampler, t0, t1, plan)
    return be.V.copy(), be.alpha.copy()


def test_a_run_of_epochs_split_into_calls_gives_the_same_iterates(rcv1_small, monkeypatch):
    """One segment of 7.5 epochs (orders of every epoch held), the same with room for one
    or two epochs a call, and segments that end and start mid-epoch (the epoch held is
    kept): the same state bit for bit."""
    X = sp.csr_matrix(rcv1_small.X[:300], dtype=np.float64)
    y = np.where(rcv1_small.y[:300] > 0, 1.0, -1.0)
    n = X.shape[0]
    one = _sdca_state(X, y, [0, 15 * n // 2], monkeypatch)
    for entries in (n, 2 * n + 1):
        split = _sdca_state(X, y, [0, 15 * n // 2], monkeypatch, entries)
        for a, b in zip(one, split):
            np.testing.assert_array_equal(a, b)
    monkeypatch.setattr(numba_, "ORDER_ENTRIES", 1 << 23)
    pieces = _sdca_state(X, y, [0, n // 3, n // 2, 2 * n + 7, 3 * n, 15 * n // 2], monkeypatch)
    for a, b in zip(one, pieces):
        np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------------ the disk cache's stamps
_HELPER = "from numba import njit\n\n\n@njit(cache=True, inline='always')\ndef helper():\n" \
          "    return {value}\n"
_LOOP = "from numba import njit\n\nfrom helper_nb import helper\n\n\n@njit(cache=True)\n" \
        "def loop():\n    return helper()\n"
_RUN = """import sys
sys.path.insert(0, {folder!r})
from gpusvm.backends import _compile_nb
if {family}:
    _compile_nb.FAMILY += [{folder!r} + '/helper_nb.py', {folder!r} + '/loop_nb.py']
import loop_nb
print(loop_nb.loop(), sum(loop_nb.loop.stats.cache_hits.values()))
"""


def _loop_result(folder, family):
    """What ``loop()`` of a fresh process returns (its code cached on disk in ``folder``), and
    whether that code was loaded from the disk cache."""
    out = subprocess.run([sys.executable, "-c", _RUN.format(folder=str(folder), family=family)],
                         capture_output=True, text=True, check=True)
    value, hits = out.stdout.split()
    return int(value), int(hits) > 0


@pytest.mark.parametrize("family", [False, True])
def test_a_changed_helper_file_makes_the_cached_loop_stale_in_the_family(tmp_path, family):
    """numba stamps a cached function with its own file only: a loop that inlines a helper
    from another file keeps running the old helper after that file changes (an upgrade that
    changed only ``_csr_nb.py``), unless both files are of :data:`_compile_nb.FAMILY`; with
    them there, an unchanged family still loads from the disk cache."""
    (tmp_path / "helper_nb.py").write_text(_HELPER.format(value=1))
    (tmp_path / "loop_nb.py").write_text(_LOOP)
    assert _loop_result(tmp_path, family) == (1, False)
    assert _loop_result(tmp_path, family) == (1, True)          # from the disk cache
    (tmp_path / "helper_nb.py").write_text(_HELPER.format(value=2))
    assert _loop_result(tmp_path, family) == ((2, False) if family else (1, True))
    if family:
        assert _loop_result(tmp_path, family) == (2, True)      # cached again


def test_the_family_holds_every_file_of_cached_code_and_what_it_imports():
    """Every module of the package with ``cache=True`` code is of the family, and so is every
    module of the package one of them imports names from (helpers inlined, constants read),
    but :mod:`_compile_nb` itself (no compiled code)."""
    package = Path(gpusvm.__file__).parent
    cached = {str(p.resolve()) for p in package.rglob("*.py") if "cache=True" in p.read_text()}
    family = {str(Path(p).resolve()) for p in _compile_nb.FAMILY}
    assert cached <= family, sorted(cached - family)
    imported = set()
    for path in family:
        for node in ast.walk(ast.parse(Path(path).read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                imported.add(str((Path(path).parent / f"{node.module}.py").resolve()))
    assert imported - {str(Path(_compile_nb.__file__).resolve())} <= family
    from gpusvm.backends import _csr_nb  # noqa: PLC0415

    stamp = _csr_nb.row_dot._cache._impl.locator.get_source_stamp()
    assert stamp[1] == _compile_nb.family_digest()


@pytest.mark.parametrize("make", ["SDCASVC", "LinearSVCCV"])
def test_no_compilation_outlives_the_fit_that_queued_it(monkeypatch, make):
    """A fit returns only once the background compilations have ended: numba compiles inside
    ``warnings.catch_warnings``, and one still running would swap the warning handler under
    the caller's next lines (gpusvm.backends.wait_for_compiles)."""
    import time  # noqa: PLC0415

    import gpusvm  # noqa: PLC0415
    from gpusvm.backends import _compile_nb  # noqa: PLC0415

    monkeypatch.setenv("GPUSVM_COMPILE_AHEAD", "1")
    done = threading.Event()

    class Compilation:
        overloads: dict = {}

        def typeof_pyval(self, value):
            return type(value)

        def compile(self, sig):
            time.sleep(0.3)
            done.set()

    monkeypatch.setattr(_compile_nb, "in_disk_cache", lambda *a, **k: False)
    rng = np.random.default_rng(0)
    X = sp.random(200, 20, density=0.3, format="csr", random_state=0)
    y = np.where(rng.random(200) < 0.5, 1, -1)
    est = getattr(gpusvm, make)(**({"Cs": [1.0], "cv": 2} if make.endswith("CV") else {}))
    assert not _compile_nb.AHEAD.ready(Compilation(), (1.0,))
    est.fit(X, y)
    assert done.is_set()


_IN_A_PROCESS = r"""
import json, sys
import numpy as np
from numba.core import event
from gpusvm.backends import _csr_nb as csr
from gpusvm.backends._compile_nb import AHEAD

seen = []

class Compiles(event.Listener):
    def on_start(self, ev):
        seen.append(ev.data["dispatcher"].py_func.__name__)

    def on_end(self, ev):
        pass

args = (np.array([0, 2], np.int32), np.array([0, 1], np.int32), np.array([1.0, 2.0], np.float32),
        np.array([3.0, 4.0]), 0.5, np.zeros(1), False)
with event.install_listener("numba:compile", Compiles()):
    first = AHEAD.ready(csr.csr_matvec, args)
    AHEAD.wait()
    then = AHEAD.ready(csr.csr_matvec, args)
    csr.csr_matvec(*args)
print(json.dumps({"first": first, "then": then, "compiled_here": seen, "out": float(args[5][0]),
                  "hits": sum(csr.csr_matvec.stats.cache_hits.values())}))
"""


def test_a_helper_compiles_in_another_process_into_the_disk_cache(tmp_path):
    """A module-level helper of gpusvm with a disk cache compiles in a second Python process
    (numba compiles one function at a time in a process: only another one compiles beside
    the fit's loop), and this process loads it from the cache: no compilation here."""
    import json  # noqa: PLC0415
    import os  # noqa: PLC0415

    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), GPUSVM_COMPILE_AHEAD="1")
    out = subprocess.run([sys.executable, "-c", _IN_A_PROCESS], env=env, capture_output=True,
                         text=True, check=True, timeout=600)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"first": False, "then": True, "compiled_here": [], "out": 1.0 * 3 + 2 * 4
                   + 0.5, "hits": 1}


def test_a_fit_returns_while_the_compiling_process_works(monkeypatch):
    """The fit waits for this process's compiling thread only: a job of the compiling process
    touches nothing here (it may outlast the fit); ``AHEAD.wait`` waits for it too, and a
    job it could not cache is compiled here after all."""
    monkeypatch.setenv("GPUSVM_COMPILE_AHEAD", "1")
    release, compiled = threading.Event(), []

    class Slow:
        def compile(self, module, name, sig):
            release.wait(60)
            return True                    # "cached", but the cache lacks it: here then

        def close(self):
            pass

    @njit
    def helper(x):
        return x * 2.0

    ahead = CompileAhead()
    monkeypatch.setattr(ahead, "_compiler", Slow())
    monkeypatch.setattr(_compile_nb, "_by_name", lambda d: ("m", "helper"))
    monkeypatch.setattr(_compile_nb, "AHEAD", ahead)
    monkeypatch.setattr(numba_, "AHEAD", ahead)
    listener = Threads()
    assert ahead.ready(helper, (1.0,)) is False
    rng = np.random.default_rng(0)
    X = sp.random(200, 20, density=0.3, format="csr", random_state=0)
    y = np.where(rng.random(200) < 0.5, 1, -1)
    SDCASVC(random_state=0).fit(X, y)             # returns with the job in hand
    assert ahead._rrunning and not helper.overloads
    with event.install_listener("numba:compile", listener):
        release.set()
        ahead.wait()
    compiled = [name for _, name in listener.seen]
    assert helper.__qualname__ in compiled and len(helper.overloads) == 1


_AT_SIZE = r"""
import json, sys, warnings
import numpy as np, scipy.sparse as sp
from numba.core import event
warnings.simplefilter("ignore")
import gpusvm

class Count(event.Listener):
    def __init__(self):
        self.depth, self.names = 0, []

    def on_start(self, ev):
        if self.depth == 0:
            self.names.append(ev.data["dispatcher"].py_func.__qualname__)
        self.depth += 1

    def on_end(self, ev):
        self.depth -= 1

rng = np.random.default_rng(0)
n, d = 100_000, 1000                      # 5 x 10^6 nonzeros: the threads' paths
X = sp.random(n, d, density=0.05, format="csr", random_state=0)
y = np.where(X @ rng.standard_normal(d) > 0, 1, -1)
small, full = Count(), Count()
est = getattr(gpusvm, sys.argv[1])
with event.install_listener("numba:compile", small):
    est(random_state=0, n_jobs=2).fit(X[:2000], y[:2000])
with event.install_listener("numba:compile", full):
    big = est(random_state=0, n_jobs=2).fit(X, y)
print(json.dumps({"small": small.names, "full": full.names}))
"""


@pytest.mark.parametrize("make", ["LinearSVC", "SDCASVC"])
def test_a_fit_at_size_after_a_small_one_compiles_nothing(tmp_path, make):
    """An empty cache, two cores: a fit of 2,000 rows, then one of 10^5 rows and 5 x 10^6
    nonzeros (threads: Newton's products, SDCA's block loop) compiles no function more
    (numba's compilation events counted; what the large fit runs was compiled ahead into
    the cache while the small one ran, or it waited for that compilation)."""
    import json  # noqa: PLC0415
    import os  # noqa: PLC0415

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one core: no fit runs on threads")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), GPUSVM_COMPILE_AHEAD="1")
    out = subprocess.run([sys.executable, "-c", _AT_SIZE, make], env=env, capture_output=True,
                         text=True, check=True, timeout=900)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["small"] and got["full"] == []


def _wait_in_child(queue):
    _compile_nb.AHEAD.wait()              # the parent's compiling process is not the child's
    queue.put(_compile_nb.AHEAD._rrunning)


def test_a_forked_child_forgets_the_parents_compiling_process(monkeypatch):
    """A fork while the compiling process has a job: the thread talking to it is not copied,
    so the child drops those jobs (waiting for them looped for ever)."""
    monkeypatch.setenv("GPUSVM_COMPILE_AHEAD", "1")
    release = threading.Event()

    class Slow:
        def compile(self, module, name, sig):
            release.wait(60)
            return False

        def close(self):
            pass

    @njit
    def helper(x):
        return x * 2.0

    monkeypatch.setattr(_compile_nb.AHEAD, "_compiler", Slow())
    monkeypatch.setattr(_compile_nb, "_by_name", lambda d: ("m", "helper"))
    assert _compile_nb.AHEAD.ready(helper, (1.0,)) is False
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_wait_in_child, args=(queue,))
    child.start()
    child.join(timeout=120)
    assert child.exitcode == 0 and queue.get(timeout=5) is False
    release.set()
    _compile_nb.AHEAD.wait()
    monkeypatch.setattr(_compile_nb.AHEAD, "_compiler", _compile_nb._Compiler())
