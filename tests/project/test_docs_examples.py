"""Every code example in the README and the docs runs, so that none can rot.

The runner is ``scripts/run_examples.py`` (each page's ``python`` and ``bash`` blocks in order,
in a fresh folder, warnings as errors; a block is left out only under a ``<!-- not run: why -->``
line). One test per page that has examples (marker ``examples``: real builds and fits, ~2 min on
two processes, so not in the default run; ``.ci/run`` runs them with ``-m examples``); ``-rP``
prints what each page left out and why.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("run_examples", ROOT / "scripts/run_examples.py")
run_examples = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run_examples)


def pages() -> list[Path]:
    docs = (ROOT / "docs").rglob("*.md")
    return [ROOT / "README.md", *sorted(p for p in docs if "_build" not in p.parts)]


PAGES = [p for p in pages() if run_examples.runnable(p)]


def _run(page: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts/run_examples.py"), str(page)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )


@pytest.mark.examples
@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_example_on_the_page_runs(page: Path) -> None:
    r = _run(page)
    assert r.returncode == 0, f"{r.stdout[-4000:]}\n{r.stderr[-6000:]}"


def test_blocks_left_out_say_why() -> None:
    """Every left-out block names its reason; the list is printed (``-rP``)."""
    left_out = [
        (p.relative_to(ROOT), line, why)
        for p in pages()
        for lang, _, line, why in run_examples.blocks(p)
        if lang in run_examples.RUN and why is not None
    ]
    for page, line, why in left_out:
        print(f"{page}:{line}: not run: {why}")
    assert all(why.strip() for _, _, why in left_out)


def test_a_failing_example_fails_the_check(tmp_path: Path) -> None:
    """The runner is not a no-op: a raising block, a failing command and a warning each fail."""
    ok = "```python\nx = 1\n```\n\n"
    cases = {
        "raises": ok + "```python\nraise SystemExit(x + 1)\n```\n",
        "bash": ok + "```bash\nfalse\n```\n",
        "warns": ok + "```python\nimport warnings\nwarnings.warn('rot')\n```\n",
    }
    for name, text in cases.items():
        page = tmp_path / f"{name}.md"
        page.write_text(text)
        r = _run(page)
        assert r.returncode == 1 and f"{name}.md:6" in r.stderr, (name, r.stderr)
    skipped = tmp_path / "skipped.md"
    skipped.write_text(ok + "<!-- not run: a reason -->\n```bash\nfalse\n```\n")
    assert _run(skipped).returncode == 0
    assert [b[3] for b in run_examples.blocks(skipped)] == [None, "a reason"]
