"""scikit-learn's conventions at the estimators' boundary: convergence warnings that its filters
catch, warnings reported at the caller's line, ``feature_names_in_``, ``verbose`` progress and
keyword-only parameters (:mod:`qpinfer.estimators.boundary`)."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import qpinfer
from qpinfer.likelihoods.probit import Probit
from tests._helpers import blobs

sk_exceptions = pytest.importorskip("sklearn.exceptions")

ESTIMATORS = [
    "GPClassifier",
    "GPPoissonRegressor",
    "GPStudentTRegressor",
    "SparseGPClassifier",
    "SparseGPRegressor",
    "SparseGPPoissonRegressor",
    "SparseGPStudentTRegressor",
    "MiniBatchSparseGPClassifier",
    "MiniBatchSparseGPPoissonRegressor",
    "MiniBatchSparseGPStudentTRegressor",
]
#: ... and those of a likelihood the user writes (its first parameter)
EVERY_ESTIMATOR = [*ESTIMATORS, "CustomLikelihoodGP", "SparseCustomLikelihoodGP"]


def _unconverged_fit(**extra):
    """An EP fit stopped after one sweep: the site loop's ConvergenceWarning."""
    X, y = blobs(30)
    return qpinfer.GPClassifier("ep", optimizer=None, max_iter=1, **extra), X, y


# -- 1. the site loop's warning is scikit-learn's ConvergenceWarning ------------------------------
def test_run_ep_warning_is_sklearn_convergence_warning():
    X, y = blobs(30)
    K = qpinfer.ARDSquaredExponential(1.0, 1.0)(X)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        qpinfer.run_ep(K, y, qpinfer.MomentMatching(Probit()), max_iter=1)
    categories = [w.category for w in caught]
    assert categories and all(issubclass(c, qpinfer.ConvergenceWarning) for c in categories)
    assert all(issubclass(c, sk_exceptions.ConvergenceWarning) for c in categories)


def test_sklearn_filter_silences_every_convergence_warning():
    est, X, y = _unconverged_fit()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=sk_exceptions.ConvergenceWarning)
        est.fit(X, y)
    assert [str(w.message) for w in caught] == []
    with warnings.catch_warnings(record=True) as caught:  # qpinfer's own filter still works
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=qpinfer.ConvergenceWarning)
        est.fit(X, y)
    assert [str(w.message) for w in caught] == []


# -- 2. warnings point at the user's line -------------------------------------------------------
def _recorded(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return caught


def test_convergence_warning_reports_the_callers_line():
    est, X, y = _unconverged_fit()
    line = inspect.currentframe().f_lineno + 1
    caught = _recorded(lambda: est.fit(X, y))
    hits = [w for w in caught if issubclass(w.category, qpinfer.ConvergenceWarning)]
    assert hits
    assert {(w.filename, w.lineno) for w in hits} == {(__file__, line)}


def test_a_warning_in_a_module_run_with_python_m_reaches_its_line(tmp_path):
    """A script run as ``python -m package.module`` (whose loader refuses to give ``__main__``'s
    source) gets the warning at its line, not an ImportError from re-emitting it."""
    package = tmp_path / "userpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "fit.py").write_text(
        textwrap.dedent(
            """
            import numpy as np
            import qpinfer

            rng = np.random.default_rng(0)
            X = rng.normal(size=(30, 2))
            y = (X[:, 0] > 0).astype(int)
            qpinfer.GPClassifier(method="ep", optimizer=None, max_iter=1).fit(X, y)
            print("fitted")
            """
        )
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    env["PYTHONPATH"] = f"{tmp_path}{os.pathsep}{env.get('PYTHONPATH', '')}"
    done = subprocess.run(
        [sys.executable, "-W", "always", "-m", "userpkg.fit"],
        cwd=str(Path(qpinfer.__file__).parents[1]),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "fitted" in done.stdout
    assert f"{package / 'fit.py'}:8: " in done.stderr and "ConvergenceWarning" in done.stderr


def test_bound_warning_reports_the_callers_file():
    kernels = pytest.importorskip("sklearn.gaussian_process.kernels")
    X, y = blobs(30)
    # separable enough that the evidence wants a larger signal variance than the bound allows
    kernel = kernels.ConstantKernel(0.05, (1e-3, 0.1)) * kernels.RBF(1.0)
    est = qpinfer.GPClassifier("ep", kernel=kernel, optimizer_maxiter=30)
    caught = _recorded(lambda: est.fit(X * 3.0, y))
    from qpinfer.inference.search_result import BoundWarning

    hits = [w for w in caught if issubclass(w.category, BoundWarning)]
    assert hits
    assert {w.filename for w in hits} == {__file__}


@pytest.mark.parametrize("name", ["GPClassifier", "SparseGPClassifier"])
def test_data_conversion_warning_reports_the_callers_file(name):
    X, y = blobs(20)
    est = getattr(qpinfer, name)(optimizer=None)
    caught = _recorded(lambda: est.fit(X, y.reshape(-1, 1)))
    hits = [
        w for w in caught if issubclass(w.category, qpinfer.estimators.base.DataConversionWarning)
    ]
    assert hits
    assert {w.filename for w in hits} == {__file__}


def test_warnings_filtered_by_the_users_module():
    """Filters with ``module=`` apply to the caller's module, as for a warning whose
    stacklevel is the caller's."""
    est, X, y = _unconverged_fit()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", module=__name__.replace(".", r"\."))
        est.fit(X, y)
    assert [str(w.message) for w in caught] == []


# -- 4. feature names ---------------------------------------------------------------------------
def _fitted_on_frame(name):
    pd = pytest.importorskip("pandas")
    X, y = blobs(20)
    if "Poisson" in name:
        y = (y > 0).astype(int) * 2
    frame = pd.DataFrame(X, columns=["a", "b"])
    kw = {"optimizer": None} if "MiniBatch" not in name else {"max_epochs": 1}
    if name.startswith(("Sparse", "MiniBatch")):
        kw["n_inducing"] = 4
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return getattr(qpinfer, name)(**kw).fit(frame, y), pd, X


@pytest.mark.parametrize("name", ESTIMATORS)
def test_feature_names_recorded_and_checked(name):
    est, pd, X = _fitted_on_frame(name)
    np.testing.assert_array_equal(est.feature_names_in_, np.array(["a", "b"], dtype=object))
    assert est.n_features_in_ == 2
    with pytest.raises(ValueError, match="Feature names unseen at fit time:\n- c\n"):
        est.predict(pd.DataFrame(X, columns=["a", "c"]))
    with pytest.raises(ValueError, match="must be in the same order"):
        est.predict(pd.DataFrame(X, columns=["b", "a"]))
    with pytest.warns(UserWarning, match="X does not have valid feature names"):
        est.predict(X)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        est.predict(pd.DataFrame(X, columns=["a", "b"]))  # the fitted names: no warning


def test_fit_without_names_warns_on_a_frame_and_forgets_old_names():
    est, pd, X = _fitted_on_frame("GPClassifier")
    est.fit(X, blobs(20)[1])
    assert not hasattr(est, "feature_names_in_")
    with pytest.warns(
        UserWarning, match="X has feature names, but GPClassifier was fitted without"
    ):
        est.predict(pd.DataFrame(X, columns=["a", "b"]))


# -- 8. progress --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["GPClassifier", "SparseGPClassifier"])
def test_verbose_writes_progress_to_stderr(name, capsys):
    X, y = blobs(20)
    kw = {"n_inducing": 4} if name.startswith("Sparse") else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        getattr(qpinfer, name)(verbose=True, optimizer_maxiter=2, **kw).fit(X, y)
        out = capsys.readouterr()
        assert "evaluations" in out.err and "search" in out.err
        assert out.out == ""
        getattr(qpinfer, name)(verbose=False, optimizer_maxiter=2, **kw).fit(X, y)
    out = capsys.readouterr()
    assert out.err == "" and out.out == ""


def test_verbose_is_a_parameter_of_every_estimator():
    for name in EVERY_ESTIMATOR:
        assert "verbose" in getattr(qpinfer, name)().get_params(), name


# -- 9. at most the first parameter positional -------------------------------------------------
@pytest.mark.parametrize("name", EVERY_ESTIMATOR)
def test_at_most_the_first_parameter_is_positional(name):
    params = inspect.signature(getattr(qpinfer, name)).parameters.values()
    positional = [p.name for p in params if p.kind != p.KEYWORD_ONLY]
    assert len(positional) <= 1, positional


def test_second_positional_argument_is_refused():
    with pytest.raises(TypeError):
        qpinfer.GPClassifier("qp", "exact")
    with pytest.raises(TypeError):
        qpinfer.SparseGPClassifier(10, 0.5)
