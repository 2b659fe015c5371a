"""A simulated rank works out shard shapes by arithmetic rather than operator by operator:
a ``_StridedShard``'s local size (FSDP2 over tensor parallelism) on real tensors outside the
simulation's modes, and a measured save's gathers as tensors of the gathered shape."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed.device_mesh as device_mesh
from torch.distributed.tensor import DTensor, Shard
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

from overdrive.simulate.checkpoint import _gathers_by_shape
from overdrive.simulate.fake_world import SimulatedRank, fake_world
from tests.helpers.operator_count import OperatorCount

placement_types = pytest.importorskip("torch.distributed.tensor.placement_types")
if not hasattr(placement_types, "_StridedShard"):
    pytest.skip("this torch has no _StridedShard", allow_module_level=True)
StridedShard = placement_types._StridedShard


def _mesh() -> Any:
    """A 4 x 2 mesh of the fake world (looked up at the call: the simulation wraps it)."""
    return device_mesh.init_device_mesh("cpu", (4, 2), mesh_dim_names=("dp", "tp"))


def _strided_shape(rank: int) -> tuple[tuple[int, ...], list[int], int]:
    """Rank ``rank`` of 8 on a 4 x 2 mesh: the local shape and offset of a (4096, 16) tensor
    split over both dimensions' ranks, the outer one strided as FSDP2 over TP places it,
    and the operators the computation dispatched."""
    with fake_world(rank, 8), SimulatedRank():
        mesh = _mesh()
        placements = (StridedShard(0, split_factor=2), Shard(0))
        with OperatorCount() as operators:
            shape, offset = compute_local_shape_and_global_offset((4096, 16), mesh, placements)
    return tuple(shape), list(offset), operators.count


def _strided_shape_for_real(rank: int) -> tuple[tuple[int, ...], list[int]]:
    """The same, by the arithmetic of contiguous blocks: each of the 8 ranks holds 512 rows;
    the strided outer split takes every other block of the inner one."""
    dp, tp = divmod(rank, 2)
    return (512, 16), [(tp * 4 + dp) * 512, 0]


@pytest.mark.parametrize("rank", [0, 3, 7])
def test_a_strided_shard_is_sized_by_arithmetic_not_operator_by_operator(rank: int) -> None:
    shape, offset, operators = _strided_shape(rank)
    assert (shape, offset) == _strided_shape_for_real(rank)
    # the mesh's own coordinates take 11; element by element under the fake mode, reading
    # the 4,096 row indices back, it took 2,088
    assert operators < 64


def test_a_measured_save_gathers_by_shape_without_collectives() -> None:
    with fake_world(1, 8), SimulatedRank() as rank:
        mesh = _mesh()
        weight = DTensor.from_local(
            torch.empty(300, 7, dtype=torch.bfloat16), mesh, (Shard(0), Shard(1)), run_check=False
        )
        before = sum(rank.counts.values())
        with _gathers_by_shape():
            whole = weight.full_tensor()
        gathered = sum(rank.counts.values()) - before
        after = weight.full_tensor()  # outside the measurement: the gathers run
        counted = sum(rank.counts.values()) - before - gathered
    assert (whole.shape, whole.dtype) == ((1200, 14), torch.bfloat16)
    assert after.shape == whole.shape
    assert gathered == 0
    assert counted >= 2  # one gather a mesh dimension
