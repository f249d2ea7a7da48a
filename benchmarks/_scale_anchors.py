"""The fits timed by ``bench_scale.py``: ours (sparse EP / QP) and the anchors a user would pick.

Every fit takes the same training split, the same M k-means inducing inputs
(:func:`qpinfer.sparse.kmeans_inducing_points` with the same seed, computed inside the timed
region) and the same initial ARD squared-exponential kernel (variance 1, all length scales 1),
and returns the probability of class 1 at the test inputs. Settings (``quick`` in brackets):

* ``sparse-ep``: ``qpinfer.SparseGPClassifier(M, alpha=1.0, method="pep", random_state=seed)`` -- Power EP at
  alpha = 1, i.e. sparse (FITC) EP; L-BFGS-B over the hyperparameters and the inducing inputs
  (``optimizer_maxiter`` 1000, the default [15]).
* ``sparse-qp``: the same with ``method="qp"`` and the shipped sigma* tables.
* ``gpy-epdtc``: ``GPy.core.SparseGP`` with ``EPDTC`` (ep_mode "alternated", GPy's default: EP
  sites, then L-BFGS-B on the hyperparameters and inducing inputs with the sites fixed, repeated),
  Bernoulli likelihood (probit link), 5 rounds of EP + ``optimize(max_iters=100)`` [2 x 15].
  EP uses ``parallel_updates=True`` with damping 0.5: GPy's default sequential schedule
  re-solves an M x N triangular system after every site (O(N^2 M^2) per sweep), which does not
  finish at N = 1e4; the parallel one forms the N x N matrix ``V^T V`` once per sweep
  (O(N^2 M) time, 8 N^2 bytes), which is where it runs out of memory.
* ``gpytorch-svgp``: GPyTorch ``ApproximateGP`` with ``VariationalStrategy`` (learned inducing
  locations, Cholesky variational distribution), zero mean, ``ScaleKernel(RBFKernel(ARD))``,
  ``BernoulliLikelihood`` (probit), ``VariationalELBO``; Adam (lr 0.01) on minibatches of 512
  for 40 epochs [5]; float64.
"""

from __future__ import annotations

import time

import numpy as np

# (rounds x max_iters) of GPy, epochs of GPyTorch, L-BFGS iterations of ours: full / quick
SETTINGS = {
    False: {"ours_max_opt_iter": 1000, "gpy_rounds": 5, "gpy_iters": 100, "svgp_epochs": 40},
    True: {"ours_max_opt_iter": 15, "gpy_rounds": 2, "gpy_iters": 15, "svgp_epochs": 5},
}
SVGP_LR, SVGP_BATCH = 0.01, 512
GPY_DAMPING, GPY_EP_MAX_SWEEPS = 0.5, 200


def fit_ours(method, Xtr, ytr, Xte, m, seed, settings, max_opt_iter):
    """Our estimator (public API only): fit seconds, ``P(y=1)`` at ``Xte``, extra info."""
    import warnings

    import qpinfer

    kwargs = {"method": "qp" if method == "sparse-qp" else "pep"}
    model = qpinfer.SparseGPClassifier(
        m,
        alpha=1.0,
        ard=True,  # the kernel these anchors were measured with
        random_state=seed,
        optimizer_maxiter=max_opt_iter or settings["ours_max_opt_iter"],
        **kwargs,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        model.fit(Xtr, ytr)
        seconds = time.perf_counter() - t0
    proba = model.predict_proba(Xte)[:, list(model.classes_).index(1)]
    info = {
        "n_evaluations": int(model.n_evaluations_),
        "warnings": sorted({f"{type(w.message).__name__}: {w.message}"[:160] for w in caught}),
    }
    return seconds, proba, info


def fit_gpy(Xtr, ytr, Xte, m, seed, settings):
    """GPy's sparse EP (EPDTC), see the module docstring."""
    import GPy
    from GPy.inference.latent_function_inference import EPDTC

    from qpinfer.sparse import kmeans_inducing_points

    np.random.seed(seed)
    t0 = time.perf_counter()
    Z = kmeans_inducing_points(Xtr, m, seed)
    kern = GPy.kern.RBF(Xtr.shape[1], variance=1.0, lengthscale=1.0, ARD=True)
    ep = EPDTC(parallel_updates=True, delta=GPY_DAMPING, max_iters=GPY_EP_MAX_SWEEPS)
    model = GPy.core.SparseGP(
        Xtr,
        ytr.astype(np.float64)[:, None],
        Z,
        kern,
        GPy.likelihoods.Bernoulli(),
        inference_method=ep,
    )
    for _ in range(settings["gpy_rounds"]):
        model.optimize("lbfgsb", max_iters=settings["gpy_iters"])
    seconds = time.perf_counter() - t0
    proba = np.asarray(model.predict(Xte)[0]).ravel()
    return seconds, proba, {"log_likelihood": float(model.log_likelihood())}


def fit_svgp(Xtr, ytr, Xte, m, seed, settings):
    """GPyTorch's variational sparse GP classifier, see the module docstring."""
    import gpytorch
    import torch

    from qpinfer.sparse import kmeans_inducing_points

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
            self.mean_module = gpytorch.means.ZeroMean()
            self.covar_module = gpytorch.kernels.ScaleKernel(
                gpytorch.kernels.RBFKernel(ard_num_dims=d)
            )

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(
                self.mean_module(x), self.covar_module(x)
            )

    t0 = time.perf_counter()
    Z = torch.as_tensor(kmeans_inducing_points(Xtr, m, seed), dtype=dtype)
    X = torch.as_tensor(Xtr, dtype=dtype)
    Y = torch.as_tensor(ytr, dtype=dtype)
    model = SVGP(Z).to(dtype)
    model.covar_module.outputscale = 1.0
    model.covar_module.base_kernel.lengthscale = torch.ones(1, d, dtype=dtype)
    likelihood = gpytorch.likelihoods.BernoulliLikelihood().to(dtype)
    model.train()
    likelihood.train()
    params = list(model.parameters()) + list(likelihood.parameters())
    opt = torch.optim.Adam(params, lr=SVGP_LR)
    mll = gpytorch.mlls.VariationalELBO(likelihood, model, num_data=X.shape[0])
    gen = torch.Generator().manual_seed(seed)
    for _ in range(settings["svgp_epochs"]):
        for idx in torch.randperm(X.shape[0], generator=gen).split(SVGP_BATCH):
            opt.zero_grad()
            loss = -mll(model(X[idx]), Y[idx])
            loss.backward()
            opt.step()
    seconds = time.perf_counter() - t0
    model.eval()
    likelihood.eval()
    with torch.no_grad():
        proba = likelihood(model(torch.as_tensor(Xte, dtype=dtype))).probs.numpy()
    return (
        seconds,
        np.asarray(proba, dtype=np.float64).ravel(),
        {"final_minibatch_elbo": -float(loss.detach())},
    )
