"""
Robust regression with outliers: Student-t against a Gaussian likelihood
========================================================================

A few gross outliers pull a Gaussian-likelihood GP (scikit-learn's
``GaussianProcessRegressor`` with a ``WhiteKernel``) towards them and inflate its noise.
:class:`~qpinfer.GPStudentTRegressor` (Student-t likelihood, inference by QP) treats them as
the tail of the noise and follows the bulk of the data.
"""

import matplotlib.pyplot as plt
import numpy as np
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, WhiteKernel

from qpinfer import GPStudentTRegressor

rng = np.random.default_rng(1)
X = np.sort(rng.uniform(0, 10, 60))[:, None]
f = np.sin(X[:, 0]) + 0.3 * X[:, 0]
y = f + 0.15 * rng.standard_normal(X.shape[0])
outliers = rng.choice(X.shape[0], 6, replace=False)
y[outliers] += rng.choice([-1, 1], 6) * rng.uniform(3, 5, 6)

grid = np.linspace(0, 10, 300)[:, None]
f_grid = np.sin(grid[:, 0]) + 0.3 * grid[:, 0]

gauss = GaussianProcessRegressor(RBF(1.0) + WhiteKernel(0.1), normalize_y=True).fit(X, y)
student = GPStudentTRegressor("qp", nu=4.0, optimize_scale=True, optimizer_maxiter=50).fit(X, y)

fig, ax = plt.subplots(figsize=(7, 4.5))
ax.plot(grid, f_grid, "k:", label="true function")
ax.scatter(X, y, color="k", s=12, label="data")
ax.scatter(X[outliers], y[outliers], facecolor="none", edgecolor="r", s=60, label="outliers")
for name, est, color in (("Gaussian (sklearn)", gauss, "C0"), ("Student-t (QP)", student, "C1")):
    mean, std = est.predict(grid, return_std=True)
    rmse = np.sqrt(np.mean((mean - f_grid) ** 2))
    ax.plot(grid, mean, color=color, label=f"{name}: RMSE to truth {rmse:.2f}")
    ax.fill_between(grid[:, 0], mean - 2 * std, mean + 2 * std, color=color, alpha=0.15)
ax.set_ylim(y.min() - 0.5, y.max() + 0.5)
ax.set_xlabel("x")
ax.legend(fontsize=8, loc="upper left")
fig.tight_layout()
