"""The v2 build (qptables.pipeline.v2) writes, finds and resumes its tiles with the paper-grid
build's machinery: a tile is one chunk written by ``qptables.store.write_chunk``, done when its
file has its full size (``finished_chunks``), and an unfinished store is resumed or refused by
``qptables.pipeline.resume.resumable`` (no dask cluster: the tile task runs inline)."""

from __future__ import annotations

import numpy as np
import pytest

from qpinfer.likelihoods.registry import boxes_for
from qptables.pipeline.errors import BuildInputError
from qptables.pipeline.resume import create_partial, resumable, resume_refusal
from qptables.pipeline.v2 import (
    _chunk_file,
    _chunk_key,
    _chunk_sizes,
    _create,
    _run_tile,
    _tiles,
    chunk_shape,
    tile_arrays,
)
from qptables.store import finished_chunks

LIKELIHOOD = "step_noise(eps=0.2)"  # one box, one tile: the cheapest v2 table


@pytest.fixture(scope="module")
def boxes():
    return boxes_for(LIKELIHOOD)


@pytest.fixture
def partial(tmp_path, boxes):
    path = tmp_path / "t.zarr.partial"
    assert create_partial(path, lambda p: _create(p, LIKELIHOOD, boxes))
    assert not list(tmp_path.glob("*.new-*"))  # created in a staging sibling, renamed
    return path


def _refusal(boxes, likelihood=LIKELIHOOD):
    record = {"likelihood": likelihood, "boxes": [b.to_attrs() for b in boxes]}
    return lambda attrs: resume_refusal(attrs, record, keys=tuple(record))


def test_a_tile_is_one_full_size_chunk_holding_the_kernel_ratios(partial, boxes):
    sizes = _chunk_sizes(boxes)
    assert finished_chunks(partial, sizes) == set()
    (k, label, cell) = _tiles(boxes)[0]
    _run_tile(str(partial), LIKELIHOOD, boxes[k].to_attrs(), label, cell)
    key = _chunk_key(boxes[k], label, cell)
    assert finished_chunks(partial, sizes) == {key}
    data = np.frombuffer(_chunk_file(partial, boxes[k], label, cell).read_bytes(), "<f8")
    rho = tile_arrays(LIKELIHOOD, boxes[k], label, cell)["rho"]
    stored = data.reshape(chunk_shape(boxes[k]))[tuple(slice(0, n) for n in rho.shape)]
    assert np.array_equal(stored, rho)


def test_a_truncated_chunk_or_a_killed_writers_file_is_not_done_and_is_deleted(partial, boxes):
    sizes = _chunk_sizes(boxes)
    (k, label, cell) = _tiles(boxes)[0]
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
    assert resumable(partial, _refusal(boxes), force=False, dry_run=False, say=said.append)
    assert partial.exists() and not said


def test_an_incompatible_partial_is_refused_and_force_discards_it(partial, boxes):
    refusal = _refusal(boxes, likelihood="probit")
    with pytest.raises(BuildInputError, match="cannot be resumed.*likelihood.*--force"):
        resumable(partial, refusal, force=False, dry_run=False, say=print)
    assert partial.exists()
    said = []
    assert not resumable(partial, refusal, force=True, dry_run=False, say=said.append)
    assert not partial.exists() and "discarding" in said[0]
