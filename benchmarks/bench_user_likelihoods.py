"""EP and QP with likelihoods a user writes, against the nearest shipped likelihood, a variational
GP and the Laplace approximation, on three real data sets.

For each data set of ``_user_likelihood_data`` (bioChemists counts with a negative-binomial
likelihood, Pima labels with a complementary log-log Bernoulli likelihood, Boston prices
top-coded at 5.0 with a right-censored Gaussian likelihood), in one process:

1. :class:`qpinfer.CustomLikelihoodGP` with the user likelihood of ``examples/user_likelihoods.py``
   by Laplace, EP and QP (default kernel and optimizer, ``random_state=0``): wall seconds of
   fit + predict, held-out NLL ``-mean(log_predictive_density)`` and, with a table, its
   fallbacks to the exact kernel (sigma* lookups ``fallback_count`` and EP-moment lookups
   ``moment_table.moment_fallback_count``, the change over fit + predict). QP's latent
   variance should be at most EP's at every test point (Zhang et al., 2020): the count of test
   points where it is larger and the largest ``var_qp - var_ep`` are printed.
2. The nearest likelihood qpinfer ships: ``GPPoissonRegressor(method="qp", link="log")`` on
   bioChemists (held-out NLL from its ``log_predictive_density``, the exact Poisson-lognormal
   mixture), ``GPClassifier(likelihood="logit", method="qp")`` on Pima (minus the mean log
   ``predict_proba`` of the true class); for Boston, scikit-learn's
   ``GaussianProcessRegressor`` (constant x RBF + white noise) with its Gaussian predictive of
   ``y`` scored by the censored likelihood (a censored test row by ``P(y >= c)``).
3. The GPyTorch variational GP of ``_variational_baseline`` with the same likelihood, scored by
   ``_heldout.heldout_nll`` (100 Gauss-Hermite nodes).

One table per data set: method, held-out NLL, seconds, fallbacks, and seconds relative to the
Laplace fit of the user likelihood.

Run: ``OMP_NUM_THREADS=1 python benchmarks/bench_user_likelihoods.py [--tables DIR]``; with
``--tables DIR`` the table ``DIR/<name>.zarr`` (``negbin``, ``cloglog``, ``censored``) is used
where it exists (built by ``qptables build "user_likelihoods:NegativeBinomial(r=2.3)" OUT
--grid cells``), else the exact kernel (``table="exact"``).
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
import warnings
from pathlib import Path

import numpy as np
import torch
from scipy import stats
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
from threadpoolctl import threadpool_limits

_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE))
sys.path.insert(0, str(_HERE.parent / "examples"))
import _heldout as H  # noqa: E402
import _user_likelihood_data as D  # noqa: E402
import _variational_baseline as V  # noqa: E402
import user_likelihoods as U  # noqa: E402

import qpinfer  # noqa: E402

torch.set_num_threads(1)


def _show_warnings(label: str, caught) -> None:
    for w in caught:
        print(
            f"  [warning in {label}] {w.category.__name__}: {w.message} ({w.filename}:{w.lineno})"
        )


def _counts(table) -> tuple[int, int]:
    if table is None:
        return 0, 0
    moments = table.moment_table
    return table.fallback_count, 0 if moments is None else moments.moment_fallback_count


def _custom(method, lik, table, Xtr, ytr, Xte, yte) -> dict:
    """Fit + predict ``CustomLikelihoodGP`` by ``method``; the row of the table."""
    before = _counts(table)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t = time.perf_counter()
        gp = qpinfer.CustomLikelihoodGP(
            lik, method=method, table="exact" if table is None else table, random_state=0
        ).fit(Xtr, ytr)
        mean, var = gp.predict_latent(Xte)
        lpd = gp.log_predictive_density(Xte, yte)
        seconds = time.perf_counter() - t
    _show_warnings(f"CustomLikelihoodGP {method}", caught)
    after = _counts(table)
    row = {
        "method": f"CustomLikelihoodGP {method}",
        "nll": -float(np.mean(lpd)),
        "seconds": seconds,
        "mean": mean,
        "var": var,
        "kernel": str(gp.kernel_),
        "model": gp,
    }
    if table is not None:
        row["fallbacks"] = f"{after[0] - before[0]}/{after[1] - before[1]}"
    return row


def _timed(label, fn) -> dict:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t = time.perf_counter()
        nll = fn()
        seconds = time.perf_counter() - t
    _show_warnings(label, caught)
    return {"method": label, "nll": nll, "seconds": seconds}


def _vgp(Xtr, ytr, Xte, yte, lik_t, lik_np, offset=0.0) -> dict:
    def run():
        mean, var = V.variational_latent(Xtr, ytr - offset, Xte, lik_t, seed=0)
        return H.heldout_nll(mean + offset, var, yte, lik_np)

    return _timed("GPyTorch variational (same likelihood)", run)


def _open(tables: Path | None, name: str):
    if tables is None:
        return None
    path = tables / f"{name}.zarr"
    return qpinfer.open_table(path) if path.exists() else None


def _run(title, lik, table, Xtr, ytr, Xte, yte, shipped, vgp) -> None:
    print(f"\n=== {title}: n_train {len(ytr)}, n_test {len(yte)}, likelihood {lik!r}, "
          f"table {'exact' if table is None else table.path}", flush=True)  # fmt: skip
    rows = []
    for method in ("laplace", "ep", "qp"):
        try:
            rows.append(_custom(method, lik, table, Xtr, ytr, Xte, yte))
        except Exception:
            print(f"  [error in CustomLikelihoodGP {method}]")
            traceback.print_exc(file=sys.stdout)
        print(f"  done CustomLikelihoodGP {method}", flush=True)
    by = {r["method"].split()[-1]: r for r in rows}
    if "ep" in by and "qp" in by:
        d = by["qp"]["var"] - by["ep"]["var"]
        print(f"  QP var <= EP var: {int(np.sum(d > 0))} of {d.size} test points violate; "
              f"max(var_qp - var_ep) = {d.max():+.3e}; median var_ep {np.median(by['ep']['var']):.4g}, "
              f"var_qp {np.median(by['qp']['var']):.4g}")  # fmt: skip
        # each fit has its own hyperparameters (QP polishes its own evidence from EP's
        # optimum); at EP's kernel the comparison is of the site updates alone
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            same = qpinfer.CustomLikelihoodGP(
                lik, method="qp", table="exact" if table is None else table,
                kernel=by["ep"]["model"].kernel_, optimizer=None,
            ).fit(Xtr, ytr)  # fmt: skip
            d = same.predict_latent(Xte)[1] - by["ep"]["var"]
        _show_warnings("QP at EP's kernel", caught)
        print(f"  QP at EP's fitted kernel (optimizer=None): {int(np.sum(d > 0))} of {d.size} "
              f"violate; max(var_qp - var_ep) = {d.max():+.3e}")  # fmt: skip
    for r in rows:  # the latent predictive scored by quadrature: the same NLL to ~1e-6
        gh = H.heldout_nll(r["mean"], r["var"], yte, shipped["lik_np_fit"])
        m = r["model"]
        print(f"  {r['method']}: kernel {r['kernel']} (log theta {np.round(m.kernel_.theta, 6)}), "
              f"{m.n_evaluations_} evaluations, stage seconds "
              f"{ {k: round(v, 2) for k, v in m.stage_seconds_.items()} }; "
              f"GH-quadrature NLL - lpd NLL {gh - r['nll']:+.1e}")  # fmt: skip
    for label, fn in shipped["fits"]:
        try:
            rows.append(_timed(label, fn))
        except Exception:
            print(f"  [error in {label}]")
            traceback.print_exc(file=sys.stdout)
        print(f"  done {label}", flush=True)
    try:
        rows.append(vgp())
    except Exception:
        print("  [error in the variational fit]")
        traceback.print_exc(file=sys.stdout)
    print("  done variational", flush=True)

    lap = by.get("laplace", {}).get("seconds")
    print(f"\n{title}")
    print(f"{'method':<52s} {'NLL':>8s} {'seconds':>8s} {'fallbacks':>10s} {'x Laplace':>9s}")
    for r in rows:
        ratio = f"{r['seconds'] / lap:9.2f}" if lap else f"{'-':>9s}"
        print(f"{r['method']:<52s} {r['nll']:8.4f} {r['seconds']:8.2f} "
              f"{r.get('fallbacks', '-'):>10s} {ratio}")  # fmt: skip
    print(
        "(fallbacks: sigma* / EP-moment queries answered by the exact kernel; '-' without a table)"
    )


def biochemists(tables) -> None:
    Xtr, ytr, Xte, yte, info = D.load_biochemists()
    r = info["r"]
    lik_np = H.negbin_log_lik(r)

    def poisson():
        gp = qpinfer.GPPoissonRegressor(method="qp", link="log", random_state=0).fit(Xtr, ytr)
        return -float(np.mean(gp.log_predictive_density(Xte, yte)))

    shipped = {"lik_np_fit": lik_np, "fits": [("GPPoissonRegressor qp, log link", poisson)]}
    vgp = lambda: _vgp(Xtr, ytr, Xte, yte, V.negbin_log_lik(r), lik_np)  # noqa: E731
    _run(f"bioChemists, negative binomial r = {r}", U.NegativeBinomial(r=r),
         _open(tables, "negbin"), Xtr, ytr, Xte, yte, shipped, vgp)  # fmt: skip


def pima(tables) -> None:
    Xtr, ytr, Xte, yte, info = D.load_pima()
    lik_np = H.cloglog_log_lik()

    def logit():
        gp = qpinfer.GPClassifier(likelihood="logit", method="qp", random_state=0).fit(Xtr, ytr)
        p = gp.predict_proba(Xte)
        col = np.searchsorted(gp.classes_, yte)
        return -float(np.mean(np.log(p[np.arange(len(yte)), col])))

    shipped = {"lik_np_fit": lik_np, "fits": [("GPClassifier qp, logit", logit)]}
    vgp = lambda: _vgp(Xtr, ytr, Xte, yte, V.cloglog_log_lik(), lik_np)  # noqa: E731
    _run("Pima, Bernoulli cloglog", U.BernoulliCloglog(), _open(tables, "cloglog"),
         Xtr, ytr, Xte, yte, shipped, vgp)  # fmt: skip


def boston(tables) -> None:
    Xtr, ytr, Xte, yte, info = D.load_boston_censored()
    c, s, off = info["c"], info["s"], info["y_offset"]
    lik_np = H.censored_gaussian_log_lik(c, s)

    def gpr():  # as bench_variational_smoke: the predictive of y includes the white noise
        kernel = ConstantKernel(1.0) * RBF(1.0) + WhiteKernel(0.1)
        model = GaussianProcessRegressor(kernel, n_restarts_optimizer=2, random_state=0)
        mu, sd = model.fit(Xtr, ytr - off).predict(Xte, return_std=True)
        mu = mu + off
        ll = np.where(yte >= c, stats.norm.logsf(c, mu, sd), stats.norm.logpdf(yte, mu, sd))
        return -float(np.mean(ll))

    shipped = {
        "lik_np_fit": H.censored_gaussian_log_lik(c - off, s),
        "fits": [("sklearn GPR (RBF + white), censored-aware score", gpr)],
    }
    lt = V.censored_gaussian_log_lik(c - off, s)
    vgp = lambda: _vgp(Xtr, ytr, Xte, yte, lt, lik_np, offset=off)  # noqa: E731
    print(f"\nBoston: c = {c}, s = {s}, y_offset = {off:.4f}, censored train/test "
          f"{info['n_censored_train']}/{info['n_censored_test']}")  # fmt: skip
    _run(f"Boston, right-censored Gaussian c = {c} (fit at c - y_offset), s = {s}",
         U.RightCensoredGaussian(c=c - off, s=s), _open(tables, "censored"),
         Xtr, ytr - off, Xte, yte - off, shipped, vgp)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", type=Path, default=None, help="DIR holding <name>.zarr")
    parser.add_argument(
        "--datasets", nargs="+", default=["biochemists", "pima", "boston"],
        choices=["biochemists", "pima", "boston"],
    )  # fmt: skip
    args = parser.parse_args()
    start = time.perf_counter()
    with threadpool_limits(1):  # one core
        for name in args.datasets:
            {"biochemists": biochemists, "pima": pima, "boston": boston}[name](args.tables)
    print(f"\ntotal wall {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
