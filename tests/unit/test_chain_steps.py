"""Placement, broadcast and fill are steps of the parallelize chain (``parallel/chain.py``):
``parallelize`` takes the model, the mesh and the chain, and the FSDP2 path from
``Accelerator.prepare`` to ``fully_shard`` is six frames deep (torchtitan's is four,
Lightning Fabric's five). The fill's place with and without tensor parallelism is checked on
two processes (tests/distributed/test_chain_fill_order.py)."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import torch
import torch.distributed.fsdp as fsdp
from torch import nn

import overdrive.accelerator
from overdrive import Accelerator
from overdrive.parallel.chain import Chain, parallelize
from overdrive.parallel.ddp_step import DDPStep
from overdrive.parallel.fill_from_main import BroadcastFromMain
from overdrive.parallel.placement import Placement
from overdrive.utils import FullyShardedDataParallelPlugin

ACCELERATOR = Path(overdrive.accelerator.__file__).resolve()


def _frames_from_prepare(frame: FrameType | None) -> list[str]:
    """The functions from ``Accelerator.prepare`` down to ``frame``, outermost first."""
    names: list[str] = []
    while frame is not None:
        names.append(frame.f_code.co_name)
        if frame.f_code.co_name == "prepare" and Path(frame.f_code.co_filename) == ACCELERATOR:
            return names[::-1]
        frame = frame.f_back
    raise AssertionError(f"fully_shard was not called under Accelerator.prepare: {names}")


def test_parallelize_takes_the_model_the_mesh_and_the_chain() -> None:
    assert list(inspect.signature(parallelize).parameters) == ["model", "mesh", "chain"]


def test_fsdp2_path_from_prepare_to_fully_shard_is_at_most_six_frames(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    paths: list[list[str]] = []
    real = fsdp.fully_shard

    def fully_shard(*args: Any, **kwargs: Any) -> Any:  # stands where fully_shard is called
        paths.append([*_frames_from_prepare(sys._getframe(1)), "fully_shard"])
        return real(*args, **kwargs)

    monkeypatch.setattr(fsdp, "fully_shard", fully_shard)
    acc = Accelerator(cpu=True, fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2))
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    assert paths, "prepare did not shard the model"
    for path in paths:
        assert len(path) <= 6, " -> ".join(path)
    assert paths[-1] == [
        "prepare",
        "prepare_model",
        "setup_model",
        "parallelize",
        "apply_fsdp2",
        "fully_shard",
    ]


class _SeenByTheWrapStep(DDPStep):
    """A wrap step that records the device of the module it is given."""

    def apply(self, module: nn.Module) -> nn.Module:
        SEEN.append(next(module.parameters()).device)
        return module


SEEN: list[torch.device] = []


def test_placement_runs_before_the_wrap_step_and_its_new_parameters_are_reported() -> None:
    """The meta device, as FSDP1 places an empty model before filling it unit by unit:
    the wrap step sees the placed module, and the optimizer's old parameters map to it."""
    SEEN.clear()
    model = nn.Linear(3, 2)
    old = model.weight
    meta = torch.device("meta")
    chain = Chain(place=Placement(meta), ddp=_SeenByTheWrapStep(torch.device("cpu")))
    done = parallelize(model, None, chain)
    assert [meta] == SEEN and done.module is model
    assert done.replaced[id(old)] is model.weight and model.weight.is_meta


def test_broadcast_on_one_process_keeps_the_weights() -> None:
    model = nn.Linear(3, 2)
    weight = model.weight.detach().clone()
    done = parallelize(model, None, Chain(broadcast=BroadcastFromMain(torch.device("cpu"))))
    assert torch.equal(model.weight, weight) and done.replaced == {}
