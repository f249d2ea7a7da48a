"""Accuracy of the logit / poisson_log v2 boxes (qpinfer.likelihoods.logit.boxes,
qpinfer.likelihoods.poisson_log.boxes) against the exact kernel.

Per box (default): computes rho = sigma*/sigma_EP at every node of each box (single process),
builds the piecewise-Chebyshev interpolant, and compares it with the kernel at random points of
the box, drawn uniformly in its coordinates and looked up through ``Box.locate``::

    OPENBLAS_NUM_THREADS=1 python benchmarks/probe_issue15_boxes.py logit --points 20000
    OPENBLAS_NUM_THREADS=1 python benchmarks/probe_issue15_boxes.py poisson_log --boxes near kappa

Whole table (``--store``): a built store (``qptables build LIK OUT --grid cells``) against the
kernel at random cavities, through the reader's lookup path, counting the fallbacks to the
kernel. Three equal sets: |mu| uniform on [0, 1e4], |mu| log-uniform on [1e-3, 1e4], and
cavities near the likelihood's features (logit: ``mu = -s^2 u + s z``, u uniform on [0, 1], z
normal(0, 4): between the fold line and the flat regime; poisson_log: ``m' = s z`` or ``m'`` at
a mode a uniform on [-5, 37]); sigma log-uniform on [1e-4, 1e6] (poisson_log: [1e-4, 1e4], the
kernel refuses wider cavities); labels +-1 (logit) or counts 0..1000 (a third 0, a third uniform,
a third log-uniform)::

    OPENBLAS_NUM_THREADS=1 python benchmarks/probe_issue15_boxes.py logit --store /tmp/logit.zarr \
        --cavities 60000
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import qpinfer
from qpinfer.likelihoods.registry import boxes_for
from qpinfer.tables.chebyshev import coefficients, evaluate


def _rho(name, mu, s, y):
    q = qpinfer.sigma_qp(name, mu, s, y)
    _, ep = qpinfer.tilted_moments(name, mu, s, y)
    return q / ep


def _worst(err, columns, k):
    for i in np.argsort(err)[::-1][:k]:
        print("   ", ", ".join(f"{name}={c[i]:.6g}" for name, c in columns), f"{err[i]:.2e}")


def probe_boxes(likelihood, points, worst, names) -> None:
    rng = np.random.default_rng(1)
    total = 0
    for box in boxes_for(likelihood):
        if names and box.name not in names:
            continue
        t0 = time.perf_counter()
        grids = np.meshgrid(*(ax.nodes() for ax in box.axes), indexing="ij")
        label = box.labels[0]
        mu, s = box.cavity(label, *(g.ravel() for g in grids))
        values = _rho(likelihood, mu, s, np.full(mu.shape, label)).reshape(grids[0].shape)
        coef = coefficients(values, box.axes)
        pts = [rng.uniform(ax.start, ax.stop, points) for ax in box.axes]
        mu, s = box.cavity(label, *pts)
        y = np.full(mu.shape, label)
        inside, _, coords = box.locate(mu, s, y)
        got = evaluate(coef, box.axes, tuple(c[inside] for c in coords))
        exact = _rho(likelihood, mu[inside], s[inside], y[inside])
        err = np.abs(got / exact - 1.0)
        total += values.size
        print(
            f"{box.name}: {values.size} values ({values.size * 8 / 1e6:.2f} MB), "
            f"{time.perf_counter() - t0:.1f} s; {inside.sum()} points: max {err.max():.2e}, "
            f"99.9% {np.quantile(err, 0.999):.2e}"
        )
        cols = [(ax.name, c[inside]) for ax, c in zip(box.axes, coords, strict=True)]
        _worst(err, cols, worst)
    print(f"total {total} values, {total * 8 / 1e6:.2f} MB")


def random_cavities(likelihood, n, seed):
    """``{set name: (mu, sigma, y)}``: the three sets of the module docstring, n/3 each."""
    rng = np.random.default_rng(seed)
    k = n // 3
    sign = rng.choice([-1.0, 1.0], (3, k))
    if likelihood == "logit":
        sigma = 10.0 ** rng.uniform(-4, 6, (3, k))
        y = rng.choice([-1.0, 1.0], (3, k))
        near = -(sigma[2] ** 2) * rng.random(k) + sigma[2] * rng.normal(0, 4, k)
    else:
        sigma = 10.0 ** rng.uniform(-4, 4, (3, k))
        y = np.floor(
            np.concatenate([np.zeros(k), rng.uniform(0, 1001, k), 10 ** rng.uniform(0, 3, k)])
        )
        y = rng.permuted(y).reshape(3, k)
        a = rng.uniform(-5, 37, k)
        s2 = sigma[2] ** 2
        with np.errstate(over="ignore"):
            m_mode = a + s2 * np.exp(a)
        m = np.where(rng.random(k) < 0.5, sigma[2] * rng.normal(0, 5, k), m_mode)
        near = m - y[2] * s2
    mu = [
        sign[0] * rng.uniform(0, 1e4, k),
        sign[1] * 10.0 ** rng.uniform(-3, 4, k),
        near,
    ]
    names = ("uniform |mu|", "log-uniform |mu|", "near the features")
    return {nm: (mu[i], sigma[i], y[i]) for i, nm in enumerate(names)}


def probe_store(likelihood, path, n, seed, worst) -> None:
    from qpinfer.tables.reduced import open_reduced

    table = open_reduced(path)
    print(f"{path}: boxes {[b.name for b in table._boxes]}")
    all_err = []
    for name, (mu, sigma, y) in random_cavities(likelihood, n, seed).items():
        before = table.fallback_count
        t0 = time.perf_counter()
        got = table.sigma_qp(mu, sigma, y)
        t1 = time.perf_counter()
        exact = qpinfer.sigma_qp(likelihood, mu, sigma, y)
        t2 = time.perf_counter()
        err = np.abs(got / exact - 1.0)
        all_err.append(err)
        print(
            f"{name}: {mu.size} cavities, max {err.max():.2e}, 99.9% "
            f"{np.quantile(err, 0.999):.2e}, fallbacks {table.fallback_count - before}; "
            f"table {t1 - t0:.2f} s, kernel {t2 - t1:.2f} s"
        )
        _worst(err, [("mu", mu), ("sigma", sigma), ("y", y)], worst)
    err = np.concatenate(all_err)
    print(
        f"all {err.size}: max {err.max():.2e}, 99.9% {np.quantile(err, 0.999):.2e}, "
        f"fallbacks {table.fallback_count}"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("likelihood", choices=["logit", "poisson_log"])
    ap.add_argument("--points", type=int, default=20000, help="random points per box")
    ap.add_argument("--worst", type=int, default=5)
    ap.add_argument("--boxes", nargs="*", default=(), help="only these boxes (names)")
    ap.add_argument("--store", help="probe this built store at random cavities instead")
    ap.add_argument("--cavities", type=int, default=60000, help="--store: random cavities")
    ap.add_argument("--seed", type=int, default=27, help="--store: seed of the cavities")
    args = ap.parse_args()
    if args.store:
        probe_store(args.likelihood, args.store, args.cavities, args.seed, args.worst)
    else:
        probe_boxes(args.likelihood, args.points, args.worst, set(args.boxes))


if __name__ == "__main__":
    main()
