"""Smoke run of the variational GP baseline on three data sets with user-written likelihoods.

For each data set of ``_user_likelihood_data`` this fits the GPyTorch variational GP of
``_variational_baseline`` with its likelihood (negative binomial, complementary log-log
Bernoulli, right-censored Gaussian), and prints the held-out negative log predictive density
per test point (``_heldout.heldout_nll``, 100 Gauss-Hermite nodes; the change at 300 nodes is
printed as a check) and the wall time of the fit. Reference numbers from scikit-learn alone:
for Pima a GaussianProcessClassifier (logistic link, Laplace approximation), for Boston a
GaussianProcessRegressor treating the censored values as observed; for bioChemists the
negative-binomial GLM that chose ``r``.

Run: ``OMP_NUM_THREADS=1 python benchmarks/bench_variational_smoke.py``
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats
from sklearn.gaussian_process import GaussianProcessClassifier, GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _heldout as H
import _user_likelihood_data as D
import _variational_baseline as V


def _vgp(name, Xtr, ytr, Xte, yte, lik_t, lik_np, offset=0.0):
    fit = {}
    t = time.perf_counter()
    mean, var = V.variational_latent(Xtr, ytr - offset, Xte, lik_t, seed=0, info=fit)
    wall = time.perf_counter() - t
    mean = mean + offset
    nll = H.heldout_nll(mean, var, yte, lik_np)
    check = H.heldout_nll(mean, var, yte, lik_np, nodes=300) - nll
    print(
        f"{name:<26s} VGP  NLL {nll:.4f}  (300-node change {check:+.1e})  wall {wall:.1f} s  "
        f"ELBO/n {fit['elbo']:.5f}  dELBO last 50 Adam {fit['elbo_change_last_adam']:+.1e}  "
        f"dELBO L-BFGS {fit['elbo_change_lbfgs']:+.1e} ({fit['lbfgs_iters']} it, last 50 it "
        f"{fit['elbo_change_last_round']:+.1e})  "
        f"m {fit['n_inducing']}  ell {fit['lengthscale']:.3g}  sf2 {fit['outputscale']:.3g}  "
        f"latent sd med {np.median(np.sqrt(var)):.3g}"
    )


def main() -> None:
    Xtr, ytr, Xte, yte, info = D.load_biochemists()
    print(
        f"bioChemists: n_train {info['n_train']}, n_test {info['n_test']}, r = {info['r']} "
        f"(MLE {info['r_mle']:.4f}), var/mean of y {info['var_mean_ratio']:.3f}"
    )
    r = info["r"]
    _vgp("bioChemists negbin", Xtr, ytr, Xte, yte, V.negbin_log_lik(r), H.negbin_log_lik(r))
    _, beta = D._negbin_glm_r(Xtr, ytr)
    eta = np.column_stack([np.ones(len(yte)), Xte]) @ beta
    glm = -np.mean(H.negbin_log_lik(r)(eta, yte))
    print(f"{'bioChemists negbin':<26s} ref  negbin GLM (plug-in) NLL {glm:.4f}")

    Xtr, ytr, Xte, yte, info = D.load_pima()
    print(
        f"Pima: n_train {info['n_train']}, n_test {info['n_test']}, P(+1) train {info['frac_positive_train']:.3f}"
    )
    _vgp("Pima cloglog", Xtr, ytr, Xte, yte, V.cloglog_log_lik(), H.cloglog_log_lik())
    t = time.perf_counter()
    gpc = GaussianProcessClassifier(ConstantKernel(1.0) * RBF(1.0), random_state=0).fit(Xtr, ytr)
    p = np.clip(gpc.predict_proba(Xte)[:, 1], 1e-300, 1.0)
    nll = -np.mean(np.where(yte > 0, np.log(p), np.log1p(-p)))
    print(
        f"{'Pima cloglog':<26s} ref  sklearn GPC (logit, Laplace) NLL {nll:.4f}  wall {time.perf_counter() - t:.1f} s"
    )

    Xtr, ytr, Xte, yte, info = D.load_boston_censored()
    c, s, off = info["c"], info["s"], info["y_offset"]
    print(
        f"Boston: n_train {info['n_train']}, n_test {info['n_test']}, c = {c}, s = {s} "
        f"(fit {info['s_fit']:.4f}), y_offset = {off:.4f}, censored train/test "
        f"{info['n_censored_train']}/{info['n_censored_test']}"
    )
    lt, ln = V.censored_gaussian_log_lik(c - off, s), H.censored_gaussian_log_lik(c, s)
    _vgp("Boston censored Gaussian", Xtr, ytr, Xte, yte, lt, ln, offset=off)
    t = time.perf_counter()
    kernel = ConstantKernel(1.0) * RBF(1.0) + WhiteKernel(0.1)
    gpr = GaussianProcessRegressor(kernel, n_restarts_optimizer=2, random_state=0).fit(
        Xtr, ytr - off
    )
    mu, sd = gpr.predict(Xte, return_std=True)  # sd includes the white noise
    nll = -np.mean(stats.norm.logpdf(yte, mu + off, sd))
    cens = -np.mean(
        np.where(yte >= c, stats.norm.logsf(c, mu + off, sd), stats.norm.logpdf(yte, mu + off, sd))
    )
    print(
        f"{'Boston censored Gaussian':<26s} ref  sklearn GPR (censored as observed) Gaussian NLL "
        f"{nll:.4f}; same predictive scored censored-aware {cens:.4f}  wall {time.perf_counter() - t:.1f} s"
    )


if __name__ == "__main__":
    main()
