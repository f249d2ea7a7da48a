"""``benchmarks/bench_dask_sweep.py`` end to end at a small size: it starts its own 1- and
2-worker LocalClusters (one at a time), runs a fixed number of sweeps on each engine and writes
per-sweep wall times measured inside the sweep loop (``SiteResult.sweep_seconds``)."""

from __future__ import annotations

import json

from tests._helpers import run_benchmark


def test_bench_dask_sweep_small_run_end_to_end(tmp_path):
    out = tmp_path / "out.json"
    proc = run_benchmark("bench_dask_sweep", "--n", "3000", "--m", "12", "--sweeps", "4",
                         "--repeats", "1", "--method", "ep", "--json", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(out.read_text())
    engines = {"in-process", "dask 1 worker", "dask 2 workers"}
    assert set(res["seconds_per_sweep"]) == engines
    assert all(t > 0 for t in res["seconds_per_sweep"].values())
    assert res["scaling_1_to_2_workers"] > 0
    # the three engines run the same arithmetic: the same sites to round-off
    assert all(d <= 1e-10 for d in res["max_abs_site_diff_vs_in_process"].values())
    assert set(res["worker_threads_env"]) == {"1", "2"}
    assert "scaling 1 -> 2 workers" in proc.stdout


def test_bench_dask_sweep_refuses_too_few_sweeps():
    proc = run_benchmark("bench_dask_sweep", "--sweeps", "2", timeout=120)
    assert proc.returncode == 2 and "--sweeps must be at least 3" in proc.stderr
