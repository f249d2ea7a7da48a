"""Multi-class GPClassifier (one-vs-rest, one-vs-one) on real data: the binary problems, the
probabilities (OvR normalisation, Wu-Lin-Weng coupling), scikit-learn's meta-estimators as the
reference, parallel fits (joblib, a dask cluster) and the errors."""

from __future__ import annotations

import pickle
import warnings
from itertools import combinations

import numpy as np
import pytest

from qpinfer import ConvergenceWarning, GPClassifier, SparseGPClassifier
from qpinfer.estimators.multiclass import MIN_PROB, couple_pairwise, ovo_decision_function

datasets = pytest.importorskip("sklearn.datasets")


@pytest.fixture(autouse=True)
def _no_installed_tables(monkeypatch, tmp_path):
    """Tests never pick up a table installed on the machine."""
    monkeypatch.setenv("QPINFER_TABLES", str(tmp_path / "no-tables"))


def _split(loader, n_train_per_class, seed=0, n_features=None):
    """A stratified, seeded train/test split of a real data set, standardised on the training
    rows."""
    X, y = loader(return_X_y=True)
    if n_features is not None:
        X = X[:, :n_features]
    rng = np.random.default_rng(seed)
    train = np.concatenate(
        [rng.permutation(np.flatnonzero(y == c))[:n_train_per_class] for c in np.unique(y)]
    )
    test = np.setdiff1d(np.arange(y.size), train)
    mu, sd = X[train].mean(0), X[train].std(0)
    return (X[train] - mu) / sd, y[train], (X[test] - mu) / sd, y[test]


@pytest.fixture(scope="module")
def iris():
    return _split(datasets.load_iris, 15)


@pytest.fixture(scope="module")
def wine():
    return _split(datasets.load_wine, 12, seed=1, n_features=6)


def _quiet_fit(est, X, y):
    """Fit, ignoring the optimiser's warnings (setosa is separable: its variance runs to the
    bound, which the binary estimator rightly reports)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(X, y)


# --------------------------------------------------------------------------------------------
# every method: fit, predict, probabilities
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("multi_class", ["one_vs_rest", "one_vs_one"])
@pytest.mark.parametrize("method", ["ep", "qp", "laplace"])
def test_fit_and_predict_on_iris(iris, method, multi_class):
    Xtr, ytr, Xte, yte = iris
    clf = _quiet_fit(GPClassifier(method, multi_class=multi_class), Xtr, ytr)
    k = 3
    assert list(clf.classes_) == [0, 1, 2] and clf.n_classes_ == k
    assert len(clf.estimators_) == (k if multi_class == "one_vs_rest" else k * (k - 1) // 2)
    assert all(isinstance(e, GPClassifier) and e.n_jobs is None for e in clf.estimators_)
    P = clf.predict_proba(Xte)
    assert P.shape == (yte.size, k) and np.all(P >= 0)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, rtol=0, atol=8 * np.finfo(float).eps)
    assert clf.decision_function(Xte).shape == (yte.size, k)
    assert clf.score(Xte, yte) > 0.85  # a held-out accuracy any reasonable GPC reaches (~0.95)
    log_loss = -np.mean(np.log(P[np.arange(yte.size), yte]))
    assert log_loss < 0.5  # uniform guessing is log 3 = 1.10
    lmls = [e.log_marginal_likelihood_ for e in clf.estimators_]
    assert clf.log_marginal_likelihood_ == pytest.approx(np.mean(lmls), rel=1e-15)
    assert clf.log_marginal_likelihood() == clf.log_marginal_likelihood_
    assert len(clf.kernel_.kernels) == len(clf.estimators_)  # scikit-learn's CompoundKernel
    for name in ("result_", "X_train_", "table_"):
        assert not hasattr(clf, name)  # the binary fits' state lives in estimators_
    with pytest.raises(ValueError, match="only supported for binary"):
        clf.predict_latent(Xte)


@pytest.mark.parametrize(
    ("method", "likelihood", "kw"),
    [
        ("vb", "probit", {}),
        ("pep", "probit", {"alpha": 0.5}),
        ("ep", "logit", {}),
        ("qp", "step_noise", {"eps": 0.2}),
        ("rep", "step_noise", {"eps": 0.2}),
    ],
)
def test_every_method_and_likelihood_fits_multi_class(wine, method, likelihood, kw):
    Xtr, ytr, Xte, yte = wine
    for multi_class in ("one_vs_rest", "one_vs_one"):
        clf = GPClassifier(
            method,
            likelihood=likelihood,
            multi_class=multi_class,
            optimizer=None,
            length_scale=2.0,
            **kw,
        ).fit(Xtr, ytr)
        P = clf.predict_proba(Xte)
        np.testing.assert_allclose(P.sum(axis=1), 1.0, rtol=0, atol=8 * np.finfo(float).eps)
        assert all(e.likelihood == likelihood and e.method == method for e in clf.estimators_)
        assert clf.score(Xte, yte) > 0.8  # wine's first 6 features separate its cultivars well


# --------------------------------------------------------------------------------------------
# one-vs-rest: the binary problems and scikit-learn's normalisation
# --------------------------------------------------------------------------------------------
def test_ovr_is_the_binary_problems_normalised(wine):
    Xtr, ytr, Xte, _ = wine
    params = {"method": "ep", "tol": 1e-10}
    clf = _quiet_fit(GPClassifier(**params), Xtr, ytr)
    p = []
    for c, est in zip(clf.classes_, clf.estimators_):
        own = _quiet_fit(GPClassifier(**params), Xtr, (ytr == c).astype(int))
        np.testing.assert_array_equal(est.classes_, [0, 1])
        np.testing.assert_allclose(own.kernel_.theta, est.kernel_.theta, rtol=1e-12)
        p.append(own.predict_proba(Xte)[:, 1])
    p = np.column_stack(p)
    np.testing.assert_allclose(clf.predict_proba(Xte), p / p.sum(1, keepdims=True), rtol=1e-12)
    np.testing.assert_array_equal(clf.predict(Xte), clf.classes_[np.argmax(p, axis=1)])


def test_ovr_and_ovo_match_scikit_learns_meta_estimators(wine):
    multiclass = pytest.importorskip("sklearn.multiclass")
    Xtr, ytr, Xte, _ = wine
    labels = np.array(["barolo", "grignolino", "barbera"])[ytr]  # string labels, unsorted
    base = GPClassifier("ep", optimizer=None, length_scale=2.0)
    ovr_ref = multiclass.OneVsRestClassifier(base).fit(Xtr, labels)
    ovr = GPClassifier("ep", optimizer=None, length_scale=2.0).fit(Xtr, labels)
    np.testing.assert_array_equal(ovr.classes_, ovr_ref.classes_)
    np.testing.assert_allclose(ovr.predict_proba(Xte), ovr_ref.predict_proba(Xte), rtol=1e-12)
    np.testing.assert_allclose(
        ovr.decision_function(Xte), ovr_ref.decision_function(Xte), rtol=1e-12
    )
    np.testing.assert_array_equal(ovr.predict(Xte), ovr_ref.predict(Xte))

    ovo_ref = multiclass.OneVsOneClassifier(base).fit(Xtr, labels)
    ovo = GPClassifier("ep", optimizer=None, length_scale=2.0, multi_class="one_vs_one").fit(
        Xtr, labels
    )
    np.testing.assert_allclose(
        ovo.decision_function(Xte), ovo_ref.decision_function(Xte), rtol=1e-12
    )
    # (predict is the coupled probabilities' argmax, not OneVsOneClassifier's vote:
    # test_ovo_predict_is_the_argmax_of_predict_proba)


# --------------------------------------------------------------------------------------------
# one-vs-one: votes and the coupling of Wu, Lin and Weng (2004)
# --------------------------------------------------------------------------------------------
def _libsvm_coupling(r: np.ndarray, tol: float = 1e-15, max_iter: int = 100_000) -> np.ndarray:
    """libsvm's ``multiclass_probability`` (WLW 2004 Sec. 4's fixed-point iteration for method
    2), with ``r[i, j] = P(i | i or j)``, run to a tight tolerance: an independent solve."""
    k = r.shape[0]
    Q = np.empty((k, k))
    for t in range(k):
        Q[t, t] = sum(r[j, t] ** 2 for j in range(k) if j != t)
        for j in range(k):
            if j != t:
                Q[t, j] = -r[j, t] * r[t, j]
    p = np.full(k, 1.0 / k)
    for _ in range(max_iter):
        Qp = Q @ p
        pQp = p @ Qp
        if np.max(np.abs(Qp - pQp)) < tol:
            break
        for t in range(k):
            diff = (-Qp[t] + pQp) / Q[t, t]
            p[t] += diff
            pQp = (pQp + diff * (diff * Q[t, t] + 2 * Qp[t])) / (1 + diff) ** 2
            Qp = (Qp + diff * Q[t]) / (1 + diff)
            p /= 1 + diff
    else:
        raise AssertionError("libsvm's iteration did not converge")
    return p


@pytest.mark.parametrize("k", [3, 4, 6])
def test_coupling_solves_wu_lin_wengs_problem(k):
    rng = np.random.default_rng(k)
    pairs = list(combinations(range(k), 2))
    r_pairs = rng.uniform(0.02, 0.98, size=(5, len(pairs)))  # inconsistent pairwise estimates
    P = couple_pairwise(r_pairs, k)
    for row in range(5):
        r = np.zeros((k, k))
        for c, (i, j) in enumerate(pairs):
            r[j, i], r[i, j] = r_pairs[row, c], 1 - r_pairs[row, c]
        # libsvm stops when max |Qp - p'Qp| < tol; Q's entries are <= k, so p agrees to ~tol
        np.testing.assert_allclose(P[row], _libsvm_coupling(r), rtol=0, atol=1e-12)
    # consistent pairwise probabilities r_ij = p_i / (p_i + p_j) give p back
    p = rng.dirichlet(np.ones(k), size=4)
    consistent = np.column_stack([p[:, j] / (p[:, i] + p[:, j]) for i, j in pairs])
    np.testing.assert_allclose(couple_pairwise(consistent, k), p, rtol=1e-12)


def test_coupling_clips_certain_pairs_as_libsvm():
    # a pair at exactly 0 or 1 (a saturated probit) is clipped to MIN_PROB: still a solution
    P = couple_pairwise(np.array([[1.0, 1.0, 0.0], [0.5, 0.5, 0.5]]), 3)
    assert np.all(np.isfinite(P)) and np.all(P >= 0)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, rtol=1e-15)
    assert np.argmax(P[0]) == 1 and P[0, 1] > 1 - 1e-6  # class 1 beats 0 and 2 for certain
    np.testing.assert_allclose(P[1], 1 / 3, rtol=1e-14)
    assert MIN_PROB == 1e-7  # libsvm's min_prob


def test_ovo_probabilities_couple_the_binary_estimators(iris):
    Xtr, ytr, Xte, _ = iris
    clf = _quiet_fit(GPClassifier("ep", multi_class="one_vs_one"), Xtr, ytr)
    r_pairs = np.column_stack([e.predict_proba(Xte)[:, 1] for e in clf.estimators_])
    np.testing.assert_array_equal(clf.predict_proba(Xte), couple_pairwise(r_pairs, 3))
    for (i, j), est in zip(combinations(range(3), 2), clf.estimators_):
        assert est.X_train_.shape[0] == np.sum((ytr == i) | (ytr == j))


def test_ovo_decision_function_is_scikit_learns_rule():
    multiclass_utils = pytest.importorskip("sklearn.utils.multiclass")
    rng = np.random.default_rng(3)
    k = 5
    conf = rng.normal(size=(40, k * (k - 1) // 2))
    pred = (conf > 0).astype(int)
    pred[:5] = rng.integers(0, 2, size=pred[:5].shape)  # votes not following the confidences
    ref = multiclass_utils._ovr_decision_function(pred, conf, k)
    np.testing.assert_allclose(ovo_decision_function(pred, conf, k), ref, rtol=1e-15)


def test_ovo_predict_is_the_argmax_of_predict_proba():
    """Before: ``predict`` was the vote of the pairwise classifiers and ``predict_proba`` their
    coupling (scikit-learn's SVC has the same trait), which disagreed on 37% of the rows with 20
    classes. Six overlapping classes (15 pairwise fits), 8 points each, seeded."""
    rng = np.random.default_rng(0)
    k, m = 6, 8
    centres = 1.2 * np.column_stack([np.cos(np.arange(k)), np.sin(np.arange(k))])
    X = np.concatenate([c + rng.normal(size=(m, 2)) for c in centres])
    y = np.repeat(np.arange(k), m)
    grid = np.stack(np.meshgrid(*[np.linspace(-3, 3, 15)] * 2), -1).reshape(-1, 2)
    clf = GPClassifier("ep", optimizer=None, multi_class="one_vs_one").fit(X, y)
    P = clf.predict_proba(grid)
    np.testing.assert_array_equal(clf.predict(grid), clf.classes_[np.argmax(P, axis=1)])
    assert clf.score(X, y) == np.mean(clf.classes_[np.argmax(clf.predict_proba(X), 1)] == y)


# --------------------------------------------------------------------------------------------
# the evidence
# --------------------------------------------------------------------------------------------
def test_log_marginal_likelihood_at_other_theta_is_the_mean_and_its_gradient(iris):
    Xtr, ytr, _, _ = iris
    clf = GPClassifier("ep", optimizer=None, tol=1e-10).fit(Xtr, ytr)
    theta = np.array([0.4, -0.3])
    values = [e.log_marginal_likelihood(theta, True) for e in clf.estimators_]
    v, g = clf.log_marginal_likelihood(theta, eval_gradient=True)
    assert v == pytest.approx(np.mean([a for a, _ in values]), rel=1e-14)
    np.testing.assert_allclose(g, np.mean([b for _, b in values], axis=0), rtol=1e-14)
    # one block per estimator: the gradient of the mean in each block, against finite
    # differences (EP's gradient is exact at convergence; central differences with h = 1e-5
    # have O(h^2) ~ 1e-10 truncation and ~1e-10/h round-off from the 1e-10 site tolerance)
    stacked = np.concatenate([theta, theta + 0.1, theta - 0.1])
    v3, g3 = clf.log_marginal_likelihood(stacked, eval_gradient=True)
    h = 1e-5
    fd = [
        (
            clf.log_marginal_likelihood(stacked + h * e)
            - clf.log_marginal_likelihood(stacked - h * e)
        )
        / (2 * h)
        for e in np.eye(stacked.size)
    ]
    np.testing.assert_allclose(g3, fd, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="theta must have 2 entries"):
        clf.log_marginal_likelihood(np.zeros(4))


# --------------------------------------------------------------------------------------------
# parallel fits
# --------------------------------------------------------------------------------------------
def test_parallel_fit_equals_sequential_and_keeps_the_warnings(wine):
    Xtr, ytr, Xte, _ = wine
    for multi_class in ("one_vs_rest", "one_vs_one"):
        # one BLAS thread on both sides: a dask cluster started earlier in the process sets
        # OPENBLAS_NUM_THREADS=1 in os.environ, which the worker processes inherit while this
        # process keeps its BLAS threads, and the last bits that changes reached 4e-3 through
        # the L-BFGS-B searches (one class's variance runs to its bound on a flat evidence)
        kw = {"method": "ep", "multi_class": multi_class, "blas_threads": 1}
        seq = _quiet_fit(GPClassifier(**kw), Xtr, ytr)
        par = _quiet_fit(GPClassifier(**kw, n_jobs=2), Xtr, ytr)
        np.testing.assert_allclose(par.predict_proba(Xte), seq.predict_proba(Xte), rtol=1e-12)
        for a, b in zip(par.kernel_.kernels, seq.kernel_.kernels, strict=True):
            np.testing.assert_allclose(a.theta, b.theta, rtol=1e-12)
    # a warning raised in a worker process reaches the caller, pointing at the call to fit
    with pytest.warns(ConvergenceWarning) as record:
        GPClassifier("ep", optimizer=None, max_iter=2, n_jobs=2).fit(Xtr, ytr)
    assert record[0].filename == __file__


def test_a_dask_cluster_fits_the_binary_problems(wine, dask_client):
    """``joblib.parallel_backend("dask")`` sends the binary fits to a dask cluster: here the
    session's real LocalCluster of two worker processes on loopback."""
    distributed = pytest.importorskip("distributed")
    joblib = pytest.importorskip("joblib")
    Xtr, ytr, Xte, _ = wine
    kw = {"method": "ep", "optimizer": None, "length_scale": 2.0}
    seq = GPClassifier(**kw).fit(Xtr, ytr)
    with (
        distributed.get_task_stream(dask_client) as stream,
        joblib.parallel_backend("dask", client=dask_client),
    ):
        par = GPClassifier(**kw).fit(Xtr, ytr)
    assert len(stream.data) >= 1  # the fits ran as tasks on the cluster
    np.testing.assert_allclose(par.predict_proba(Xte), seq.predict_proba(Xte), rtol=1e-12)


# --------------------------------------------------------------------------------------------
# two classes, refits, tags, errors
# --------------------------------------------------------------------------------------------
def test_two_classes_ignore_multi_class_and_n_jobs(wine):
    Xtr, ytr, Xte, _ = wine
    keep = ytr < 2
    a = GPClassifier("ep", optimizer=None).fit(Xtr[keep], ytr[keep])
    b = GPClassifier("ep", optimizer=None, multi_class="one_vs_one", n_jobs=2).fit(
        Xtr[keep], ytr[keep]
    )
    np.testing.assert_array_equal(a.predict_proba(Xte), b.predict_proba(Xte))
    assert a.decision_function(Xte).shape == (Xte.shape[0],)
    assert not hasattr(a, "estimators_") and a.n_classes_ == 2


def test_refitting_between_binary_and_multi_class_leaves_no_stale_state(wine):
    Xtr, ytr, Xte, _ = wine
    clf = GPClassifier("ep", optimizer=None)
    clf.fit(Xtr, ytr)
    assert hasattr(clf, "estimators_") and not hasattr(clf, "result_")
    clf.fit(Xtr[ytr < 2], ytr[ytr < 2])
    assert not hasattr(clf, "estimators_") and hasattr(clf, "result_")
    assert clf.predict_proba(Xte).shape == (Xte.shape[0], 2)
    clf.fit(Xtr, ytr)
    assert not hasattr(clf, "result_") and len(clf.kernel_.kernels) == 3
    clone = pickle.loads(pickle.dumps(clf))  # a fitted multi-class model pickles
    np.testing.assert_array_equal(clone.predict_proba(Xte), clf.predict_proba(Xte))


def test_tags_and_clone():
    sklearn_base = pytest.importorskip("sklearn.base")
    from sklearn.utils import get_tags

    assert get_tags(GPClassifier()).classifier_tags.multi_class is True
    assert get_tags(SparseGPClassifier()).classifier_tags.multi_class is True
    clf = GPClassifier("qp", multi_class="one_vs_one", n_jobs=-1)
    assert sklearn_base.clone(clf).get_params()["multi_class"] == "one_vs_one"
    assert "multi_class='one_vs_one'" in repr(clf) and "n_jobs=-1" in repr(clf)


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"multi_class": "one_vs_all"}, "multi_class must be 'one_vs_rest' or 'one_vs_one'"),
        ({"multi_class": None}, "multi_class must be"),
        ({"n_jobs": 0}, "n_jobs must be None or a non-zero integer"),
        ({"n_jobs": 1.5}, "n_jobs must be"),
        ({"n_jobs": True}, "n_jobs must be"),
    ],
)
def test_bad_multi_class_and_n_jobs_are_value_errors(iris, params, match):
    Xtr, ytr, _, _ = iris
    with pytest.raises(ValueError, match=match):
        GPClassifier("ep", optimizer=None, **params).fit(Xtr, ytr)


@pytest.mark.parametrize("multi_class", ["one_vs_rest", "one_vs_one"])
def test_a_kernel_that_is_not_positive_semidefinite_is_refused_naming_kernel(iris, multi_class):
    """Before: EP's binary problems "fitted" the prior, every probability 1/3."""
    kernels = pytest.importorskip("sklearn.gaussian_process.kernels")
    kernel = kernels.ConstantKernel(-1.0, "fixed") * kernels.RBF()
    Xtr, ytr, _, _ = iris
    with pytest.raises(ValueError, match=r"kernel .*not positive semi-definite"):
        GPClassifier("ep", kernel=kernel, multi_class=multi_class).fit(Xtr, ytr)


def test_the_benchmark_runs_quick(capsys):
    """``benchmarks/multiclass.py --quick`` (iris, two splits) prints its table."""
    pytest.importorskip("sklearn.gaussian_process")
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "multiclass.py"
    spec = importlib.util.spec_from_file_location("bench_multiclass", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bench.main(["--quick"])
    out = capsys.readouterr().out
    for method in bench.METHODS:
        assert f"| iris (75/75, 4, 3) | {method} |" in out
    assert "splits better than sk-laplace" in out


@pytest.mark.parametrize("method", ["pep", "qp"])
@pytest.mark.parametrize("multi_class", ["one_vs_rest", "one_vs_one"])
def test_sparse_classifier_is_multi_class_too(iris, method, multi_class):
    """SparseGPClassifier gets the same one-vs-rest / one-vs-one layer: binary sparse fits of
    the same parameters, whose probabilities it normalises (OvR) or couples (OvO)."""
    Xtr, ytr, Xte, yte = iris
    params = {"method": method, "multi_class": multi_class, "random_state": 0}
    clf = _quiet_fit(SparseGPClassifier(10, **params), Xtr, ytr)
    k = 3
    assert clf.n_classes_ == k and list(clf.classes_) == [0, 1, 2]
    assert len(clf.estimators_) == (k if multi_class == "one_vs_rest" else 3)
    assert all(isinstance(e, SparseGPClassifier) for e in clf.estimators_)
    P = clf.predict_proba(Xte)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, rtol=0, atol=8 * np.finfo(float).eps)
    pos = np.column_stack([e.predict_proba(Xte)[:, 1] for e in clf.estimators_])
    if multi_class == "one_vs_rest":  # each binary problem refitted alone gives the same
        c = 1
        alone = _quiet_fit(SparseGPClassifier(10, method=method, random_state=0), Xtr, ytr == c)
        np.testing.assert_allclose(alone.predict_proba(Xte)[:, 1], pos[:, c], rtol=1e-12)
        np.testing.assert_allclose(P, pos / pos.sum(axis=1, keepdims=True), rtol=1e-12)
    else:
        np.testing.assert_allclose(P, couple_pairwise(pos, k), rtol=1e-12)
    assert clf.score(Xte, yte) > 0.85  # a held-out accuracy any reasonable GPC reaches
    lmls = [e.log_marginal_likelihood_ for e in clf.estimators_]
    assert clf.log_marginal_likelihood() == pytest.approx(np.mean(lmls), rel=1e-15)
    with pytest.raises(ValueError, match="only supported for binary"):
        clf.predict_latent(Xte)
    with pytest.raises(ValueError, match="multi_class must be"):
        SparseGPClassifier(10, multi_class="ovr").fit(Xtr, ytr)
