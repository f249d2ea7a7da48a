"""Accuracy and size of piecewise-Chebyshev probit tables in reduced coordinates (issue #13).

Builds the probit ratio sigma*/sigma_EP at the Chebyshev-Gauss nodes of equal cells over one of
the two reduced-coordinate boxes of ``docs/development/tables-v2.md`` with the exact kernel, then compares
the interpolant (:mod:`qpinfer.tables.chebyshev`) with the kernel at random points of the box:

* ``core``: tau = mu / sqrt(1 + sigma^2) in [-8, 12.5], log10 sigma in [-2.75, 9];
* ``tail``: u = -8 / tau in (0, 1], log10 kappa in [-8, 2.75], kappa = |tau| / sigma.

Example (the configurations of docs/development/tables-v2.md)::

    OPENBLAS_NUM_THREADS=1 python benchmarks/probe_v2_cells.py core --nodes 12 --widths 0.5 0.25
    OPENBLAS_NUM_THREADS=1 python benchmarks/probe_v2_cells.py tail --nodes 12 --widths 0.25 0.25
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import qpinfer
from qpinfer.likelihoods.layout import CellAxis
from qpinfer.tables.chebyshev import coefficients, evaluate, tail_size

T = 8.0  # |tau| where the tail box takes over


def _ratio(mu, sigma):
    q = qpinfer.sigma_qp("probit", mu, sigma, 1.0)
    _, ep = qpinfer.tilted_moments("probit", mu, sigma, 1.0)
    return q / ep


def core_cavity(tau, log10_sigma):
    s = 10.0**log10_sigma
    return tau * np.hypot(1.0, s), s


def tail_cavity(u, log10_kappa):
    tau = -T / u
    s = np.abs(tau) / 10.0**log10_kappa
    return tau * np.hypot(1.0, s), s


BOXES = {
    "core": (core_cavity, ("tau", -8.0, 12.5), ("log10_sigma", -2.75, 9.0)),
    "tail": (tail_cavity, ("u", 0.0, 1.0), ("log10_kappa", -8.0, 2.75)),
}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("box", choices=sorted(BOXES))
    p.add_argument("--nodes", type=int, default=12, help="Chebyshev nodes per cell and axis")
    p.add_argument("--widths", type=float, nargs=2, default=(0.5, 0.25), metavar=("W0", "W1"))
    p.add_argument("--points", type=int, default=200_000, help="random test points")
    args = p.parse_args(argv)
    cavity, (n0, lo0, hi0), (n1, lo1, hi1) = BOXES[args.box]
    w0, w1 = args.widths
    a = CellAxis(n0, lo0, w0, int(np.ceil((hi0 - lo0) / w0)), args.nodes)
    b = CellAxis(n1, lo1, w1, int(np.ceil((hi1 - lo1) / w1)), args.nodes)
    g0, g1 = np.meshgrid(a.nodes(), b.nodes(), indexing="ij")
    t = time.perf_counter()
    values = _ratio(*cavity(g0.ravel(), g1.ravel())).reshape(g0.shape)
    t_build = time.perf_counter() - t
    coef = coefficients(values, (a, b))
    rng = np.random.default_rng(0)
    x0 = rng.uniform(max(lo0, 1e-6), a.stop, args.points)
    x1 = rng.uniform(lo1, b.stop, args.points)
    exact = _ratio(*cavity(x0, x1))
    t = time.perf_counter()
    approx = evaluate(coef, (a, b), (x0, x1))
    t_eval = time.perf_counter() - t
    err = np.abs(approx / exact - 1.0)
    i = int(np.argmax(err))
    print(
        f"{args.box}: {a.n_cells} x {b.n_cells} cells of {args.nodes}^2 nodes, {values.size} "
        f"values ({values.nbytes / 1e6:.2f} MB), kernel {t_build:.1f} s\n"
        f"max rel err {err.max():.2e} at {n0}={x0[i]:.4f}, {n1}={x1[i]:.4f}; "
        f"99.9% {np.quantile(err, 0.999):.1e}; largest tail coefficient "
        f"{tail_size(coef, (a, b)).max():.1e}; {args.points / t_eval / 1e6:.2f} M lookups/s"
    )


if __name__ == "__main__":
    main()
