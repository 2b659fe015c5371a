"""One topology per strategy answers which data each process reads, for every backend."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from overdrive.config import load_settings
from overdrive.parallel.decide import decide_layout
from overdrive.parallel.layout import ParallelLayout
from overdrive.parallel.topology import Topology
from overdrive.strategies import select_strategy


def test_replicas_are_their_own_data_ranks_and_need_no_group() -> None:
    t = Topology(ParallelLayout(dp_replicate=4), "cpu")
    assert [t.dp_coordinates(r) for r in range(4)] == [(0, 4), (1, 4), (2, 4), (3, 4)]
    assert t.data_ranks() is None and t.dp_group() is None  # every process: no mesh built
    assert t._mesh is None


def test_pipeline_and_tensor_dimensions_share_data_ranks() -> None:
    t = Topology(ParallelLayout(pp=2, dp_shard=2, tp=2), "cpu")
    coords = [t.dp_coordinates(r) for r in range(8)]
    # tp innermost, pp outermost: ranks 0,1 are dp 0; 2,3 dp 1; the second stage repeats
    assert coords == [(0, 2), (0, 2), (1, 2), (1, 2), (0, 2), (0, 2), (1, 2), (1, 2)]
    assert t.data_ranks() == [0, 2]


@pytest.mark.parametrize(
    ("code", "nprocs", "name", "dp"),
    [
        ({}, 1, "single", [(0, 1)]),
        ({}, 2, "ddp", [(0, 2), (1, 2)]),
        (
            {"distributed_type": "DEEPSPEED", "deepspeed_config.zero_stage": 2},
            2,
            "deepspeed",
            [(0, 2), (1, 2)],
        ),
        (
            {
                "distributed_type": "MEGATRON_LM",
                "megatron_lm_config.pp_degree": 2,
                "megatron_lm_config.num_micro_batches": 2,
            },
            4,
            "pipeline_parallel",
            [(0, 2), (1, 2), (0, 2), (1, 2)],
        ),
    ],
)
def test_every_strategy_answers_from_its_topology(
    code: dict, nprocs: int, name: str, dp: list
) -> None:
    settings = load_settings(code=code, environ={})
    decision = decide_layout(settings, nprocs)
    state = SimpleNamespace(num_processes=nprocs, device=torch.device("cpu"), decision=decision)
    strategy = select_strategy(state, settings)
    assert strategy.name == name and strategy.topology is not None
    assert [strategy.data_parallel_coordinates(r, nprocs) for r in range(nprocs)] == dp
    assert strategy.topology.layout.world_size == nprocs
