"""What TRL's, PEFT's and diffusers' scripts needed of overdrive that it lacked (found by
`make ecosystem`, docs/ecosystem.md); each test stands in for the script that found it."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from overdrive.logging import get_logger


def test_warning_once_warns_once_per_message(caplog: pytest.LogCaptureFixture) -> None:
    # TRL's DPOTrainer calls `logger.warning_once(...)` on `accelerate.logging.get_logger`'s
    # adapter; overdrive's adapter had no such method (AttributeError in DPO's first step).
    logger = get_logger("ecosystem.warning_once")
    with caplog.at_level(logging.WARNING, logger="ecosystem.warning_once"):
        logger.warning_once("padding-free is off")
        logger.warning_once("padding-free is off")
        logger.warning_once("another message")
        logger.warning_once("padding-free is off")
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["padding-free is off", "another message"]


def test_state_hooks_get_the_model_inside_ddp(tmp_path: Path) -> None:
    # diffusers' train_unconditional.py saves with `model.save_pretrained(...)` in its
    # save_state pre-hook and calls `model.register_to_config(...)` in its load hook. The
    # Hugging Face Accelerate keeps each model from before DDP wrapped it and hands hooks that one;
    # overdrive handed them the DistributedDataParallel, which has neither method
    # (AttributeError on 2 processes at the first checkpoint).
    from overdrive.compat.hooks import HooksMixin

    class Unet(nn.Linear):
        def save_pretrained(self, folder: str) -> None:
            Path(folder).mkdir()

    class Holder(HooksMixin):
        def __init__(self, models: list[nn.Module]) -> None:
            self._models = models

        def get_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
            return dict(model.state_dict())

    owned = not dist.is_initialized()
    if owned:
        dist.init_process_group(
            "gloo", store=dist.FileStore(str(tmp_path / "s"), 1), rank=0, world_size=1
        )
    try:
        unet, plain = Unet(2, 2), nn.Linear(2, 1)
        holder = Holder([DistributedDataParallel(unet), plain])
        seen: list[list[nn.Module]] = []
        weights_seen: list[list[str]] = []

        def save_hook(models: list[Any], weights: list[Any], out: str) -> None:
            seen.append(list(models))
            weights_seen.append([",".join(sorted(w)) for w in weights])
            models[0].save_pretrained(str(Path(out) / "unet"))
            weights.pop()

        holder.register_save_state_pre_hook(save_hook)
        holder.register_load_state_pre_hook(lambda models, folder: seen.append(list(models)))
        holder._run_save_state_hooks(tmp_path)
        holder._run_load_state_hooks(tmp_path)
    finally:
        if owned:
            dist.destroy_process_group()
    assert (tmp_path / "unet").is_dir()
    assert [[type(m) for m in models] for models in seen] == [[Unet, nn.Linear]] * 2
    assert seen[0][0] is unet and seen[1][1] is plain
    assert weights_seen == [["module.bias,module.weight", "bias,weight"]]  # as prepared
    assert isinstance(holder._models[0], DistributedDataParallel)  # the list is not changed
