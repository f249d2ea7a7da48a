"""Suite-wide settings and the fixtures many test modules share.

Every random draw is seeded, hypothesis's included: hypothesis draws its examples from a fixed
seed per test (``derandomize=True``; no example database), so a run on any machine tries the same
examples as every other run.

``dask_client`` is one real ``distributed.LocalCluster`` (a scheduler and two worker processes on
loopback, one thread each) for the whole session -- per pytest-xdist worker when the suite runs
in parallel. Tests that stop, kill or reconfigure workers start a cluster of their own.
"""

from __future__ import annotations

import warnings

import pytest
from hypothesis import settings

settings.register_profile("seeded", derandomize=True, database=None)
settings.load_profile("seeded")


@pytest.fixture(scope="session")
def dask_client():
    """A client of the session's LocalCluster (two worker processes, one thread each)."""
    distributed = pytest.importorskip("distributed")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. the dashboard's port, taken by another cluster
        cluster = distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        )
    # not the default scheduler: a test's own dask computations stay where the test puts them
    client = distributed.Client(cluster, set_as_default=False)
    yield client
    client.close()
    cluster.close()
