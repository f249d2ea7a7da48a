"""QP tables for the label-noise step likelihood (one store per eps) built on a real
``distributed.LocalCluster``; verified against the independent mpmath routine of
:mod:`qptables.reference.step_noise`; QP through the table matches the exact kernel.

The build tests are ``-m slow``: the build's own verification calls the mpmath reference at 16+
points (~5 s each), about 80 s on one worker."""

from __future__ import annotations

import json
import shutil
import time

import numpy as np
import pytest

from qpinfer.inference.ep import QuantileMatching, run_ep
from qpinfer.kernels import ARDSquaredExponential
from qpinfer.likelihoods.step_noise import StepNoise
from qpinfer.tables import TableError, open_table
from qpinfer.tables.schema import DATA_VARS
from qptables import GridSpec, build
from qptables.cli.commands import main
from qptables.reference.step_noise import step_noise_sigma_reference
from qptables.store import read_attrs
from tests._helpers import direct_kernel

NAME = "step_noise(eps=0.2)"
GRID = GridSpec((-2.5, 2.5, 0.1), (-1.0, 1.0, 0.1), (-1, 1))  # 51 x 21 per label


@pytest.fixture(scope="module")
def built(tmp_path_factory, dask_client):
    out = tmp_path_factory.mktemp("sn") / "step_noise.zarr"
    t0 = time.perf_counter()
    # the bare name is canonicalised to the eps it stands for (the default 0.2)
    result = build(
        "step_noise", out, GRID, client=dask_client, samples=2, verify_dps=20, progress=False
    )
    return out, result, time.perf_counter() - t0


@pytest.mark.slow  # the mpmath reference takes ~5 s per verified point
def test_store_records_eps_and_passes_mpmath_verification(built):
    out, result, seconds = built
    assert result.published
    attrs = read_attrs(out)
    assert attrs["likelihood"] == NAME
    assert attrs["build"]["likelihood_params"] == {"eps": 0.2}
    ver = attrs["verification"]
    assert ver["passed"] and ver["max_rel_error"] < 1e-10
    assert attrs["build"]["probit_mirror"]  # y = -1 is the exact mirror of y = +1
    print(
        f"\nstep_noise build {GRID.shape} on 1 worker: {seconds:.1f} s; "
        f"verification max rel error {ver['max_rel_error']:.2e}"
    )


@pytest.mark.slow  # the mpmath reference takes ~5 s per verified point
def test_table_values_are_the_kernel_and_agree_with_mpmath(built):
    out, _, _ = built
    table = open_table(out, verify_checksums=True)
    want = direct_kernel(NAME, GRID)
    import zarr

    g = zarr.open_group(str(out), mode="r", use_consolidated=False)
    for var in DATA_VARS:
        assert np.array_equal(np.asarray(g[var][...]), want[var]), var
    mu = GRID.mu_values()
    ls = GRID.log10_sigma_values()
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(3):
        i, j, iy = rng.integers(mu.size), rng.integers(ls.size), rng.integers(2)
        y = GRID.y[iy]
        ref = float(step_noise_sigma_reference(0.2, mu[i], 10.0 ** ls[j], y, dps=20))
        worst = max(worst, abs(want["sigma_qp"][iy, i, j] / ref - 1.0))
        # lookup at a node returns the stored value
        r = table.sigma_ratio(np.array([mu[i]]), np.array([10.0 ** ls[j]]), np.array([y]))
        assert r[0] == pytest.approx(want["sigma_ratio"][iy, i, j], rel=1e-12)
    assert worst < 1e-10


@pytest.mark.slow  # the mpmath reference takes ~5 s per verified point
def test_qp_through_the_table_matches_the_exact_kernel(built):
    out, _, _ = built
    table = open_table(out)
    lik = StepNoise(0.2)
    with pytest.raises(ValueError, match="table is for likelihood"):
        QuantileMatching(StepNoise(0.1), table)
    rng = np.random.default_rng(2)
    X = rng.normal(size=(60, 2))
    y = np.where(X[:, 0] + 0.5 * X[:, 1] ** 2 > 0.3, 1.0, -1.0)
    y[rng.choice(60, 12, replace=False)] *= -1
    K = ARDSquaredExponential(1.0, [1.0, 1.0])(X) + 1e-8 * np.eye(60)
    exact = run_ep(K, y, QuantileMatching(lik), tol=1e-9, max_iter=400)
    tab = run_ep(K, y, QuantileMatching(lik, table), tol=1e-9, max_iter=400)
    assert exact.converged and tab.converged
    np.testing.assert_allclose(tab.posterior.mean, exact.posterior.mean, rtol=2e-3, atol=2e-4)
    np.testing.assert_allclose(tab.posterior.var, exact.posterior.var, rtol=2e-3)


@pytest.mark.slow  # the mpmath reference takes ~5 s per verified point
def test_reader_refuses_a_store_whose_eps_record_disagrees(built, tmp_path):
    out, _, _ = built
    bad = tmp_path / "bad.zarr"
    shutil.copytree(out, bad)
    meta = json.loads((bad / "zarr.json").read_text())
    meta["attributes"]["build"]["likelihood_params"]["eps"] = 0.1
    (bad / "zarr.json").write_text(json.dumps(meta))
    with pytest.raises(TableError, match="eps"):
        open_table(bad)
    meta["attributes"]["likelihood"] = "step_noise(eps=0.6)"
    (bad / "zarr.json").write_text(json.dumps(meta))
    with pytest.raises(TableError, match="eps"):
        open_table(bad)


def test_likelihood_names_carry_eps():
    from qpinfer import get_likelihood
    from qptables.grid import GridError, paper_grid, validate_y

    assert get_likelihood("step_noise(eps=0.1)") == StepNoise(0.1)
    assert get_likelihood(StepNoise(0.05).name) == StepNoise(0.05)
    assert get_likelihood("step_noise").name == NAME
    with pytest.raises(ValueError, match="eps"):
        get_likelihood("step_noise(eps=0.5)")
    with pytest.raises(ValueError, match="eps"):
        get_likelihood("step_noise(eps=abc)")
    assert paper_grid(NAME).y == (-1, 1)
    with pytest.raises(GridError, match="-1 or \\+1"):
        validate_y(NAME, [0, 1])


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["step_noise", "--eps", "0.5"], "--eps"),
        (["step_noise", "--eps", "-0.1"], "--eps"),
        (["probit", "--eps", "0.2"], "--eps: only for the step_noise"),
    ],
)
def test_cli_eps_bad_input(tmp_path, capsys, argv, match):
    code = main(["build", argv[0], str(tmp_path / "t.zarr"), *argv[1:], "--dry-run"])
    assert code == 2
    assert match in capsys.readouterr().err
