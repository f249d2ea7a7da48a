"""A variational GP baseline in GPyTorch for likelihoods a user writes as a torch function.

:func:`variational_latent` fits a stochastic-variational GP (Hensman, Matthews and Ghahramani,
2015) with a full Cholesky variational distribution, zero mean and a ``ScaleKernel(RBFKernel())``
with one lengthscale, by maximising the ELBO (Adam, then L-BFGS), and returns the latent mean and
variance at the test inputs. The expected log-likelihood in the ELBO is computed by
Gauss-Hermite quadrature of ``log_lik_torch(f, y)``.

The three log-likelihoods used with the data of ``_user_likelihood_data``:
:func:`negbin_log_lik`, :func:`cloglog_log_lik` and :func:`censored_gaussian_log_lik`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import gpytorch
import numpy as np
import torch

LogLik = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def negbin_log_lik(r: float) -> LogLik:
    """Negative binomial with mean ``exp(f)`` and dispersion ``r`` (counts ``y``)."""
    log_r = math.log(r)

    def log_lik(f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        log_rm = torch.logaddexp(torch.full_like(f, log_r), f)
        return (
            torch.lgamma(y + r)
            - math.lgamma(r)
            - torch.lgamma(y + 1)
            + r * (log_r - log_rm)
            + y * (f - log_rm)
        )

    return log_lik


def cloglog_log_lik() -> LogLik:
    """Bernoulli with complementary log-log link, labels -1/+1: ``p(+1|f) = 1 - exp(-e^f)``.
    ``log(1 - exp(-e^f))`` is ``f - e^f / 2`` for ``f < -20`` (no underflow)."""

    def log_lik(f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        ef = torch.exp(f)
        small = f < -20.0
        log_p1 = torch.where(
            small, f - ef / 2, torch.log(-torch.expm1(-torch.where(small, 1.0, ef)))
        )
        return torch.where(y > 0, log_p1, -ef)

    return log_lik


def censored_gaussian_log_lik(c: float, s: float) -> LogLik:
    """Gaussian ``N(y | f, s^2)`` below ``c``; ``log Phi((f - c) / s)`` for ``y >= c``
    (right-censored)."""
    log_norm = math.log(s) + 0.5 * math.log(2 * math.pi)

    def log_lik(f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        obs = -0.5 * ((y - f) / s) ** 2 - log_norm
        cens = torch.special.log_ndtr((f - c) / s)
        return torch.where(y >= c, cens, obs)

    return log_lik


class UserLikelihood(gpytorch.likelihoods._OneDimensionalLikelihood):
    """A one-dimensional likelihood from a torch ``log_lik(f, y)``; ``E_q[log p(y|f)]`` by
    Gauss-Hermite quadrature with ``num_locs`` nodes (float64 nodes and weights)."""

    def __init__(self, log_lik: LogLik, num_locs: int = 40) -> None:
        super().__init__()
        self.log_lik = log_lik
        self.quadrature = gpytorch.utils.quadrature.GaussHermiteQuadrature1D(num_locs)
        x, w = np.polynomial.hermite.hermgauss(num_locs)
        self.quadrature.locations = torch.as_tensor(x, dtype=torch.float64)
        self.quadrature.weights = torch.as_tensor(w, dtype=torch.float64)

    def expected_log_prob(self, observations, function_dist, *args, **kwargs):
        return self.quadrature(lambda f: self.log_lik(f, observations), function_dist)

    def forward(self, function_samples, *args, **kwargs):
        raise NotImplementedError("only the latent posterior is used")


class _SVGP(gpytorch.models.ApproximateGP):
    def __init__(self, inducing: torch.Tensor, learn_inducing: bool) -> None:
        q = gpytorch.variational.CholeskyVariationalDistribution(inducing.shape[0])
        strategy = gpytorch.variational.VariationalStrategy(
            self, inducing, q, learn_inducing_locations=learn_inducing
        )
        super().__init__(strategy)
        self.mean_module = gpytorch.means.ZeroMean()
        self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel())

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


def _inducing(X: np.ndarray, n_inducing: int | None, seed: int) -> tuple[np.ndarray, bool]:
    if X.shape[0] <= 500 and n_inducing is None:
        return X, False
    from sklearn.cluster import KMeans

    m = 300 if n_inducing is None else n_inducing
    km = KMeans(n_clusters=m, n_init=1, random_state=seed).fit(X)
    return km.cluster_centers_, True


def variational_latent(
    X_train, y_train, X_test, log_lik_torch: LogLik, *, seed=0, n_inducing=None,
    adam_iter=500, lbfgs_iter=1000, lr=0.05, tol=1e-8, info=None,
):  # fmt: skip
    """Latent ``(mean, var)`` at ``X_test`` (float64 numpy) of a variational GP fitted to
    ``(X_train, y_train)`` with the likelihood ``log_lik_torch(f, y)``.

    Inducing points: all training inputs (fixed) when ``n <= 500`` and ``n_inducing`` is None,
    else ``n_inducing`` (default 300) k-means centres (seeded, locations learned). The ELBO is
    maximised over the variational parameters, the inducing locations (if learned), the
    kernel's outputscale and lengthscale: ``adam_iter`` Adam steps at rate ``lr``, then L-BFGS
    (strong Wolfe line search) in rounds of 50 iterations, until a round raises the ELBO per
    data point by less than ``tol`` or ``lbfgs_iter`` iterations are spent. If ``info`` is a
    dict, it receives ``elbo`` (per data point), ``elbo_change_last_adam`` (over the last 50 Adam
    steps), ``elbo_change_lbfgs`` (gain over all of L-BFGS), ``elbo_change_last_round`` (gain
    over the last L-BFGS round), ``lbfgs_iters``, ``n_inducing``, ``lengthscale``,
    ``outputscale``.
    """
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    dt = torch.float64
    Xt = torch.as_tensor(np.asarray(X_train, float), dtype=dt)
    yt = torch.as_tensor(np.asarray(y_train, float), dtype=dt)
    Z, learn = _inducing(np.asarray(X_train, float), n_inducing, seed)
    model = _SVGP(torch.as_tensor(Z, dtype=dt), learn).to(dt)
    lik = UserLikelihood(log_lik_torch)
    mll = gpytorch.mlls.VariationalELBO(lik, model, num_data=len(yt))
    model.train()
    params = list(model.parameters())

    def elbo() -> torch.Tensor:
        return mll(model(Xt), yt)

    opt = torch.optim.Adam(params, lr=lr)
    trace = []
    for _ in range(adam_iter):
        opt.zero_grad()
        loss = -elbo()
        loss.backward()
        opt.step()
        trace.append(-loss.item())
    lbfgs = torch.optim.LBFGS(
        params, lr=1.0, max_iter=50, line_search_fn="strong_wolfe",
        tolerance_grad=1e-9, tolerance_change=1e-12,
    )  # fmt: skip

    def closure():
        lbfgs.zero_grad()
        loss = -elbo()
        loss.backward()
        return loss

    with torch.no_grad():
        rounds = [elbo().item()]
    for _ in range(max(1, lbfgs_iter // 50)):
        lbfgs.step(closure)
        with torch.no_grad():
            rounds.append(elbo().item())
        if abs(rounds[-1] - rounds[-2]) < tol:
            break
    before, after = rounds[0], rounds[-1]
    model.eval()
    with torch.no_grad(), gpytorch.settings.fast_pred_var(False):
        post = model(torch.as_tensor(np.asarray(X_test, float), dtype=dt))
        mean, var = post.mean.numpy().copy(), post.variance.numpy().copy()
    if info is not None:
        k = model.covar_module
        info.update(
            elbo=after,
            elbo_change_last_adam=trace[-1] - trace[-51] if len(trace) > 50 else float("nan"),
            elbo_change_lbfgs=after - before,
            elbo_change_last_round=rounds[-1] - rounds[-2],
            lbfgs_iters=int(lbfgs.state[lbfgs._params[0]].get("n_iter", 0)),
            n_inducing=int(Z.shape[0]),
            lengthscale=float(k.base_kernel.lengthscale.item()),
            outputscale=float(k.outputscale.item()),
        )
    return mean.astype(np.float64), var.astype(np.float64)
