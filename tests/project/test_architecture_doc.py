"""``docs/development/architecture.md`` shows the tree as it is: its module list and the packages' modules are
the same set, and every subpackage it names has a docstring saying what it holds and may import."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "development" / "architecture.md"


def _tree_in_doc() -> set[str]:
    text = DOC.read_text()
    block = text.split("## The tree", 1)[1].split("```", 2)[1]
    paths, stack = set(), []
    for line in block.splitlines()[1:]:
        if not line.strip():
            continue
        depth = (len(line) - len(line.lstrip(" "))) // 2
        name = line.split()[0]
        del stack[depth:]
        if name.endswith("/"):
            stack.append(name.rstrip("/"))
        elif name.endswith(".py"):
            paths.add("/".join([*stack, name]))
    return paths


def _tree_on_disk() -> set[str]:
    return {
        p.relative_to(ROOT).as_posix()
        for pkg in ("qpinfer", "qptables")
        for p in (ROOT / pkg).rglob("*.py")
        if "tables_data" not in p.parts
    }


def test_the_doc_lists_exactly_the_modules_on_disk():
    doc, disk = _tree_in_doc(), _tree_on_disk()
    assert not disk - doc, (
        f"modules missing from docs/development/architecture.md: {sorted(disk - doc)}"
    )
    assert not doc - disk, (
        f"docs/development/architecture.md lists modules that do not exist: {sorted(doc - disk)}"
    )


def test_every_room_says_what_it_holds_and_may_import():
    for init in sorted(ROOT.glob("q*/**/__init__.py")):
        if init.parent in (ROOT / "qpinfer", ROOT / "qptables"):
            continue
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert "Holds:" in doc and "May import:" in doc, init.relative_to(ROOT)


def test_the_top_levels_stay_small():
    # issue #31: at most about a dozen modules beside the subpackages
    for pkg in ("qpinfer", "qptables"):
        assert len(list((ROOT / pkg).glob("*.py"))) <= 12, pkg


def test_no_module_is_over_400_lines_without_a_reason_and_none_over_500():
    for pkg in ("qpinfer", "qptables"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            lines = path.read_text().splitlines()
            name = path.relative_to(ROOT)
            assert len(lines) <= 500, f"{name}: {len(lines)} lines"
            if len(lines) > 400:
                assert lines[0].startswith("# Over 400 lines: "), f"{name}: {len(lines)} lines"
