"""Whole-fit time of QP against EP, hyperparameters included, for each ``qp_objective``.

Issue #30's speed bullet: QP's whole fit (hyperparameters by L-BFGS-B from variance 1, length
scale 1, isotropic SE, probit, the shipped sigma* table) against EP's, on the paper's
classification sets (Ionosphere, Sonar, Pima, Crabs; all rows, standardised), in the same
process with one BLAS thread. The variants run interleaved, ``--repeats`` times each, and the
median wall time of each is reported, with its ratio to EP's; also the number of evidence
evaluations and inner sweeps, which explain most of a ratio.

    python benchmarks/bench_qp_objective.py [--repeats 5] [--datasets ionosphere sonar ...]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from experiments import datasets as ds  # noqa: E402

VARIANTS = {  # name -> GPClassifier keywords
    "ep": {"method": "ep"},
    "qp-ep": {"method": "qp", "qp_objective": "ep"},
    "qp-evidence": {"method": "qp", "qp_objective": "evidence"},
    "qp-loo": {"method": "qp", "qp_objective": "loo"},
}


def fit_once(X, y, kwargs) -> tuple[float, int, int, float]:
    """``(seconds, evaluations, inner sweeps, log evidence)`` of one whole fit."""
    from qpinfer import GPClassifier

    est = GPClassifier(**kwargs)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
    seconds = time.perf_counter() - start
    return seconds, est.n_evaluations_, est.n_inner_iter_total_, est.log_marginal_likelihood_


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=list(ds.CLASSIFICATION))
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    from threadpoolctl import threadpool_limits

    print(
        "| data | N | "
        + " | ".join(VARIANTS)
        + " | "
        + " | ".join(f"{v} / ep" for v in VARIANTS if v != "ep")
        + " |"
    )
    print("|---" * (2 + 2 * len(VARIANTS) - 1) + "|")
    with threadpool_limits(1):
        for name in args.datasets:
            X, y = ds.load_classification(name)
            X, _ = ds.standardize(X, X)
            fit_once(X, y, VARIANTS["ep"])  # warm-up: imports, table open, caches
            times = {v: [] for v in VARIANTS}
            info = {}
            for _ in range(args.repeats):
                for v, kwargs in VARIANTS.items():
                    s, n_eval, n_inner, lml = fit_once(X, y, kwargs)
                    times[v].append(s)
                    info[v] = (n_eval, n_inner, lml)
            med = {v: float(np.median(t)) for v, t in times.items()}
            cells = [f"{med[v]:.3f} s ({info[v][0]} evals, {info[v][1]} sweeps)" for v in VARIANTS]
            ratios = [f"{med[v] / med['ep']:.3f}" for v in VARIANTS if v != "ep"]
            print(f"| {name} | {len(y)} | " + " | ".join(cells + ratios) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
