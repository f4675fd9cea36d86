"""Long decimals in the compiled svmlight reader: exact to Python's ``float``, without it.

Numbers of up to 19 significant digits (scikit-learn's ``dump_svmlight_file`` writes 16,
``repr`` 17) are rounded by Clinger's fast path or the Eisel-Lemire algorithm inside the
compiled parser; these tests compare every such value, and the ties and subnormals where a
parser is most often wrong, with Python's ``float`` (then cast to the dtype, as scikit-learn
does), and check that none of them was left to Python.
"""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.datasets import dump_svmlight_file

from gpusvm import _svmlight_nb as nb
from gpusvm import datasets


def _parse(text: bytes, dtype=np.float64):
    """``(labels, data, number of hard numbers)`` of one chunk of ``text`` parsed compiled."""
    buf = np.frombuffer(text, np.uint8)
    counts = np.zeros((1, 8), np.int64)
    nb.bound_chunks(buf, 0, max(buf.size, 1), counts)
    rows, nnz = int(counts[0, 5]), int(counts[0, 6])
    counts[:, 5:7] = 0
    data, labels = np.zeros(nnz, dtype), np.zeros(rows)
    nb.parse_chunks(buf, 0, max(buf.size, 1), 0, 1, 1, counts, data, np.zeros(nnz, np.int32),
                    np.zeros(rows + 1, np.int64), labels, np.empty((0, 3), np.int64))
    assert counts[0, 3] == 0
    return labels[:counts[0, 0]], data[:counts[0, 1]], int(counts[0, 2])


def _halfway(k, s):
    """The decimal of the midpoint between the doubles ``k * 2**s`` and ``(k + 1) * 2**s``."""
    text = format(Decimal(2 * k + 1) * Decimal(2) ** (s - 1), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


DIGITS = st.integers(1, 19).flatmap(lambda nd: st.integers(10 ** (nd - 1), 10 ** nd - 1))
SHORT = st.one_of(
    # w * 10**q over the whole range, 17 to 19 digits most often
    st.tuples(st.one_of(DIGITS, st.integers(10**16, 10**19 - 1)), st.integers(-360, 330)).map(
        lambda t: f"{t[0]}e{t[1]}"),
    # the same as a decimal fraction (sklearn's and repr's spelling)
    st.tuples(st.integers(10**16, 10**19 - 1), st.integers(0, 30)).map(
        lambda t: f"0.{'0' * t[1]}{t[0]}"),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda v: f"{v:.16g}"),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda v: f"{v:.18e}"),
    st.floats(0, 2.3e-308).map(lambda v: f"{v:.18e}"),                    # subnormals
    st.floats(0, 2.3e-308).map(repr),
    # exact ties between two doubles that 19 digits hold (round half to even)
    st.tuples(st.integers(2**52, 2**53 - 1), st.integers(1, 9)).map(lambda t: _halfway(*t)),
    # and the neighbours of ties
    st.tuples(st.integers(2**52, 2**53 - 1), st.integers(1, 9), st.sampled_from([-1, 1])).map(
        lambda t: str(int(_halfway(t[0], t[1])) + t[2])))
LONG = st.one_of(
    # more than 19 digits: exact ties (decided by Python) and long expansions
    st.tuples(st.integers(2**52, 2**53 - 1), st.integers(-1074, 60)).map(
        lambda t: _halfway(*t)),
    st.tuples(st.integers(10**19, 10**30), st.integers(-340, 300)).map(
        lambda t: f"{t[0]}e{t[1]}"),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda v: f"{v:.25e}"))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(numbers=st.lists(st.tuples(SHORT, st.booleans()), min_size=1, max_size=40))
def test_up_to_19_digits_round_as_python_float_without_python(numbers):
    numbers = [("-" if neg else "") + v.lstrip("-") for v, neg in numbers]
    text = "".join(f"{v} 1:{v}\n" for v in numbers).encode()
    expect = np.array([float(v) for v in numbers])
    for dtype in (np.float64, np.float32):
        labels, data, hard = _parse(text, dtype)
        assert hard == 0                                # no number left to Python's float
        assert labels.tobytes() == expect.tobytes()
        with np.errstate(over="ignore"):
            assert data.tobytes() == expect.astype(dtype).tobytes()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(numbers=st.lists(LONG, min_size=1, max_size=20))
def test_longer_numbers_round_as_python_float(tmp_path_factory, numbers):
    path = tmp_path_factory.mktemp("long") / "long.svm"
    path.write_text("".join(f"{v} 1:{v}\n" for v in numbers))
    expect = np.array([float(v) for v in numbers])
    for dtype in (np.float64, np.float32):
        X, y = datasets._read_compiled(str(path), np.dtype(dtype), min_bytes=0, chunk_bytes=64,
                                       hard_fraction=1.0)
        assert y.tobytes() == expect.tobytes()
        with np.errstate(over="ignore"):
            assert X.data.tobytes() == expect.astype(dtype).tobytes()


@pytest.mark.parametrize("w, q", [(1, -342), (1, -343), (9999999999999999999, -343),
                                  (4940656458412465441, -342), (2470328229206232720, -342),
                                  (2470328229206232721, -342), (17976931348623157, 292),
                                  (17976931348623158, 292), (17976931348623159, 292),
                                  (1, 308), (1, 309), (9007199254740993, 0),
                                  (18014398509481986, 0), (18014398509481990, 0),
                                  (2**64 - 1, 0), (2**64 - 1, -1), (10**19, -19)])
def test_eisel_lemire_at_the_edges(w, q):
    assert nb._eisel_lemire(np.uint64(w), q) == float(f"{w}e{q}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_file_written_by_scikit_learn_reads_bit_for_bit(tmp_path, dtype):
    rng = np.random.default_rng(5)
    X = rng.standard_normal((300, 40)) * 10.0 ** rng.integers(-12, 12, (300, 40))
    X[rng.random(X.shape) < 0.6] = 0.0
    y = rng.standard_normal(300)
    path = tmp_path / "sk.svm"
    dump_svmlight_file(X, y, str(path), zero_based=False)
    text = path.read_bytes()
    assert len(max(text.split(), key=len)) > 20         # 16-digit values, as sklearn writes
    labels, _, hard = _parse(text, dtype)
    assert hard == 0 and labels.size == 300
    got = datasets._read_compiled(str(path), np.dtype(dtype), min_bytes=0, chunk_bytes=4096)
    ref = datasets._read_sklearn(str(path), np.dtype(dtype), None, "auto")
    (Xg, yg), (Xr, yr) = got, ref
    assert Xg.shape == Xr.shape and Xg.dtype == Xr.dtype == dtype
    np.testing.assert_array_equal(Xg.indptr, Xr.indptr)
    np.testing.assert_array_equal(Xg.indices, Xr.indices)
    assert Xg.data.tobytes() == Xr.data.tobytes() and yg.tobytes() == yr.tobytes()
