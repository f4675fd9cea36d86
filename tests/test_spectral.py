"""Tests of gpusvm.spectral: sigma^2 against a dense SVD, beta_b's identities, the table and the CLI."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from gpusvm import spectral
from gpusvm.spectral import beta_b, predicted_speedup, sigma_squared, speedup_table

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


def _random_sparse(n, d, density, seed, zero_rows=()):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=density, random_state=rng, format="csr",
                  data_rvs=lambda k: rng.standard_normal(k) * rng.uniform(0.1, 5.0, size=k))
    X = X.tolil()
    for r in zero_rows:
        X[r, :] = 0
    return X.tocsr()


def _dense_sigma2(X, normalize):
    A = X.toarray() if sp.issparse(X) else np.asarray(X, dtype=np.float64)
    if normalize:
        nrm = np.linalg.norm(A, axis=1)
        A = A / np.where(nrm > 0, nrm, 1.0)[:, None]
    return np.linalg.svd(A, compute_uv=False)[0] ** 2 / A.shape[0]


@pytest.mark.parametrize("shape,density", [((30, 12), 0.4), ((12, 40), 0.3), ((50, 50), 0.1),
                                           ((2, 7), 0.8), ((9, 1), 1.0)])
@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("method", ["lanczos", "power"])
def test_sigma2_matches_dense_svd(shape, density, normalize, method):
    X = _random_sparse(*shape, density, seed=sum(shape), zero_rows=(1,))
    expected = _dense_sigma2(X, normalize)
    got = sigma_squared(X, normalize=normalize, method=method, tol=1e-13)
    assert got == pytest.approx(expected, rel=1e-9)
    # dense input gives the same number
    assert sigma_squared(X.toarray(), normalize=normalize, method=method,
                         tol=1e-13) == pytest.approx(expected, rel=1e-9)


def test_sigma2_of_normalised_rows_is_in_its_range_and_scale_free():
    X = _random_sparse(40, 25, 0.3, seed=3, zero_rows=(0, 7))
    s2 = sigma_squared(X)
    assert 1.0 / 40 <= s2 <= 1.0
    # row scaling does not change the normalised sigma^2
    scales = np.random.default_rng(0).uniform(0.01, 100.0, size=40)
    assert sigma_squared(sp.diags(scales) @ X) == pytest.approx(s2, rel=1e-10)


def test_sigma2_extremes_orthogonal_and_identical_rows():
    n = 16
    assert sigma_squared(sp.identity(n, format="csr") * 3.0) == pytest.approx(1.0 / n, rel=1e-12)
    same = sp.csr_matrix(np.tile([[0.0, 2.0, 0.0, 1.0]], (n, 1)))
    assert sigma_squared(same) == pytest.approx(1.0, rel=1e-12)
    # orthogonal rows: no interaction, beta_b = 1, linear speedup b
    assert beta_b(8, n, 1.0 / n) == pytest.approx(1.0)
    assert predicted_speedup(8, n, 1.0 / n) == pytest.approx(8.0)
    # identical rows: beta_b = b, no speedup
    assert beta_b(8, n, 1.0) == pytest.approx(8.0)
    assert predicted_speedup(8, n, 1.0) == pytest.approx(1.0)


@pytest.mark.parametrize("n,sigma2", [(10, 0.1), (10, 0.37), (1000, 0.02), (1000, 1.0), (7, 1 / 7)])
def test_beta_b_identities(n, sigma2):
    assert beta_b(1, n, sigma2) == 1.0
    assert beta_b(n, n, sigma2) == pytest.approx(n * sigma2, rel=1e-12)
    prev = 0.0
    for b in range(1, n + 1):
        bb = beta_b(b, n, sigma2)
        assert 1.0 <= bb <= b * (1 + 1e-12)
        assert bb >= prev                      # nondecreasing in b
        prev = bb


def test_speedup_table_powers_of_two_and_n():
    rows = speedup_table(100, 0.05)
    assert [r.b for r in rows] == [1, 2, 4, 8, 16, 32, 64, 100]
    for r in rows:
        assert r.beta_b == pytest.approx(1 + (r.b - 1) * (100 * 0.05 - 1) / 99)
        assert r.speedup == pytest.approx(r.b / r.beta_b)
    assert [r.b for r in speedup_table(64, 0.5)] == [1, 2, 4, 8, 16, 32, 64]
    assert [r.b for r in speedup_table(1, 1.0)] == [1]
    assert [r.b for r in speedup_table(10, 0.5, batch_sizes=[3, 5])] == [3, 5]


def test_beta_b_bad_input_messages():
    with pytest.raises(ValueError, match=re.escape("the batch size must satisfy 1 <= b <= n=10, got b=11")):
        beta_b(11, 10, 0.5)
    with pytest.raises(ValueError, match=re.escape(
            "sigma2=1.5 is outside [1/n, 1] = [0.1, 1]: it must be sigma^2 of data with max row "
            "norm <= 1; compute it with sigma_squared(X, normalize=True)")):
        beta_b(2, 10, 1.5)
    with pytest.raises(ValueError, match=re.escape("method must be one of ('lanczos', 'power'), got 'qr'")):
        sigma_squared(sp.identity(3, format="csr"), method="qr")


def _cli(argv):
    parser = argparse.ArgumentParser(prog="gpusvm")
    sub = parser.add_subparsers(dest="command")
    spectral.add_cli(sub)
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_prints_sigma2_and_table(capsys):
    path = DATA / "rcv1_small" / "vw_rcv1_small.svm"
    assert path.exists(), f"missing data set {path}: the tests need ../shared/data"
    assert _cli(["spectral", str(path), "--n-features", "47236"]) == 0
    out = capsys.readouterr().out
    from sklearn.datasets import load_svmlight_file
    X, _ = load_svmlight_file(str(path), n_features=47236)
    s2 = sigma_squared(X)
    assert f"sigma^2 = ||X||^2/n (row-normalised data) = {s2:.6g}" in out
    assert f"1/sigma^2 = {1 / s2:.6g}" in out
    table = [line.split() for line in out.splitlines() if re.fullmatch(r"\s*\d+\s+[\d.]+\s+[\d.]+", line)]
    assert [int(r[0]) for r in table] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000]
    for b, bb, sp_ in table:
        assert float(bb) == pytest.approx(beta_b(int(b), 1000, s2), abs=1e-4)
        assert float(sp_) == pytest.approx(int(b) / beta_b(int(b), 1000, s2), abs=1e-4)


def test_cli_without_normalisation_refuses_the_table_for_long_rows(capsys):
    path = DATA / "a9a" / "a9a"
    assert path.exists(), f"missing data set {path}: the tests need ../shared/data"
    assert _cli(["spectral", str(path), "--no-normalize"]) == 0
    out = capsys.readouterr().out
    assert "(data as given)" in out
    assert "rerun with --normalize for the table" in out
    assert "b/beta_b" not in out


def test_cli_unreadable_file(capsys, tmp_path):
    bad = tmp_path / "bad.svm"
    bad.write_text("this is not svmlight\n")
    assert _cli(["spectral", str(bad)]) == 2
    assert f"gpusvm spectral: cannot read {bad}" in capsys.readouterr().err
