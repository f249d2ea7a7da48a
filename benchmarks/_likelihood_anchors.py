"""The fits timed by ``bench_likelihoods_scale.py``: ours (minibatch sparse EP / QP) and GPyTorch's
SVGP with the same likelihood.

Every fit gets the same training rows and the same M initial inducing inputs: k-means
(:func:`qpinfer.sparse.kmeans_inducing_points`, seed ``seed``) on a seeded sample of
:data:`KMEANS_SAMPLE` training rows, computed inside the timed region. Every fit returns its
seconds, the held-out per-point log predictive density, the predictive mean and an info dict.

* ours: ``qpinfer.MiniBatchSparseGPPoissonRegressor(M, link="log", method=...)`` and
  ``qpinfer.MiniBatchSparseGPStudentTRegressor(M, nu=4, optimize_scale=True, normalize_y=True,
  method=...)``, ARD SE kernel, their defaults otherwise (Adam on batches of 4,096 rows, at
  most 20 epochs, early stopping on 5% held-out rows); float64 (numpy).
* ``gpytorch-svgp``: ``ApproximateGP`` with ``VariationalStrategy`` (learned inducing inputs,
  Cholesky variational distribution), ``ConstantMean`` (started at the training targets' log
  mean rate / median), ``ScaleKernel(RBFKernel(ARD))`` (variance 1, length scales 1),
  ``VariationalELBO``; Poisson: :class:`PoissonLikelihood` below (log link; GPyTorch's ELBO and
  predictive density then use 20-point Gauss-Hermite quadrature), Student-t: GPyTorch's
  ``StudentTLikelihood`` with ours, :data:`NU` degrees of freedom, its scale learned (started
  at 0.3 of the targets' standard deviation); ``gpytorch-svgp-learned-nu``: the degrees of
  freedom learned too (started at 7; GPyTorch keeps them above 2), a more flexible likelihood
  than ours. Adam, learning rate 0.01 (a tenth of it for the last
  quarter of the steps), :data:`SVGP_STEPS` minibatch steps of :data:`SVGP_BATCH` rows (the rows
  reshuffled each epoch), float64. Tuned at N = 1e5 by held-out learning curves (at a
  constant rate 0.01 the held-out NLL still fell between 2,000 and 4,000 steps; 0.03 was ahead
  at 500 steps and behind, noisier, from 2,000): see the docs page
  ``docs/development/likelihoods_at_scale.md``.
"""

from __future__ import annotations

import time
import warnings

import numpy as np

KMEANS_SAMPLE = 20_000
SVGP_LR, SVGP_LR_FINAL, SVGP_BATCH, SVGP_STEPS = 0.01, 0.001, 1024, 10_000
PREDICT_CHUNK = 4096
#: Student-t degrees of freedom, ours and (``learn_nu=False``) GPyTorch's: the same likelihood
NU = 4.0


def initial_inducing(Xtr, m, seed):
    """M k-means centroids of a seeded sample of at most :data:`KMEANS_SAMPLE` rows."""
    from qpinfer.sparse import kmeans_inducing_points

    rng = np.random.default_rng(seed)
    rows = Xtr if len(Xtr) <= KMEANS_SAMPLE else Xtr[rng.choice(len(Xtr), KMEANS_SAMPLE, False)]
    return kmeans_inducing_points(rows, m, seed)


def table_fallbacks(model):
    """The lookups of a fitted model's tables that fell back to exact computation: QP's sigma*
    (``table_.fallback_count``; ``None`` for EP) and EP's moments (the likelihood's moment
    table, ``moment_fallback_count``). 0 and 0: every lookup was served by the tables."""
    table = getattr(model, "table_", None)
    moments = getattr(getattr(model, "likelihood_", None), "_moment_table", None)
    return {
        "sigma_fallbacks": None if table is None else int(table.fallback_count),
        "moment_fallbacks": None if moments is None else int(moments.moment_fallback_count),
    }


def fit_ours(task, method, Xtr, ytr, Xte, yte, m, seed, epochs=None):
    """Our minibatch estimator (public API only); ``method`` is ``"ep"`` or ``"qp"``."""
    import qpinfer

    common = {"method": method, "ard": True, "random_state": seed}
    if epochs:
        common["max_epochs"] = epochs
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        Z = initial_inducing(Xtr, m, seed)
        if task == "poisson":
            model = qpinfer.MiniBatchSparseGPPoissonRegressor(
                m, link="log", inducing_points=Z, **common
            )
        else:
            model = qpinfer.MiniBatchSparseGPStudentTRegressor(
                m, nu=NU, optimize_scale=True, normalize_y=True, inducing_points=Z, **common
            )
        model.fit(Xtr, ytr)
        seconds = time.perf_counter() - t0
    if task == "poisson":
        log_density = model.log_pmf(Xte, yte)
        mean = model.predict_mean(Xte)
    else:
        log_density = model.log_predictive_density(Xte, yte)
        mean = model.predict(Xte)
    info = {
        name: getattr(model, name)
        for name in ("n_epochs_", "best_epoch_", "scale_")
        if isinstance(getattr(model, name, None), int | float)
    }
    info.update(table_fallbacks(model))
    info["warnings"] = sorted({f"{type(w.message).__name__}: {w.message}"[:160] for w in caught})
    return seconds, np.asarray(log_density, float), np.asarray(mean, float), info


def _poisson_likelihood_class():
    import gpytorch
    import torch

    class PoissonLikelihood(gpytorch.likelihoods._OneDimensionalLikelihood):
        """y ~ Poisson(exp(f)): the log link."""

        def forward(self, function_samples, *args, **kwargs):
            return torch.distributions.Poisson(rate=function_samples.exp())

    return PoissonLikelihood


def fit_svgp(task, Xtr, ytr, Xte, yte, m, seed, steps=None, batch=None, lr=None, learn_nu=False):
    """GPyTorch's SVGP with the task's likelihood, see the module docstring (``steps``,
    ``batch``, ``lr``: other than the defaults, for tuning; ``learn_nu``: Student-t's degrees of
    freedom learned, else fixed at ours, :data:`NU`)."""
    import gpytorch
    import torch

    torch.manual_seed(seed)
    dtype = torch.float64
    d = Xtr.shape[1]

    class SVGP(gpytorch.models.ApproximateGP):
        def __init__(self, Z):
            dist = gpytorch.variational.CholeskyVariationalDistribution(Z.shape[0])
            strategy = gpytorch.variational.VariationalStrategy(
                self, Z, dist, learn_inducing_locations=True
            )
            super().__init__(strategy)
            self.mean_module = gpytorch.means.ConstantMean()
            self.covar_module = gpytorch.kernels.ScaleKernel(
                gpytorch.kernels.RBFKernel(ard_num_dims=d)
            )

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(
                self.mean_module(x), self.covar_module(x)
            )

    steps, batch, lr = steps or SVGP_STEPS, batch or SVGP_BATCH, lr or SVGP_LR
    t0 = time.perf_counter()
    Z = torch.as_tensor(initial_inducing(Xtr, m, seed), dtype=dtype)
    X = torch.as_tensor(Xtr, dtype=dtype)
    Y = torch.as_tensor(ytr, dtype=dtype)
    model = SVGP(Z).to(dtype)
    model.covar_module.outputscale = 1.0
    model.covar_module.base_kernel.lengthscale = torch.ones(1, d, dtype=dtype)
    if task == "poisson":
        likelihood = _poisson_likelihood_class()().to(dtype)
        model.mean_module.constant.data.fill_(float(np.log(max(np.mean(ytr), 1e-3))))
    else:
        likelihood = gpytorch.likelihoods.StudentTLikelihood().to(dtype)
        likelihood.noise = (0.3 * float(np.std(ytr))) ** 2
        if not learn_nu:  # the same likelihood as ours: t with NU degrees of freedom
            likelihood.deg_free = NU
            likelihood.raw_deg_free.requires_grad_(False)
        model.mean_module.constant.data.fill_(float(np.median(ytr)))
    model.train()
    likelihood.train()
    opt = torch.optim.Adam(list(model.parameters()) + list(likelihood.parameters()), lr=lr)
    mll = gpytorch.mlls.VariationalELBO(likelihood, model, num_data=X.shape[0])
    gen = torch.Generator().manual_seed(seed)
    step, epochs, decay_at = 0, 0, int(0.75 * steps)
    while step < steps:
        epochs += 1
        for idx in torch.randperm(X.shape[0], generator=gen).split(batch):
            if step == steps:
                break
            if step == decay_at:
                for group in opt.param_groups:
                    group["lr"] = lr * SVGP_LR_FINAL / SVGP_LR
            opt.zero_grad()
            loss = -mll(model(X[idx]), Y[idx])
            loss.backward()
            opt.step()
            step += 1
    seconds = time.perf_counter() - t0
    model.eval()
    likelihood.eval()
    log_density, mean = [], []
    with torch.no_grad():
        for lo in range(0, len(Xte), PREDICT_CHUNK):
            f = model(torch.as_tensor(Xte[lo : lo + PREDICT_CHUNK], dtype=dtype))
            yc = torch.as_tensor(yte[lo : lo + PREDICT_CHUNK], dtype=dtype)
            log_density.append(likelihood.log_marginal(yc, f).numpy())
            mu, var = f.mean.numpy(), f.variance.numpy()
            mean.append(np.exp(mu + 0.5 * var) if task == "poisson" else mu)
    info = {
        "lr": lr,
        "batch": batch,
        "epochs": epochs,
        "steps": step,
        "final_minibatch_elbo": -float(loss.detach()),
        "outputscale": float(model.covar_module.outputscale.detach()),
        "lengthscales": model.covar_module.base_kernel.lengthscale.detach().ravel().tolist(),
        "constant_mean": float(model.mean_module.constant.detach()),
    }
    if task == "student_t":
        info["deg_free"] = float(likelihood.deg_free.detach())
        info["scale"] = float(likelihood.noise.detach().sqrt())
    return seconds, np.concatenate(log_density), np.concatenate(mean), info
