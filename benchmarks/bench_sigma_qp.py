"""Throughput and accuracy of sigma* (Zhang et al., 2020, eq. (7)): vectorized kernel vs per-point quad.

Measures, in one single-threaded run (BLAS/OpenMP threads pinned to 1):

* ``qpinfer.sigma_qp`` -- the vectorized kernel -- over a random sample of the paper domain
  (``mu ~ U[-10, 10]``, ``log10 sigma ~ U[-1, 1]``; probit labels +-1, Poisson counts 0..20),
  in chunks as a table build would call it;
* the per-point baseline the paper's authors describe: the tilted CDF ``F(x)`` by
  ``scipy.integrate.quad`` inside an outer ``quad`` of ``phi(Phi^{-1}(F(x)))`` (nested quad),
  on a smaller subsample (range ``mu +- 12 sigma``, the tilted mean as a breakpoint);
* the accuracy of both against the mpmath reference (:mod:`qptables.reference.sigma`) on a common
  subsample.

Throughput is points per second of *process CPU time* (= per core, the run is single-threaded),
which is robust to other jobs sharing the machine; wall-clock numbers go to the JSON as well.

    python benchmarks/bench_sigma_qp.py --points 100000 --baseline-points 200 \\
        --accuracy-points 30 --json out/bench_sigma_qp.json
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np
from scipy import integrate, special

import qpinfer

LIKELIHOODS = ("probit", "poisson_square")
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def sample(name: str, n: int, rng: np.random.Generator):
    """Random cavity points over the paper domain (and labels / counts)."""
    mu = rng.uniform(-10.0, 10.0, n)
    sigma = 10.0 ** rng.uniform(-1.0, 1.0, n)
    if name == "probit":
        y = rng.choice(np.array([-1, 1]), n)
    else:
        y = rng.integers(0, 21, n)
    return mu, sigma, y


# ----------------------------------------------------------------------------- baseline


def _log_tilted_unnormalised(name: str, mu: float, sigma: float, y: int):
    if name == "probit":

        def log_lik(f: float) -> float:
            return float(special.log_ndtr(y * f))
    else:
        log_fact = math.lgamma(y + 1)

        def log_lik(f: float) -> float:
            if f == 0.0:
                return 0.0 if y == 0 else -math.inf
            return 2 * y * math.log(abs(f)) - f * f - log_fact

    def log_q(f: float) -> float:
        return log_lik(f) - 0.5 * ((f - mu) / sigma) ** 2 - math.log(sigma) - _LOG_SQRT_2PI

    return log_q


def sigma_qp_nested_quad(name: str, mu: float, sigma: float, y: int) -> float:
    """Eq. (7) per point: quad of phi(Phi^-1(F(x))), F itself by quad (the authors' approach).

    Integration range: the cavity's ``mu +- 12 sigma`` (the tilt cannot move mass outside it),
    with the tilted mean given to quad as a breakpoint so that narrow tilts are not missed.
    """
    log_q = _log_tilted_unnormalised(name, mu, sigma, y)
    mean = float(qpinfer.tilted_moments(name, mu, sigma, y)[0])
    lo, hi = mu - 12.0 * sigma, mu + 12.0 * sigma
    log_peak = log_q(mean)

    def q(f: float) -> float:
        return math.exp(log_q(f) - log_peak)

    def integral(a: float, b: float) -> float:
        hint = [mean] if a < mean < b else None
        return integrate.quad(q, a, b, points=hint, limit=200)[0]

    z = integral(lo, hi)

    def integrand(x: float) -> float:
        cdf = min(max(integral(lo, x) / z, 0.0), 1.0)
        if cdf in (0.0, 1.0):
            return 0.0
        return math.exp(-0.5 * special.ndtri(cdf) ** 2) / math.sqrt(2.0 * math.pi)

    return integrate.quad(integrand, lo, hi, points=[mean], limit=200)[0]


# ----------------------------------------------------------------------------- timing


def time_kernel(name, mu, sigma, y, chunk: int, repeats: int):
    """Best-of-``repeats`` (CPU seconds, wall seconds, values) of the vectorized kernel."""
    best_cpu, best_wall, out = math.inf, math.inf, None
    for _ in range(repeats):
        values = np.empty_like(mu)
        c0, w0 = time.process_time(), time.perf_counter()
        for start in range(0, mu.size, chunk):
            sl = slice(start, start + chunk)
            values[sl] = qpinfer.sigma_qp(name, mu[sl], sigma[sl], y[sl])
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        if cpu < best_cpu:
            best_cpu, best_wall, out = cpu, wall, values
    return best_cpu, best_wall, out


def time_baseline(name, mu, sigma, y):
    values = np.empty_like(mu)
    c0, w0 = time.process_time(), time.perf_counter()
    for i in range(mu.size):
        values[i] = sigma_qp_nested_quad(name, float(mu[i]), float(sigma[i]), int(y[i]))
    return time.process_time() - c0, time.perf_counter() - w0, values


def relative_errors(name, mu, sigma, y, values, dps: int) -> np.ndarray:
    from mpmath import mp

    from qptables.reference.sigma import sigma_qp_reference

    errs = []
    with mp.workdps(dps):
        for m, s, k, v in zip(mu, sigma, y, values):
            ref = sigma_qp_reference(name, float(m), float(s), int(k), dps=dps)
            errs.append(float(abs((v - ref) / ref)))
    return np.array(errs)


# ----------------------------------------------------------------------------- main


def run(args) -> dict:
    rng = np.random.default_rng(args.seed)
    results = {
        "benchmark": "sigma_qp",
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "threads": 1,
        "domain": {"mu": [-10, 10], "sigma": [0.1, 10], "poisson_counts": [0, 20]},
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "likelihoods": {},
    }
    for name in args.likelihoods:
        mu, sigma, y = sample(name, args.points, rng)
        qpinfer.sigma_qp(name, mu[:100], sigma[:100], y[:100])  # warm-up
        k_cpu, k_wall, k_values = time_kernel(name, mu, sigma, y, args.chunk, args.repeats)
        nb = min(args.baseline_points, args.points)
        b_cpu, b_wall, b_values = time_baseline(name, mu[:nb], sigma[:nb], y[:nb])
        na = min(args.accuracy_points, nb)
        sl = slice(0, na)
        k_err = relative_errors(name, mu[sl], sigma[sl], y[sl], k_values[sl], args.dps)
        b_err = relative_errors(name, mu[sl], sigma[sl], y[sl], b_values[sl], args.dps)
        entry = {
            "kernel": {
                "method": "qpinfer.sigma_qp (vectorized)",
                "points": int(mu.size),
                "cpu_seconds": k_cpu,
                "wall_seconds": k_wall,
                "points_per_second_per_core": mu.size / k_cpu,
                "max_rel_error": float(k_err.max()),
                "median_rel_error": float(np.median(k_err)),
            },
            "baseline": {
                "method": "nested scipy.integrate.quad (per point)",
                "points": int(nb),
                "cpu_seconds": b_cpu,
                "wall_seconds": b_wall,
                "points_per_second_per_core": nb / b_cpu,
                "max_rel_error": float(b_err.max()),
                "median_rel_error": float(np.median(b_err)),
            },
            "accuracy_points": int(na),
        }
        entry["speed_ratio"] = (
            entry["kernel"]["points_per_second_per_core"]
            / entry["baseline"]["points_per_second_per_core"]
        )
        results["likelihoods"][name] = entry
    return results


def format_table(results: dict) -> str:
    head = (
        f"{'likelihood':<15} {'method':<42} {'points':>8} {'points/s/core':>14} "
        f"{'max rel err':>12} {'median rel err':>15}"
    )
    lines = [head, "-" * len(head)]
    for name, entry in results["likelihoods"].items():
        for key in ("kernel", "baseline"):
            e = entry[key]
            lines.append(
                f"{name:<15} {e['method']:<42} {e['points']:>8d} "
                f"{e['points_per_second_per_core']:>14,.0f} "
                f"{e['max_rel_error']:>12.2e} {e['median_rel_error']:>15.2e}"
            )
        lines.append(
            f"{name:<15} {'speed ratio kernel / baseline':<42} {entry['speed_ratio']:>23,.0f}x"
        )
    n_acc = {e["accuracy_points"] for e in results["likelihoods"].values()}
    lines.append(
        f"(errors vs mpmath reference, dps={results['args']['dps']}, on the first "
        f"{'/'.join(map(str, sorted(n_acc)))} points of each sample; single thread; CPU time)"
    )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=100_000, help="kernel sample per likelihood")
    parser.add_argument(
        "--baseline-points", type=int, default=200, help="nested-quad subsample per likelihood"
    )
    parser.add_argument(
        "--accuracy-points", type=int, default=30, help="mpmath-checked subsample per likelihood"
    )
    parser.add_argument("--chunk", type=int, default=10_000, help="kernel call size")
    parser.add_argument("--repeats", type=int, default=3, help="kernel timing repeats (best of)")
    parser.add_argument("--dps", type=int, default=30, help="mpmath reference precision")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--likelihoods", nargs="+", default=list(LIKELIHOODS), choices=LIKELIHOODS)
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    args = parser.parse_args(argv)
    if min(args.points, args.baseline_points, args.accuracy_points, args.chunk, args.repeats) < 1:
        parser.error("sample sizes, --chunk and --repeats must be >= 1")
    results = run(args)
    print(format_table(results))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
