"""Defaults a GP user expects: an isotropic kernel unless ``ard=True``, a
:class:`qpinfer.ConvergenceWarning` naming a hyperparameter that ends at its bound, BLAS limited
to one thread where threading is slower (never against the user's own setting), and a public
API that ``qpinfer.__all__`` and ``dir(qpinfer)`` show."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types
import warnings

import numpy as np
import pytest

import qpinfer
from qpinfer.estimators.blas import AUTO_MAX_ROWS, ENV_VARS
from qpinfer.inference.search_result import BoundWarning

sklearn_datasets = pytest.importorskip("sklearn.datasets")

ESTIMATORS = {
    "GPClassifier": lambda **kw: qpinfer.GPClassifier("ep", **kw),
    "GPPoissonRegressor": lambda **kw: qpinfer.GPPoissonRegressor("ep", **kw),
    "GPStudentTRegressor": lambda **kw: qpinfer.GPStudentTRegressor("ep", **kw),
    "SparseGPClassifier": lambda **kw: qpinfer.SparseGPClassifier(10, random_state=0, **kw),
    "SparseGPRegressor": lambda **kw: qpinfer.SparseGPRegressor(10, random_state=0, **kw),
}


def _targets(name: str, X: np.ndarray) -> np.ndarray:
    """Targets each estimator takes (labels, counts, reals) from the first feature."""
    if name.endswith("Classifier"):
        return (X[:, 0] > 0).astype(int)
    if name == "GPPoissonRegressor":
        return np.round(np.exp(X[:, 0])).astype(int)
    return np.sin(X[:, 0])


@pytest.fixture(scope="module")
def breast_cancer():
    """sklearn's breast cancer data: the first 398 rows (70 %) to train, the rest to test,
    standardised by the training rows' mean and deviation."""
    X, y = sklearn_datasets.load_breast_cancer(return_X_y=True)
    n = 398
    mean, std = X[:n].mean(0), X[:n].std(0)
    X = (X - mean) / std
    return X[:n], y[:n], X[n:], y[n:]


# -- 1. isotropic by default, ARD by flag -------------------------------------------------------
@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_one_length_scale_by_default_one_per_feature_with_ard(name):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((30, 3))
    y = _targets(name, X)
    make = ESTIMATORS[name]
    assert make().ard is False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", qpinfer.ConvergenceWarning)
        iso = make(optimizer=None).fit(X, y)
        ard = make(optimizer=None, ard=True).fit(X, y)
    assert np.size(iso.kernel_.length_scale) == 1
    assert np.size(ard.kernel_.length_scale) == 3
    assert iso.kernel_.theta.size == 2  # log variance, one log length scale


def test_ard_must_be_a_bool():
    X = np.random.default_rng(0).standard_normal((10, 2))
    with pytest.raises(ValueError, match=r"ard must be True or False, got 'yes'"):
        qpinfer.GPClassifier("ep", ard="yes").fit(X, X[:, 0] > 0)


# -- 2. a ConvergenceWarning naming the hyperparameter at its bound -----------------------------
def test_ard_on_breast_cancer_warns_naming_the_length_scales_at_their_bound(breast_cancer):
    """ARD over 30 features of 398 rows: length scales run to the 1e5 bound (the fit ignores
    those features; how many of the flat directions the search ends on moves with the last bits
    of the sweeps: 2-8 of 30 measured). The warning, a qpinfer.ConvergenceWarning as
    scikit-learn's, names each (``length_scale[j]``, in the units it is set in) and the bound's
    value."""
    Xtr, ytr, _, _ = breast_cancer
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf = qpinfer.GPClassifier("ep", ard=True).fit(Xtr, ytr)
    names = ["variance"] + [f"length_scale[{j}]" for j in range(Xtr.shape[1])]
    at_bound = [n for n, t in zip(names, clf.kernel_.theta) if abs(t - np.log(1e5)) <= 1e-3]
    assert sum(n.startswith("length_scale") for n in at_bound) >= 1
    bound = [w for w in caught if issubclass(w.category, BoundWarning)]
    assert len(bound) == 1 and issubclass(bound[0].category, qpinfer.ConvergenceWarning)
    text = str(bound[0].message)
    for name in at_bound:
        assert f"{name} = 100000 (log {name} = 11.5129) is close to its upper bound 100000" in text
    assert text.count("is close to its") == len(at_bound)
    assert "Increasing the bound and calling fit again may find a better value" in text


def test_the_isotropic_fit_of_breast_cancer_ends_inside_its_bounds(breast_cancer):
    Xtr, ytr, Xte, yte = breast_cancer
    with warnings.catch_warnings():
        warnings.simplefilter("error", qpinfer.ConvergenceWarning)
        clf = qpinfer.GPClassifier("ep").fit(Xtr, ytr)
    low, high = clf.kernel_.bounds.T  # log 1e-5, log 1e5
    assert np.all((clf.kernel_.theta > low + 1e-3) & (clf.kernel_.theta < high - 1e-3))
    p = clf.predict_proba(Xte)[np.arange(yte.size), yte]
    print("isotropic test NTLL", -np.mean(np.log(p)), clf.kernel_)
    assert -np.mean(np.log(p)) < 0.15


# -- 3. BLAS threads ---------------------------------------------------------------------------
_PROBE = textwrap.dedent(
    """
    import json, sys, warnings
    import numpy as np
    import qpinfer
    from threadpoolctl import threadpool_info, threadpool_limits

    def blas_threads():
        return sorted({i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"})

    class Probe(qpinfer.ARDSquaredExponential):
        # the SE kernel, noting the BLAS threads each time the fit or a prediction evaluates it
        seen = []

        def with_theta(self, theta):
            kernel = super().with_theta(theta)
            kernel.__class__ = Probe
            return kernel

        def __call__(self, X, Z=None):
            Probe.seen.append(blas_threads())
            return super().__call__(X, Z)

    args = json.loads(sys.argv[1])
    n, sparse, user_limit = args["n"], args["sparse"], args["user_limit"]
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, 3))
    y = (X[:, 0] + 0.3 * rng.standard_normal(n) > 0).astype(int)
    kw = dict(kernel=Probe(1.0, 1.0), optimizer=None, **args["kw"])
    est = qpinfer.SparseGPClassifier(5, **kw) if sparse else qpinfer.GPClassifier("ep", **kw)
    before = blas_threads()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if user_limit:
            with threadpool_limits(limits=user_limit, user_api="blas"):
                est.fit(X, y)
                est.predict_proba(X[:5])
        else:
            est.fit(X, y)
            est.predict_proba(X[:5])
    print(json.dumps({"before": before, "seen": Probe.seen, "after": blas_threads()}))
    """
)


def _probe(env: dict[str, str], n=200, sparse=False, user_limit=None, **kw) -> dict:
    """Fit and predict in a fresh interpreter whose BLAS thread variables are exactly ``env``;
    the BLAS threads before, inside each kernel evaluation, and after."""
    clean = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    args = json.dumps({"n": n, "sparse": sparse, "user_limit": user_limit, "kw": kw})
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, args],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_automatic_blas_runs_one_thread_inside_fit_and_predict_of_a_small_problem():
    res = _probe({})
    if res["before"] == [1]:
        pytest.skip("BLAS runs one thread by default here (one core): nothing to limit")
    assert res["seen"] and all(s == [1] for s in res["seen"]), res
    assert res["after"] == res["before"]  # restored after the fit


def test_an_environment_variable_of_the_user_is_left_alone():
    res = _probe({"OPENBLAS_NUM_THREADS": "2"})
    assert res["before"] == [2]
    assert res["seen"] and all(s == [2] for s in res["seen"]), res


def test_the_users_threadpool_limits_is_left_alone():
    res = _probe({}, user_limit=3)
    assert res["seen"] and all(s == [3] for s in res["seen"]), res


def test_blas_threads_sets_the_threads_whatever_the_environment():
    res = _probe({"OPENBLAS_NUM_THREADS": "2"}, blas_threads=1)
    assert res["seen"] and all(s == [1] for s in res["seen"]), res
    assert res["after"] == [2]


def test_a_problem_above_the_automatic_limit_keeps_the_default_threads():
    res = _probe({}, n=AUTO_MAX_ROWS + 1, sparse=True)
    assert res["seen"] and all(s == res["before"] for s in res["seen"]), res


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_blas_threads_must_be_none_or_a_positive_int(bad):
    X = np.random.default_rng(0).standard_normal((10, 2))
    with pytest.raises(ValueError, match=r"blas_threads must be None .* or a positive integer"):
        qpinfer.GPClassifier("ep", blas_threads=bad, optimizer=None).fit(X, X[:, 0] > 0)


# -- 4. the public API --------------------------------------------------------------------------
def test_every_public_name_resolves_and_is_documented():
    for name in qpinfer.__all__:
        obj = getattr(qpinfer, name)
        if name == "__version__":
            assert isinstance(obj, str)
            continue
        assert (obj.__doc__ or "").strip(), name
    for name in ESTIMATORS:
        assert name in qpinfer.__all__


def test_dir_shows_the_public_api_and_no_modules():
    names = dir(qpinfer)
    assert set(qpinfer.__all__) <= set(names)
    modules = [n for n in names if isinstance(getattr(qpinfer, n), types.ModuleType)]
    assert modules == []
    private = [
        n for n in names if n.startswith("_") and not (n.startswith("__") and n.endswith("__"))
    ]
    assert private == []
    assert set(names) - set(qpinfer.__all__) <= {n for n in names if n.startswith("__")}
    from qpinfer.inference import ep  # subpackages stay importable
    from qpinfer.tables import open_table

    assert open_table is qpinfer.open_table
    assert ep.run_ep is qpinfer.run_ep


#: the defaults chosen by held-out NTLL and fit time on a panel of 12 real data sets
#: (docs/development/defaults.md, experiments/defaults_panel.py): QP for the dense and the
#: full-batch sparse estimators, stochastic EP (Power EP at alpha = 1) for the minibatch
#: classifier, QP for the minibatch regressors, an isotropic kernel everywhere
PANEL_DEFAULTS = {
    "GPClassifier": {"method": "qp", "ard": False},
    "GPPoissonRegressor": {"method": "qp", "ard": False},
    "GPStudentTRegressor": {"method": "qp", "ard": False},
    "SparseGPClassifier": {"method": "qp", "ard": False},
    "SparseGPPoissonRegressor": {"method": "qp", "ard": False},
    "SparseGPStudentTRegressor": {"method": "qp", "ard": False},
    "MiniBatchSparseGPClassifier": {"method": "pep", "alpha": 1.0, "ard": False},
    "MiniBatchSparseGPPoissonRegressor": {"method": "qp", "ard": False},
    "MiniBatchSparseGPStudentTRegressor": {"method": "qp", "ard": False},
}


@pytest.mark.parametrize("name", sorted(PANEL_DEFAULTS))
def test_defaults_are_the_panels_choice(name):
    """Every estimator's default method, alpha and kernel are those the panel chose (before it,
    the full-batch sparse classifier defaulted to Power EP at alpha 0.5 without a measurement)."""
    params = getattr(qpinfer, name)().get_params()
    assert {key: params[key] for key in PANEL_DEFAULTS[name]} == PANEL_DEFAULTS[name]
