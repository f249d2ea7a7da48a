"""The import contracts of ``.importlinter`` hold, and they can fail.

``scripts/lint.sh`` (run by ``.ci/run``) runs ``lint-imports`` on the tree; these tests run it on a
copy of both packages: once as it is (every contract kept) and once with one edge added that the
layers forbid (a quadrature module importing the estimators), which must break the qpinfer layer
contract and make ``lint-imports`` exit non-zero -- the check CI relies on is not a no-op.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _copy_tree(tmp_path: Path) -> Path:
    for pkg in ("qpinfer", "qptables"):
        shutil.copytree(
            ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__", "tables_data")
        )
    shutil.copy(ROOT / ".importlinter", tmp_path / ".importlinter")
    return tmp_path


def _lint_imports(tree: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree)}  # the copy, not the installed packages
    return subprocess.run(
        [str(LINT_IMPORTS), str(tree / ".importlinter"), "--no-cache"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def tree(tmp_path):
    if not LINT_IMPORTS.exists():
        pytest.fail(f"lint-imports not installed beside {sys.executable} (the [test] extra has it)")
    return _copy_tree(tmp_path)


def test_contracts_are_kept(tree):
    done = _lint_imports(tree)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "BROKEN" not in done.stdout
    assert "KEPT" in done.stdout


def test_an_upward_import_breaks_the_layers(tree):
    panels = tree / "qpinfer" / "quadrature" / "panels.py"
    text = panels.read_text()
    # one edge from the lowest room to the highest: a module-level import of the estimators
    head, sep, rest = text.partition("from __future__ import annotations\n")
    assert sep, "panels.py starts with its __future__ import"
    panels.write_text(head + sep + "\nimport qpinfer.estimators.base  # noqa: F401\n" + rest)
    done = _lint_imports(tree)
    assert done.returncode != 0, done.stdout
    assert "qpinfer: rooms import only downwards BROKEN" in " ".join(done.stdout.split())
    assert "qpinfer.quadrature.panels -> qpinfer.estimators.base" in done.stdout


def test_qpinfer_importing_qptables_is_refused(tree):
    version = tree / "qpinfer" / "kernels" / "se.py"
    version.write_text(
        version.read_text() + "\n\ndef _heavy():\n    import qptables  # noqa: F401\n"
    )
    done = _lint_imports(tree)
    assert done.returncode != 0, done.stdout
    assert "qpinfer.kernels.se -> qptables" in done.stdout
