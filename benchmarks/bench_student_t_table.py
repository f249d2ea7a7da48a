"""Lookup speed and accuracy of the shipped Student-t v2 table against the exact kernel (issue #15).

Interleaved in one run, best of ``--repeats``: the exact kernel ``qpinfer.sigma_qp``, the table's
``sigma_qp`` (needs EP's moments: computed inside), the table's ``sigma_ratio`` with EP's moments
given (what QP's projection calls, :class:`qpinfer.inference.ep.QuantileMatching`), and EP's moments
alone (the cost QP and EP share). Cavities: scale 0.3, random over the claimed domain
(s = sigma/scale log-uniform on [1e-4, 1e3] with z = d/sqrt(1+s^2) uniform on [0, 30], and 30%
far out: z >= 25, s up to 1e10)::

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_student_t_table.py --points 20000 --batch 4096
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # experiments/

import qpinfer  # noqa: E402
from experiments.datasets import student_t_cavities  # noqa: E402
from qpinfer.likelihoods.student_t import StudentT  # noqa: E402
from qpinfer.tables.shipped import open_shipped  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--scale", type=float, default=0.3)
    args = ap.parse_args()
    lik = StudentT(4.0, args.scale)
    table = open_shipped(lik.name)
    mu, sigma, y = student_t_cavities(args.points, 0, args.scale, near_log10_s_max=3.0)
    batches = [slice(i, i + args.batch) for i in range(0, args.points, args.batch)]
    mean, std = qpinfer.tilted_moments(lik, mu, sigma, y)

    def run(kind):
        out = np.empty(args.points)
        for b in batches:
            if kind == "kernel":
                out[b] = qpinfer.sigma_qp(lik, mu[b], sigma[b], y[b])
            elif kind == "table sigma_qp":
                out[b] = table.sigma_qp(mu[b], sigma[b], y[b])
            elif kind == "table ratio (moments given)":
                out[b] = std[b] * table.sigma_ratio(mu[b], sigma[b], y[b], (mean[b], std[b]))
            else:
                out[b] = qpinfer.tilted_moments(lik, mu[b], sigma[b], y[b])[1]
        return out

    kinds = ["kernel", "table sigma_qp", "table ratio (moments given)", "EP moments"]
    best = dict.fromkeys(kinds, np.inf)
    results = {}
    for _ in range(args.repeats):
        for kind in kinds:
            t0 = time.perf_counter()
            results[kind] = run(kind)
            best[kind] = min(best[kind], time.perf_counter() - t0)
    exact = results["kernel"]
    print(
        f"{args.points} cavities, batches of {args.batch}, scale {args.scale}, best of {args.repeats}"
    )
    for kind in kinds:
        rate = args.points / best[kind]
        line = f"  {kind:28s} {rate:12,.0f} points/s  ({best[kind]:.3f} s)"
        if kind.startswith("table"):
            err = np.max(np.abs(results[kind] / exact - 1.0))
            line += f"  max rel err vs kernel {err:.2e}; x{best['kernel'] / best[kind]:.1f} kernel"
        print(line)
    print(f"  fallbacks: {table.fallback_count}")


if __name__ == "__main__":
    main()
