"""Accuracy of the logit / poisson_log v2 boxes (qpinfer.tables.boxes.logit) against the exact
kernel.

Computes rho = sigma*/sigma_EP at every node of each box (single process), builds the
piecewise-Chebyshev interpolant, and compares it with the kernel at random points of each box
(and, for poisson_log, at random counts 0..1e5 mapped through m' = mu + y s^2)::

    OPENBLAS_NUM_THREADS=1 python benchmarks/probe_issue15_boxes.py logit --points 20000
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import qpinfer
from qpinfer.tables.boxes.registry import boxes_for
from qpinfer.tables.chebyshev import coefficients, evaluate


def _rho(name, mu, s, y):
    q = qpinfer.sigma_qp(name, mu, s, y)
    _, ep = qpinfer.tilted_moments(name, mu, s, y)
    return q / ep


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("likelihood", choices=["logit", "poisson_log"])
    ap.add_argument("--points", type=int, default=20000)
    ap.add_argument("--worst", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    total = 0
    for box in boxes_for(args.likelihood):
        t0 = time.perf_counter()
        grids = np.meshgrid(*(ax.nodes() for ax in box.axes), indexing="ij")
        label = box.labels[0]
        mu, s = box.cavity(label, *(g.ravel() for g in grids))
        values = _rho(args.likelihood, mu, s, np.full(mu.shape, label)).reshape(grids[0].shape)
        coef = coefficients(values, box.axes)
        pts = [rng.uniform(ax.start, ax.stop, args.points) for ax in box.axes]
        mu, s = box.cavity(label, *pts)
        y = np.full(mu.shape, label)
        inside, _, coords = box.locate(mu, s, y)
        got = evaluate(coef, box.axes, tuple(c[inside] for c in coords))
        exact = _rho(args.likelihood, mu[inside], s[inside], y[inside])
        err = np.abs(got / exact - 1.0)
        total += values.size
        print(
            f"{box.name}: {values.size} values ({values.size * 8 / 1e6:.2f} MB), "
            f"{time.perf_counter() - t0:.1f} s; {inside.sum()} points: max {err.max():.2e}, "
            f"99.9% {np.quantile(err, 0.999):.2e}"
        )
        for i in np.argsort(err)[::-1][: args.worst]:
            print("   ", [f"{c[inside][i]:.4g}" for c in coords], f"{err[i]:.2e}")
    print(f"total {total} values, {total * 8 / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
