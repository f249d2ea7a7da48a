"""Tables a user can trust: an installed or downloaded table never silently
replaces a better one, ``qpinfer list`` shows every table with its coverage and verified error,
and help and errors name what to do.

The stores are real: the v2 tables shipped inside qpinfer, and a v1 probit store on the
paper's App. J ranges (mu in [-10, 10], log10 sigma in [-1, 1]) at step 0.05, built, verified
and published by ``qptables`` (an in-process dask cluster, one worker), then copied into a
temporary table cache (``$QPINFER_TABLES``) or downloaded into one from a ``file://`` host.
The data are scikit-learn's breast-cancer set (569 rows, 30 features, standardised).

Only public names are imported at module level, so that on a tree without
:mod:`qpinfer.tables.choice` every test fails on its own assertion, not on an import.
"""

from __future__ import annotations

import io
import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

import qpinfer
from qpinfer.cli import main
from qpinfer.tables.shipped import DATA_DIR, SHIPPED, open_shipped

NAME = "probit-paper-small"
#: the paper's App. J ranges at a coarser step (401 x 41 x 2 points, a few seconds to build)
GRID = ((-10.0, 10.0, 0.05), (-1.0, 1.0, 0.05), (-1, 1))
#: a prior under which many cavities leave the paper grid's sigma range [0.1, 10] (measured:
#: 6,481 exact fallbacks on the v1 table at step 0.02; 0 on the shipped v2 table)
HYPER = {"variance": 200.0, "length_scale": 10.0, "optimizer": None}


@pytest.fixture(scope="module")
def paper_v1(tmp_path_factory) -> Path:
    """A verified, published v1 probit store on the paper's ranges, built by ``qptables``."""
    distributed = pytest.importorskip("distributed")
    from qptables import GridSpec, build

    out = tmp_path_factory.mktemp("v1") / f"{NAME}.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the cluster's port and dashboard notices
        cluster = distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0"
        )
    with cluster, distributed.Client(cluster) as client:
        result = build(
            "probit", out, GridSpec(*GRID), client=client, samples=4, verify_dps=20,
            progress=False, stream=io.StringIO(),
        )  # fmt: skip
    assert result.published
    return out


@pytest.fixture(scope="module")
def host(paper_v1, tmp_path_factory) -> Path:
    """A table host (``manifest.json`` and the archive) offering :data:`NAME`."""
    from qptables.pipeline.publish import publish

    d = tmp_path_factory.mktemp("host")
    publish(paper_v1, d, name=NAME)
    return d


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty user table folder (``$QPINFER_TABLES``)."""
    c = tmp_path / "tables"
    c.mkdir()
    monkeypatch.setenv("QPINFER_TABLES", str(c))
    monkeypatch.delenv("QPINFER_TABLES_URL", raising=False)
    return c


@pytest.fixture(scope="module")
def cancer() -> tuple[np.ndarray, np.ndarray]:
    datasets = pytest.importorskip("sklearn.datasets")
    X, y = datasets.load_breast_cancer(return_X_y=True)
    return (X - X.mean(0)) / X.std(0), y


def fit_qp(X, y, **kw) -> tuple[qpinfer.GPClassifier, list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf = qpinfer.GPClassifier("qp", **HYPER, **kw).fit(X, y)
    return clf, caught


def shipped_error(key: str) -> float:
    """The verified lookup error a shipped store records: its lookups vs the exact kernel and
    the kernel vs mpmath, the larger."""
    ver = json.loads((DATA_DIR / SHIPPED[key] / "zarr.json").read_text())["attributes"]
    ver = ver["verification"]
    return max(ver["kernel_max_rel_err"], ver["mpmath_max_rel_err"])


# ------------------------------------------------------------------ trap: a worse table wins
def assert_shipped_used_silently(X, y) -> None:
    shipped = open_shipped("probit")
    before = shipped.fallback_count
    clf, caught = fit_qp(X, y)
    assert [str(w.message) for w in caught] == []  # no table-choice or fallback warning
    assert clf.table_ is shipped
    assert shipped.fallback_count - before == 0
    assert clf.score(X, y) > 0.95


def test_a_v1_paper_grid_store_installed_by_hand_never_replaces_the_shipped_table(
    paper_v1, cache, cancer
):
    X, y = cancer
    shutil.copytree(paper_v1, cache / "probit.zarr")  # the user table folder's probit table
    assert_shipped_used_silently(X, y)
    # table= always wins -- and shows what the trap cost: exact fallbacks and a warning
    given, caught = fit_qp(X, y, table=str(cache / "probit.zarr"))
    assert given.table_.path == cache / "probit.zarr"
    assert given.table_.fallback_count > 1000
    assert any("fell outside the table" in str(w.message) for w in caught)


def test_the_fallback_warning_reaches_the_user_from_inside_a_search(paper_v1, cancer):
    """The hyperparameter search silences its inner loops' RuntimeWarnings; a table's exact
    fallbacks are not one of them (the warning was raised inside the search, swallowed, and its
    once-per-table flag set)."""
    X, y = cancer
    kw = {**HYPER, "optimizer": "lbfgs", "optimizer_maxiter": 2}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf = qpinfer.GPClassifier("qp", table=str(paper_v1), **kw).fit(X[:150], y[:150])
    assert clf.table_.fallback_count > 0
    fallbacks = [w for w in caught if issubclass(w.category, qpinfer.tables.TableFallbackWarning)]
    assert len(fallbacks) == 1 and "fell outside the table" in str(fallbacks[0].message)


def test_a_downloaded_v1_table_never_replaces_the_shipped_table(host, cache, cancer, capsys):
    X, y = cancer
    code = main(["download", NAME, "--url", host.as_uri(), "--quiet"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert (cache / "probit.zarr").is_symlink()  # linked as the installed default, as before
    # the download says what table=None keeps using, why, and how to use the new one
    assert "table=None keeps using the shipped table" in err
    assert str(DATA_DIR / "probit.zarr") in err and f"table={NAME!r}" in err
    assert_shipped_used_silently(X, y)
    by_name, _ = fit_qp(X, y, table=NAME)
    assert by_name.table_.path == cache / f"{NAME}.zarr"


def test_an_unusable_installed_table_is_refused_with_a_warning_for_the_shipped_one(cache, cancer):
    X, y = cancer
    # a copy of the shipped table with one coefficient changed: its integrity record fails
    bad = cache / "probit.zarr"
    shutil.copytree(DATA_DIR / "probit.zarr", bad)
    chunk = bad / "rho_core" / "c" / "0" / "0" / "0"
    assert chunk.is_file()
    data = bytearray(chunk.read_bytes())
    data[8] ^= 1
    chunk.write_bytes(bytes(data))
    clf, caught = fit_qp(X, y)
    assert clf.table_ is open_shipped("probit")
    (w,) = [w for w in caught if str(bad) in str(w.message)]
    assert type(w.message).__name__ == "TableChoiceWarning"
    assert "does not match its integrity record" in str(w.message)
    assert "qpinfer download NAME --force" in str(w.message)  # what to do


def test_an_installed_table_of_another_likelihood_is_refused(cache, cancer):
    X, y = cancer
    shutil.copytree(DATA_DIR / "logit.zarr", cache / "probit.zarr")
    clf, caught = fit_qp(X, y)
    assert clf.table_ is open_shipped("probit")
    msgs = [str(w.message) for w in caught]
    assert len(msgs) == 1 and "holds a table for 'logit', not 'probit'" in msgs[0]


def test_an_installed_table_as_good_as_the_shipped_one_is_used(cache, cancer):
    X, y = cancer
    shutil.copytree(DATA_DIR / "probit.zarr", cache / "probit.zarr")  # same coverage and error
    clf, caught = fit_qp(X, y)
    assert [str(w.message) for w in caught] == []
    assert clf.table_.path == cache / "probit.zarr"


# ------------------------------------------------------------------ the rule, on real stores
def test_coverage_and_verified_error_come_from_the_stores(paper_v1):
    from qpinfer.tables.choice import summarize

    v1 = summarize(paper_v1)
    assert (v1.schema, v1.likelihood, v1.labels) == (1, "probit", (-1.0, 1.0))
    assert v1.mu == (-10.0, 10.0) and v1.sigma == pytest.approx((0.1, 10.0), rel=1e-15)
    # its verification checks stored values at grid nodes; lookups interpolate between them
    assert v1.error is None and v1.node_error is not None and v1.node_error < 1e-10
    for key, store in SHIPPED.items():
        v2 = summarize(DATA_DIR / store, "shipped")
        assert v2.likelihood == key and v2.labels is None
        assert v2.mu == (-np.inf, np.inf) and v2.sigma == (0.0, np.inf)
        assert v2.error == shipped_error(key) and v2.error < 1e-12
    shipped = summarize(DATA_DIR / "probit.zarr", "shipped")
    assert shipped.dominates(v1) and not v1.dominates(shipped)
    assert shipped.dominates(shipped)  # equal: either may be used


def test_two_tables_neither_better_warn_naming_both(paper_v1):
    """A v1 table whose verification covered its lookups (none does today) with a smaller error
    than the shipped table's, but narrower coverage: neither dominates."""
    import dataclasses

    from qpinfer.tables.choice import summarize

    shipped = summarize(DATA_DIR / "probit.zarr", "shipped")
    narrow = dataclasses.replace(summarize(paper_v1), error=shipped.error / 10)
    assert not narrow.dominates(shipped) and not shipped.dominates(narrow)
    assert narrow.dominates(dataclasses.replace(narrow, error=shipped.error))


# ------------------------------------------------------------------ qpinfer list
def test_list_shows_the_shipped_tables_with_coverage_error_and_defaults(cache, capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "(none)" not in out.split("installed in")[0]
    lines = out.splitlines()
    for key, store in SHIPPED.items():
        k = lines.index(f"  {store}  {key}  [default for table=None]")
        assert "covers mu (-inf, inf), sigma (0, inf), y every label" in lines[k + 1]
        assert f"verified max rel error {shipped_error(key):.2g}" in lines[k + 2]
        assert f"  {key}: shipped {store}" in out
    assert "(none; `qpinfer download NAME` installs one)" in out


def test_list_marks_the_shipped_default_over_an_installed_v1_table(paper_v1, cache, capsys):
    shutil.copytree(paper_v1, cache / f"{NAME}.zarr")
    (cache / "probit.zarr").symlink_to(f"{NAME}.zarr")
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    installed = out.split("installed in", 1)[1]
    assert f"  probit.zarr -> {NAME}.zarr  probit\n" in installed  # not marked default
    assert "covers mu [-10, 10], sigma [0.1, 10], y {-1, 1}" in installed
    assert "at grid nodes only" in installed
    default = [ln for ln in out.splitlines() if ln.startswith("  probit: ")]
    assert default[0].startswith("  probit: shipped probit.zarr -- it covers more cavities than")
    assert f"lookups verified to {shipped_error('probit'):.2g}" in default[0]
    assert f"table={str(cache / 'probit.zarr')!r} uses the installed one" in default[0]


def test_list_names_what_to_do_with_an_unusable_installed_table(cache, capsys):
    (cache / "broken.zarr").mkdir()
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "broken.zarr  UNUSABLE:" in out and "qpinfer download NAME --force" in out


# ------------------------------------------------------------------ help and errors
def test_help_says_how_table_none_chooses_and_how_to_choose(capsys):
    with pytest.raises(SystemExit):
        main(["download", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "table=None uses it only if it covers every cavity the shipped table covers" in text
    assert "table='NAME' always uses it" in text
    with pytest.raises(SystemExit):
        main(["list", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "coverage in mu, sigma and y, verified error" in text


def test_a_bad_table_argument_names_what_is_accepted(cancer):
    X, y = cancer
    with pytest.raises(ValueError, match="installed table name \\(qpinfer list shows them\\)"):
        qpinfer.GPClassifier("qp", table=3.0, optimizer=None).fit(X[:40], y[:40])
