"""Which objective should fit QP's hyperparameters? Held-out NTLL over repeated 10-fold CV.

Issue #30: QP's own objectives (``qp_objective="evidence"``: eq. (4) at QP's sites, and
``"loo"``: QP's leave-one-out predictive, each in one search with its total gradient) against
QP fitted by EP's evidence (``"ep"``: EP's search, then eq. (4) at QP's sites polished with the
sites held fixed, the paper's fit) and against EP itself. The paper's protocol (Sec. 6.1,
:mod:`experiments.paper`): ``--repeats`` random 10-fold partitions of each classification set,
features standardised on the training fold, SE kernel with one length scale from (1, 1), probit,
QP's sigma* from the shipped table.

Every variant sees the same folds, so the comparison is paired. With R repeats of K folds the
fold differences are correlated (the training sets overlap), so the paired test is Nadeau and
Bengio's corrected resampled t-test (Machine Learning 52, 2003; Bouckaert and Frank 2004 for
repeated CV): ``t = mean(d) / sqrt((1/(R K) + n_test/n_train) var(d))`` on ``R K - 1`` degrees
of freedom; a plain paired t-test on 50 overlapping folds would overstate significance.

    python -m experiments.qp_objectives --repeats 5 --out out/qp_objectives [--workers 2]

Each fold's record is written to ``OUT/folds/<dataset>-r<repeat>-f<fold>.json`` (a re-run skips
folds already there); ``OUT/table.md`` is the report.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np

from experiments import datasets as ds

#: name -> (method, qp_objective)
VARIANTS: dict[str, tuple[str, str]] = {
    "ep": ("ep", "evidence"),
    "qp-ep": ("qp", "ep"),
    "qp-evidence": ("qp", "evidence"),
    "qp-loo": ("qp", "loo"),
}


def run_fold(dataset: str, repeat: int, fold: int, folds: int) -> dict[str, Any]:
    """Fit every variant on one fold; returns its record (NTLL, error, seconds per variant)."""
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    import qpinfer
    from experiments.paper import _fit_with, _fold_data

    task = {"dataset": dataset, "repeat": repeat, "fold": fold, "folds": folds}
    kind, Xtr, ytr, Xte, yte = _fold_data(task)
    results = {}
    for name, (method, objective) in VARIANTS.items():
        est = qpinfer.GPClassifier(method, qp_objective=objective)
        r = _fit_with(est, kind, Xtr, ytr, Xte, yte)
        results[name] = {k: r[k] for k in ("ntll", "te", "seconds", "log_evidence", "theta")}
    return {"task": task, "n_train": len(ytr), "n_test": len(yte), "results": results}


def corrected_t_test(d: np.ndarray, n_train: int, n_test: int) -> tuple[float, float]:
    """Nadeau-Bengio corrected resampled t-test of mean(d) = 0: ``(t, two-sided p)``."""
    from scipy.stats import t as student_t

    k = d.size
    var = float(np.var(d, ddof=1))
    if var == 0.0:
        return (0.0, 1.0) if np.mean(d) == 0 else (np.inf * np.sign(np.mean(d)), 0.0)
    t = float(np.mean(d) / np.sqrt((1.0 / k + n_test / n_train) * var))
    return t, float(2.0 * student_t.sf(abs(t), k - 1))


def report(records: list[dict[str, Any]]) -> str:
    """The markdown tables: mean NTLL and error per variant, and the paired tests against
    ``qp-ep`` (QP with EP's objective, the paper's fit); then each variant's whole-fit time
    summed over the folds (fitted in turn in one process, one BLAS thread) and its ratio to
    EP's."""
    lines = [
        "| data | folds | "
        + " | ".join(f"NTLL {v}" for v in VARIANTS)
        + " | "
        + " | ".join(f"{v} - qp-ep (t, p)" for v in ("qp-evidence", "qp-loo", "ep"))
        + " |",
        "|---" * (2 + len(VARIANTS) + 3) + "|",
    ]
    for dataset in sorted({r["task"]["dataset"] for r in records}):
        rs = [r for r in records if r["task"]["dataset"] == dataset]
        ntll = {v: np.array([r["results"][v]["ntll"] for r in rs]) for v in VARIANTS}
        te = {v: np.mean([r["results"][v]["te"] for r in rs]) for v in VARIANTS}
        n_train, n_test = (
            int(np.mean([r["n_train"] for r in rs])),
            int(np.mean([r["n_test"] for r in rs])),
        )
        cells = [f"{ntll[v].mean():.4f} (TE {te[v]:.3f})" for v in VARIANTS]
        tests = []
        for v in ("qp-evidence", "qp-loo", "ep"):
            d = ntll[v] - ntll["qp-ep"]
            t, p = corrected_t_test(d, n_train, n_test)
            tests.append(f"{d.mean():+.4f} ({t:+.2f}, {p:.3f})")
        lines.append(f"| {dataset} | {len(rs)} | " + " | ".join(cells + tests) + " |")
    lines += [
        "",
        "| data | "
        + " | ".join(f"{v} s" for v in VARIANTS)
        + " | "
        + " | ".join(f"{v} / ep" for v in VARIANTS if v != "ep")
        + " |",
        "|---" * (1 + 2 * len(VARIANTS) - 1) + "|",
    ]
    for dataset in sorted({r["task"]["dataset"] for r in records}):
        rs = [r for r in records if r["task"]["dataset"] == dataset]
        sec = {v: sum(r["results"][v]["seconds"] for r in rs) for v in VARIANTS}
        ratios = [f"{sec[v] / sec['ep']:.3f}" for v in VARIANTS if v != "ep"]
        cells = [f"{sec[v]:.1f}" for v in VARIANTS]
        lines.append(f"| {dataset} | " + " | ".join(cells + ratios) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=list(ds.CLASSIFICATION))
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--folds", type=int, default=10)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path("out/qp_objectives"))
    args = p.parse_args(argv)
    fold_dir = args.out / "folds"
    fold_dir.mkdir(parents=True, exist_ok=True)
    tasks = [
        (d, r, f)
        for d in args.datasets
        for r in range(args.repeats)
        for f in range(args.folds)
        if not (fold_dir / f"{d}-r{r}-f{f}.json").exists()
    ]
    print(f"{len(tasks)} folds to run", file=sys.stderr)
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        futures = {pool.submit(run_fold, d, r, f, args.folds): (d, r, f) for d, r, f in tasks}
        for i, fut in enumerate(as_completed(futures), 1):
            d, r, f = futures[fut]
            path = fold_dir / f"{d}-r{r}-f{f}.json"
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(fut.result()))
            tmp.replace(path)
            print(f"[{i}/{len(tasks)}] {path.name}", file=sys.stderr)
    wanted = {
        f"{d}-r{r}-f{f}.json"
        for d in args.datasets
        for r in range(args.repeats)
        for f in range(args.folds)
    }
    records = [json.loads((fold_dir / n).read_text()) for n in sorted(wanted)]
    table = report(records)
    (args.out / "table.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
