"""A torch whose pipeline stages have no ``_recv_meta`` (2.11; 2.13 has it) cannot have its
stages' shapes answered: a simulated pipeline is refused with the reason and the fix, rather
than left to stages waiting for neighbours that are simulated elsewhere."""

from __future__ import annotations

import pytest
import torch
from torch.distributed.pipelining.stage import PipelineStage

from overdrive.simulate.pipeline_meta import PipelineNotSimulated, simulated_pipeline_stages
from overdrive.strategies.pipeline import PipelineParallelStrategy


def test_a_torch_without_recv_meta_refuses_a_simulated_pipeline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(PipelineStage, "_recv_meta")
    run = PipelineParallelStrategy.run
    with simulated_pipeline_stages(), pytest.raises(PipelineNotSimulated) as refused:
        PipelineParallelStrategy.run(None, None, None, None)  # type: ignore[arg-type]
    assert f"torch {torch.__version__} does not have" in str(refused.value)
    assert "--parallelism_config_pp_size" in str(refused.value)
    assert PipelineParallelStrategy.run is run


def test_with_recv_meta_the_stages_are_answered_inside_only() -> None:
    receive = PipelineStage._recv_meta
    with simulated_pipeline_stages():
        assert PipelineStage._recv_meta is not receive
    assert PipelineStage._recv_meta is receive
