"""``qptables info`` and the text of a verification report (``info`` and ``verify``): the
paper-grid stores' (v2 stores: :mod:`qptables.cli.v2`)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from qptables.cli.parser import Refused

__all__ = ["existing_store", "format_verification", "info_command"]


def existing_store(path: str) -> Path:
    """``path`` if it holds a table store (its ``zarr.json``), else :class:`~qptables.cli.parser.Refused` naming OUT
    (and an unfinished build in ``OUT.partial``, if there is one)."""
    p = Path(path)
    if not (p / "zarr.json").is_file():
        hint = ""
        partial = p.with_name(p.name + ".partial")
        if partial.exists():
            hint = f" (an unfinished build is in {partial}; re-run qptables build to finish it)"
        raise Refused(f"OUT: {p} is not a table store{hint}")
    return p


def format_verification(v: dict[str, Any]) -> str:
    if not v:
        return "verification: none recorded"
    lines = [
        (
            f"verification: {'PASSED' if v.get('passed') else 'FAILED'}"
            f" ({v.get('checked', '?')}, {v.get('seconds', 0):.1f} s)"
        ),
        (
            f"  mpmath points: {v.get('points')} (corners, edge midpoints and "
            f"{v.get('random_points')} random; seed {v.get('seed')})"
        ),
        (
            f"  relative error: max {v.get('max_rel_error', float('nan')):.3g}, median "
            f"{v.get('median_rel_error', float('nan')):.3g}, tolerance {v.get('tolerance')}"
        ),
    ]
    if v.get("worst"):
        w = v["worst"]
        lines.append(
            f"  worst point: y={w['y']} mu={w['mu']:g} log10_sigma={w['log10_sigma']:g} "
            f"table={w['table']!r} reference={w['reference']!r}"
        )
    scan = v.get("scan") or {}
    if scan:
        ranges = ", ".join(
            f"{k} in [{a:.6g}, {b:.6g}]" for k, (a, b) in scan.get("ranges", {}).items()
        )
        lines.append(
            f"  full scan: {scan.get('message')}; {ranges}; checksums "
            f"{'checked' if scan.get('checksums_checked') else 'recorded'}"
        )
    return "\n".join(lines)


def _du(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += (Path(dirpath) / f).stat().st_size
            except OSError:
                pass
    return total


def info_command(args: argparse.Namespace) -> int:
    """``qptables info OUT``: a store's grid, sizes, digest and verification (a v2 store's by
    :func:`qptables.cli.v2.info_v2`); ``--json``: its attributes."""
    from qptables.grid import GridSpec
    from qptables.store import read_attrs
    from qptables.units import human_bytes as _human_bytes

    path = existing_store(args.out)
    attrs = read_attrs(path)
    if args.json:
        attrs = dict(attrs)
        if "checksums" in attrs:  # paper grid: one per chunk (a v2 store has "integrity")
            attrs["checksums"] = f"{len(attrs['checksums'] or {})} chunks"
        print(json.dumps(attrs, indent=2, default=str))
        return 0
    if attrs.get("qp_schema_version") == 2:
        from qptables.cli.v2 import info_v2

        return info_v2(path, attrs)
    try:
        grid = GridSpec.from_attrs(attrs["grid"], attrs["tile_mu"])
    except (KeyError, TypeError, ValueError) as exc:
        raise Refused(f"OUT: {path} is not a qptables store ({exc!r})") from None
    m, s = grid.mu, grid.log10_sigma
    lines = [
        f"{path}",
        (
            f"  likelihood: {attrs.get('likelihood')}   schema v{attrs.get('qp_schema_version')}   "
            f"package {attrs.get('package_version')}   created {attrs.get('created')}"
        ),
        f"  complete: {attrs.get('complete')}",
        f"  y: {list(grid.y)}",
        f"  mu: {m.start:g} .. {m.stop:g} step {m.step:g} ({m.n} values)",
        (
            f"  log10_sigma: {s.start:g} .. {s.stop:g} step {s.step:g} ({s.n} values; sigma "
            f"{10**s.start:g} .. {10**s.stop:g})"
        ),
        f"  points: {grid.n_points:,} per variable; variables: sigma_qp, sigma_ratio",
        (
            f"  chunks: {grid.n_tiles} per variable of {grid.chunk_shape} "
            f"({_human_bytes(grid.chunk_nbytes())}, uncompressed); "
            f"{len(attrs.get('checksums') or {})} checksums recorded"
        ),
        f"  size: {_human_bytes(grid.store_nbytes())} of data, {_human_bytes(_du(path))} on disk",
        f"  metadata digest: {_digest_status(path, attrs)}",
        format_verification(attrs.get("verification") or {}),
    ]
    print("\n".join(lines))
    return 0


def _digest_status(path: Path, attrs: dict[str, Any]) -> str:
    from qpinfer.tables.integrity import metadata_changes

    changes = metadata_changes(path, attrs)
    if changes is None:
        return "none (built before digests; qpinfer.open_table refuses it: rebuild it)"
    return "ok" if not changes else "MISMATCH: " + "; ".join(changes)
