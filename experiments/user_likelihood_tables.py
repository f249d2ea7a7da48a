"""Measure a user likelihood's built table: fallbacks and errors at 2e5 random cavities over its
domain, and lookups per second.

    PYTHONPATH=examples python experiments/user_likelihood_tables.py TABLE.zarr [TABLE.zarr ...]

For each table (built with ``qptables build "user_likelihoods:Class(...)" OUT --grid cells``):
200,000 random cavities spread over the table's domain (labels uniform over the table's labels,
the standardised mean uniform in ``[-table_tau, table_tau]``, ``sigma / w`` log-uniform from
``table_sigma[0]`` to 10 times ``table_sigma[1]`` (so a tenth of them lie in the tail box; to
``table_sigma[1]`` for a table whose plan left its tail box out);
labels as the table holds them (a real ``y`` reduced, ``reduce_y``); the table's lookups of
sigma* and EP's moments against the exact kernel at all of them (the
fallback counters must stay 0); then sigma* lookups per second on 1e6 such cavities (one call,
best of three) and EP's moments likewise.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import qpinfer


def cavities(lik, n: int, rng, tail: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` cavities over the domain (module docstring); ``tail=False``: sigma only to
    ``table_sigma[1]`` (a table whose tail box the plan left out)."""
    labels = np.asarray(lik.table_labels())
    y = rng.choice(labels, n)
    feats = {v: lik.features(v) for v in labels}
    c = np.array([feats[v].centre for v in y])
    w = np.array([feats[v].width for v in y])
    lo, hi = np.log10(lik.table_sigma[0]), np.log10((10.0 if tail else 1.0) * lik.table_sigma[1])
    s = w * 10.0 ** rng.uniform(lo, hi, n)
    mu = c + rng.uniform(-lik.table_tau, lik.table_tau, n) * np.hypot(s, w)
    return mu, s, y


def measure(path: str, n: int = 200_000, seed: int = 0) -> dict:
    table = qpinfer.open_table(path)
    lik = qpinfer.get_likelihood(table.likelihood)  # a fresh one: exact moments
    rng = np.random.default_rng(seed)
    tail = "tail" in [b.name for b in table._boxes]
    mu, s, y = cavities(lik, n, rng, tail)
    got = table.sigma_qp(mu, s, y)
    exact = qpinfer.sigma_qp(lik, mu, s, y)
    served = lik.with_moment_table(table.moment_table)
    log_z, mean, std = served.ep_moments(mu, s, y)
    e_log_z, e_mean, e_std = lik.ep_moments(mu, s, y)
    out = {
        "table": path,
        "likelihood": lik.name,
        "cavities": n,
        "sigma_fallbacks": int(table.fallback_count),
        "moment_fallbacks": int(table.moment_table.moment_fallback_count),
        "sigma_max_rel_err": float(np.max(np.abs(got / exact - 1))),
        "log_z_max_err": float(np.max(np.abs(log_z - e_log_z) / np.maximum(1, np.abs(e_log_z)))),
        "mean_max_err_in_sigma": float(np.max(np.abs(mean - e_mean) / s)),
        "std_max_rel_err": float(np.max(np.abs(std / e_std - 1))),
        "theorem2_violations": int(np.sum(got > std * (1 + 1e-12))),
    }
    mu, s, y = cavities(lik, 1_000_000, rng, tail)
    for what, call in (
        ("sigma_lookups_per_s", lambda: table.sigma_qp(mu, s, y)),
        ("moment_lookups_per_s", lambda: served.ep_moments(mu, s, y)),
    ):
        best = min(_seconds(call) for _ in range(3))
        out[what] = mu.size / best
    return out


def _seconds(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tables", nargs="+")
    parser.add_argument("--cavities", type=int, default=200_000)
    args = parser.parse_args()
    for path in args.tables:
        for key, value in measure(path, args.cavities).items():
            print(f"{key:>24}: {value:.3g}" if isinstance(value, float) else f"{key:>24}: {value}")
        print()


if __name__ == "__main__":
    main()
