"""The docs' benchmark and accuracy figures (``benchmarks/plot_docs.py``,
``benchmarks/accuracy_scan.py``): the plots are drawn from the committed records, and the
accuracy scan's core agrees with the mpmath reference."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TOL = 1e-12  # the kernel's accuracy target (docs/development/accuracy.md); the reference has 30 digits


def _import(name):
    sys.path.insert(0, str(BENCH))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(BENCH))


def _is_png(path: Path) -> bool:
    data = path.read_bytes()
    return data[:8] == PNG_MAGIC and len(data) > 10_000


def test_plot_docs_draws_the_committed_records(tmp_path, capsys):
    plot_docs = _import("plot_docs")
    assert plot_docs.main(["--out-dir", str(tmp_path / "img")]) == 0
    for name in ("bench_lookup.png", "bench_fit.png", "bench_scale.png"):
        assert _is_png(tmp_path / "img" / name), name
    out = capsys.readouterr().out
    # the numbers of the committed records, as docs/guide/large_data.md's table quotes them
    assert "v1 linear, step 0.001" in out and "5.69e-08" in out
    assert "crabs" in out and "1.094" in out
    rows = plot_docs.scale_rows(ROOT / "docs" / "development" / "bench_scale")
    by_key = {(r["dataset"], r["n"], r["method"]): r for r in rows}
    assert round(by_key["synthetic", 10000, "sparse-ep"]["fit_seconds"], 1) == 11.3
    assert by_key["synthetic", 10000, "sparse-ep"]["source"] == "full_ours_gpytorch.json"
    assert round(by_key["synthetic", 30000, "gpy-epdtc"]["fit_seconds"], 1) == 558.2
    assert ("synthetic", 100000, "gpy-epdtc") not in by_key  # not run at full settings


def test_plot_docs_names_a_missing_record(tmp_path):
    plot_docs = _import("plot_docs")
    with pytest.raises(FileNotFoundError, match="nothere.json"):
        plot_docs.main(
            ["--tables-json", str(tmp_path / "nothere.json"), "--out-dir", str(tmp_path)]
        )


def test_accuracy_scan_core_agrees_with_mpmath():
    scan = _import("accuracy_scan")
    # 1 point per likelihood, sigma in [1e-4, 10] (the reference is seconds a point there)
    small = {
        name: scan.Spec(spec.labels, False, ((-4.0, 1.0, 1, 1),))
        for name, spec in scan.SPECS.items()
    }
    points = scan.make_points(seed=1, specs=small)
    assert len(points) == len(scan.SPECS)
    for p in points:
        assert 1e-4 <= p.sigma <= 10.0 and p.tau in scan.TAUS
        assert p.mu == pytest.approx(scan.centre(p.likelihood, p.y) + p.tau * p.sigma, rel=1e-15)
    records = scan.evaluate(points)
    for r in records:
        assert float(r["reference"]) > 0
        assert r["kernel_rel_err"] <= TOL, r
        if r["in_table"]:
            assert r["table_rel_err_vs_kernel"] <= TOL, r
    summary = scan.summarise(records)
    assert set(summary) == set(scan.SPECS)
    assert all(s["points"] == 1 and s["kernel_points_above_tol"] == 0 for s in summary.values())


def test_accuracy_scan_points_are_seeded_and_checked():
    scan = _import("accuracy_scan")
    assert scan.make_points(seed=3) == scan.make_points(seed=3)
    assert scan.make_points(seed=3) != scan.make_points(seed=4)
    with pytest.raises(ValueError, match="band of probit"):
        scan.make_points(specs={"probit": scan.Spec((1,), False, ((2.0, 1.0, 3, 1),))})


def test_committed_accuracy_record_is_complete():
    doc = json.loads((ROOT / "docs" / "development" / "accuracy_kernel.json").read_text())
    assert doc["command"].startswith("python benchmarks/accuracy_scan.py --json")
    assert doc["dps"] >= 30
    names = {p["likelihood"] for p in doc["points"]}
    assert len(names) == 6 and set(doc["summary"]) == names
    sigmas = [p["sigma"] for p in doc["points"]]
    assert min(sigmas) < 1e-3 and max(sigmas) > 1e5
    assert len(doc["points"]) == sum(s["points"] for s in doc["summary"].values())
