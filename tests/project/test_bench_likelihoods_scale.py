"""``benchmarks/bench_likelihoods_scale.py``: its synthetic tasks, oracle and metrics, and the
script end to end at its smallest configuration (GPyTorch's SVGP, if installed; ours, if this
qpinfer has the minibatch Poisson and Student-t regressors)."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from scipy.stats import norm, poisson

import qpinfer
from tests._helpers import ROOT, run_benchmark

SCRIPT = ROOT / "benchmarks" / "bench_likelihoods_scale.py"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import bench_likelihoods_scale
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return bench_likelihoods_scale


def test_poisson_task_counts_and_held_out_set(bench):
    Xtr, ytr, Xte, yte, f_te, out_te = bench.make_task("poisson", 5000, seed=3)
    assert Xtr.shape == (5000, 6) and Xte.shape == (20_000, 6)
    assert np.all(ytr >= 0) and np.all(ytr == np.round(ytr))
    rate = np.exp(f_te)
    assert 0.55 - 1e-12 <= rate.min() and rate.max() <= 37.0
    assert not out_te.any()
    # the counts' mean equals the mean rate up to Poisson sampling error (5 standard errors)
    assert abs(yte.mean() - rate.mean()) < 5 * np.sqrt(rate.mean() / yte.size)
    _, _, Xte2, yte2, _, _ = bench.make_task("poisson", 10, seed=3)
    np.testing.assert_array_equal(Xte, Xte2)  # the held-out rows do not depend on n
    np.testing.assert_array_equal(yte, yte2)
    logd = bench.oracle_log_density("poisson", yte, f_te)
    np.testing.assert_allclose(logd, poisson.logpmf(yte, rate))


def test_student_t_task_outliers_and_oracle(bench):
    _, ytr, _, yte, f_te, out_te = bench.make_task("student_t", 40_000, seed=0)
    # 5% outliers among 20,000 rows: within 5 binomial standard deviations
    assert abs(out_te.mean() - 0.05) < 5 * np.sqrt(0.05 * 0.95 / out_te.size)
    r = np.abs(yte - f_te)
    assert np.all((r[out_te] >= 3.0) & (r[out_te] <= 10.0))
    # 19,000 Gaussian draws: the sample sd is within 0.5% (one sd) of 0.2
    assert (yte - f_te)[~out_te].std() == pytest.approx(0.2, rel=0.03)
    logd = bench.oracle_log_density("student_t", yte, f_te)
    inlier = np.log(0.95 * norm.pdf(r, scale=0.2))
    np.testing.assert_allclose(logd[r < 3.0], inlier[r < 3.0])
    np.testing.assert_allclose(logd[out_te], np.log(0.05 / 14.0), rtol=1e-12)


def test_metrics_formulas(bench):
    y = np.array([1.0, 2.0, 9.0])
    mean = np.array([1.0, 3.0, 5.0])
    f = np.log(np.array([1.0, 2.0, 4.0]))
    out = bench.metrics("poisson", np.log([0.5, 0.25, 0.125]), mean, y, f, np.zeros(3, bool))
    assert out["nll"] == pytest.approx(2 * np.log(2))
    assert out["rmse_y"] == pytest.approx(np.sqrt(17 / 3))
    assert out["rmse_truth"] == pytest.approx(np.sqrt(2 / 3))
    outlier = np.array([False, False, True])
    out = bench.metrics("student_t", np.zeros(3), mean, y, f, outlier)
    assert out["rmse_y"] == pytest.approx(np.sqrt(1 / 2))  # the outlier row left out
    with pytest.raises(ValueError, match="task"):
        bench.make_task("gamma", 10)
    with pytest.raises(ValueError, match="--methods"):
        bench.main(["--methods", "ours-ep,svgp"])


def test_smallest_configuration_runs_end_to_end(bench, tmp_path):
    pytest.importorskip("gpytorch")
    out = tmp_path / "out.json"
    proc = run_benchmark("bench_likelihoods_scale", "--n", "2000", "--m", "10",
                         "--svgp-steps", "40", "--epochs", "2", "--threads", "1",
                         "--timeout", "240", "--json", str(out), timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(out.read_text())
    rows = {(r["task"], r["method"]): r for r in data["rows"]}
    assert set(rows) == {(t, m) for t in bench.TASKS for m in bench.METHODS}
    for (task, method), r in rows.items():
        ours_here = hasattr(qpinfer, "MiniBatchSparseGPPoissonRegressor" if task == "poisson"
                            else "MiniBatchSparseGPStudentTRegressor")  # fmt: skip
        if method.startswith("ours-") and not ours_here:
            assert r["status"].startswith("unavailable"), r
            continue
        assert r["status"] == "ok", r
        assert r["n_train"] == 2000 and r["fit_seconds"] > 0
        assert r["peak_rss_mb"] >= r["rss_before_fit_mb"] > 0
        # better than the true model would be absurd; worse than 3 nats per point is a broken fit
        assert data["oracle"][task]["nll"] - 0.05 < r["nll"] < data["oracle"][task]["nll"] + 3.0
        if method.startswith("ours-"):
            assert set(r["ratio"]) >= {"fit_seconds", "nll", "rmse_truth"}
    assert "oracle" in proc.stdout
