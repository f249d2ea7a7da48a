"""``qptables info`` and the text of a verification report (``info`` and ``verify``), of a store
of either layout: the grid (App. J) or the reduced-coordinate cells."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from qptables.cli.parser import Refused

__all__ = ["existing_store", "format_verification", "info_command", "is_cells"]


def is_cells(path: Path) -> bool:
    """Whether the store at ``path`` is of the cells layout (reduced coordinates)."""
    from qptables.pipeline.layouts import store_layout
    from qptables.store import read_attrs

    return store_layout(read_attrs(path)) == "cells"


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
    """The text of a verification report: a grid store's, or (with ``kernel_points``) a cells
    store's (:func:`qptables.pipeline.verify.verify`)."""
    if not v:
        return "verification: none recorded"
    if "kernel_points" in v:
        return _format_cells(v)
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


def _format_cells(report: dict[str, Any]) -> str:
    """The text of a cells store's verification report."""
    build = report.get("build_verification") or {}
    dps = report.get("dps", "the reference's default")
    integrity = "ok" if not report["integrity"] else "BROKEN: " + "; ".join(report["integrity"])
    return "\n".join(
        [
            f"verification: {'PASSED' if report['passed'] else 'FAILED'} "
            f"({report['seconds']:.1f} s; the store is not written to)",
            f"  integrity record: {integrity}; complete: {report['complete']}",
            f"  exact kernel: max rel error {report['kernel_max_rel_err']:.3g} on "
            f"{report['kernel_points']} random points (seed {report['seed']})",
            f"  mpmath ({dps} digits): max rel error {report['mpmath_max_rel_err']:.3g} on "
            f"{report['mpmath_points']} points of boxes {', '.join(report['mpmath_boxes'])}",
            f"  tolerance {report['tolerance']:g}; the build recorded passed={build.get('passed')} "
            f"(kernel {build.get('kernel_max_rel_err')}, mpmath {build.get('mpmath_max_rel_err')})",
        ]
    )


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
    """``qptables info OUT``: a store's grid (or boxes), sizes, digest and verification;
    ``--json``: its attributes."""
    from qptables.grid import GridSpec
    from qptables.pipeline.layouts import store_layout
    from qptables.store import read_attrs
    from qptables.units import human_bytes as _human_bytes

    path = existing_store(args.out)
    attrs = read_attrs(path)
    if args.json:
        attrs = dict(attrs)
        if "checksums" in attrs:  # the grid: one per chunk (a cells store has "integrity")
            attrs["checksums"] = f"{len(attrs['checksums'] or {})} chunks"
        print(json.dumps(attrs, indent=2, default=str))
        return 0
    if store_layout(attrs) == "cells":
        return _info_cells(path, attrs)
    try:
        grid = GridSpec.from_attrs(attrs["grid"], attrs["tile_mu"])
    except (KeyError, TypeError, ValueError) as exc:
        raise Refused(f"OUT: {path} is not a qptables store ({exc!r})") from None
    m, s = grid.mu, grid.log10_sigma
    lines = [
        f"{path}",
        (
            f"  likelihood: {attrs.get('likelihood')}   layout: grid (schema "
            f"{attrs.get('qp_schema_version')})   "
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


def _info_cells(path: Path, attrs: dict) -> int:
    """``qptables info`` of a cells store: its boxes, size, whether the reader opens it, and its
    verification."""
    from qpinfer.tables.reduced import open_reduced

    try:
        open_reduced(path)  # schema, integrity, verification
        status = "opens: integrity ok"
    except ValueError as exc:
        status = f"REFUSED by the reader: {exc}"
    ver = attrs.get("verification") or {}
    print(
        f"{path}\n  likelihood: {attrs.get('likelihood')}   layout: cells, reduced coordinates "
        f"(schema {attrs.get('qp_schema_version')})"
    )
    for box in attrs.get("boxes") or []:
        axes = ", ".join(
            f"{a['name']} [{a['start']:g}, {a['start'] + a['n_cells'] * a['width']:g}] "
            f"{a['n_cells']} cells x {a['nodes_per_cell']} nodes"
            for a in box["axes"]
        )
        print(f"  box {box['name']} ({box['kind']}): {axes}; {len(box['labels'])} label(s)")
    print(f"  interpolation: {attrs.get('interpolation')}")
    print(f"  size on disk: {_du(path) / 1e6:.2f} MB; {status}")
    print(
        f"  verification: passed={ver.get('passed')}; vs kernel {ver.get('kernel_max_rel_err')} "
        f"on {ver.get('kernel_points')} points, vs mpmath {ver.get('mpmath_max_rel_err')} on "
        f"{ver.get('mpmath_points')} (tolerance {ver.get('tolerance')})"
    )
    return 0
