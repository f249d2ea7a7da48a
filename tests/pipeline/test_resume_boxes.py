"""The cells layout (qptables.pipeline.cells) writes, finds and resumes its tiles with the grid
layout's machinery: a tile is one chunk written by ``qptables.store.write_chunk``, done when its
file has its full size (``finished_chunks``), and an unfinished store is resumed or refused by
``qptables.pipeline.resume.resumable`` on the one resume record of ``build_record`` (no dask
cluster: the tile task runs inline)."""

from __future__ import annotations

import numpy as np
import pytest

from qpinfer.likelihoods.registry import boxes_for
from qptables.pipeline.cells import (
    _chunk_file,
    _chunk_key,
    cell_tiles,
    chunk_shape,
    chunk_sizes,
    create_cells_store,
    run_tile,
    tile_arrays,
)
from qptables.pipeline.cells_layout import CellsLayout
from qptables.pipeline.errors import BuildInputError
from qptables.pipeline.resume import build_record, create_partial, resumable
from qptables.store import finished_chunks

LIKELIHOOD = "step_noise(eps=0.2)"  # one box, one tile: the cheapest cells table


@pytest.fixture(scope="module")
def boxes():
    return boxes_for(LIKELIHOOD)


@pytest.fixture
def partial(tmp_path, boxes):
    path = tmp_path / "t.zarr.partial"
    assert create_partial(path, lambda p: create_cells_store(p, LIKELIHOOD, boxes))
    assert not list(tmp_path.glob("*.new-*"))  # created in a staging sibling, renamed
    return path


def _record(boxes, likelihood=LIKELIHOOD):
    return build_record("cells", likelihood, boxes=boxes)


def test_a_tile_is_one_full_size_chunk_holding_the_kernel_ratios(partial, boxes):
    sizes = chunk_sizes(boxes)
    assert finished_chunks(partial, sizes) == set()
    (k, label, cell) = cell_tiles(boxes)[0]
    report = run_tile(str(partial), LIKELIHOOD, boxes[k].to_attrs(), label, cell)
    key = _chunk_key(boxes[k], label, cell)
    assert finished_chunks(partial, sizes) == {key}
    assert CellsLayout(LIKELIHOOD, {}, None).finished(partial) == {(k, label, cell)}
    data = np.frombuffer(_chunk_file(partial, boxes[k], label, cell).read_bytes(), "<f8")
    rho = tile_arrays(LIKELIHOOD, boxes[k], label, cell)["rho"]
    stored = data.reshape(chunk_shape(boxes[k]))[tuple(slice(0, n) for n in rho.shape)]
    assert np.array_equal(stored, rho)
    assert report == {"points_computed": rho.size, "rows_mirrored": 0}


def test_a_truncated_chunk_or_a_killed_writers_file_is_not_done_and_is_deleted(partial, boxes):
    sizes = chunk_sizes(boxes)
    (k, label, cell) = cell_tiles(boxes)[0]
    chunk = _chunk_file(partial, boxes[k], label, cell)
    chunk.parent.mkdir(parents=True, exist_ok=True)
    chunk.write_bytes(b"\0" * (sizes[_chunk_key(boxes[k], label, cell)] - 8))  # short
    temp = chunk.with_name("0.0123abcd.partial")
    temp.write_bytes(b"\0" * 16)
    assert finished_chunks(partial, sizes, clean=False) == set()
    assert chunk.exists() and temp.exists()
    assert finished_chunks(partial, sizes) == set()
    assert not chunk.exists() and not temp.exists()


def test_a_matching_partial_is_resumed(partial, boxes):
    said = []
    assert resumable(partial, "cells", _record(boxes), False, False, said.append)
    assert partial.exists() and not said


def test_an_incompatible_partial_is_refused_and_force_discards_it(partial, boxes):
    record = _record(boxes, likelihood="probit")
    with pytest.raises(BuildInputError, match="cannot be resumed.*likelihood.*--force"):
        resumable(partial, "cells", record, force=False, dry_run=False, say=print)
    assert partial.exists()
    said = []
    assert not resumable(partial, "cells", record, force=True, dry_run=False, say=said.append)
    assert not partial.exists() and "discarding" in said[0]
