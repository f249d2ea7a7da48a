"""Module paths that moved in the subpackage layout still import, for one release.

Each old path of :data:`qpinfer._moved.QPINFER` and :data:`qpinfer._moved.QPTABLES` imports in a
fresh interpreter, warns :class:`DeprecationWarning` naming the new path, and *is* the new module
(one object: state, monkeypatches and pickles are shared); names imported from an old path are
the new module's own objects.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import pytest

from qpinfer import _moved

_CHILD = r"""
import importlib, json, sys, warnings
import qpinfer, qptables
from qpinfer import _moved
out = {}
for old, new in {**_moved.QPINFER, **_moved.QPTABLES}.items():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    texts = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    out[old] = {
        "same": module is importlib.import_module(new) and sys.modules[old] is module,
        "warned": any(old in t and new in t for t in texts),
    }
# the public functions that share a name with a module path are still the functions
import qpinfer.tables.remote.install
out["__public__"] = {
    "same": callable(qptables.build) and callable(qptables.verify)
    and callable(qpinfer.tables.download),
    "warned": True,
}
print(json.dumps(out))
"""


def test_every_old_path_is_the_new_module_and_warns():
    done = subprocess.run(
        [sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=300, check=True
    )
    result = json.loads(done.stdout)
    assert set(result) == set(_moved.QPINFER) | set(_moved.QPTABLES) | {"__public__"}
    bad = {old: r for old, r in result.items() if not (r["same"] and r["warned"])}
    assert not bad


def test_names_from_an_old_path_are_the_new_objects():
    from qpinfer.inference.ep import run_ep
    from qpinfer.tables.reduced import open_reduced

    sys.modules.pop("qpinfer.ep", None)  # imported afresh: the finder runs and warns
    with pytest.warns(DeprecationWarning, match="qpinfer.inference.ep"):
        from qpinfer.ep import run_ep as old_run_ep
    assert old_run_ep is run_ep
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import qpinfer.tables_v2 as old_v2  # noqa: I001
    assert old_v2.open_reduced is open_reduced


def test_old_paths_point_at_modules_that_exist():
    import importlib.util

    for new in {**_moved.QPINFER, **_moved.QPTABLES}.values():
        assert importlib.util.find_spec(new) is not None, new


def test_an_unknown_old_path_is_still_an_import_error():
    with pytest.raises(ModuleNotFoundError):
        __import__("qpinfer.no_such_module")
