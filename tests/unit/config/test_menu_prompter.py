"""The terminal wizard (questionary menus) driven by key presses through a pipe input."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("questionary")
from prompt_toolkit.input import create_pipe_input  # noqa: E402
from prompt_toolkit.output import DummyOutput  # noqa: E402

from overdrive.config import sources  # noqa: E402
from overdrive.config.prompts import MenuPrompter  # noqa: E402
from overdrive.config.resolve import resolve  # noqa: E402
from overdrive.config.wizard import run_wizard  # noqa: E402

DOWN, ENTER, BACKSPACE = "\x1b[B", "\r", "\x7f"


@pytest.fixture
def keys() -> Iterator[Any]:
    """A pipe standing in for the terminal: send keys, then ask."""
    with create_pipe_input() as pipe:
        yield pipe


def _menu(pipe: Any, *presses: str) -> MenuPrompter:
    pipe.send_text("".join(presses))
    return MenuPrompter(input=pipe, output=DummyOutput())


def test_each_kind_of_question(keys: Any) -> None:
    menu = _menu(keys, DOWN, ENTER, "y", BACKSPACE * 2, "x", ENTER, BACKSPACE, "7", ENTER, ENTER)
    assert menu.choice("Which?", [("a", 1), ("b", 2), ("c", 3)], 1) == 2  # from the default
    assert menu.confirm("Sure?", False) is True
    assert menu.integer("How many?", 16, minimum=1) == 7  # "x" is refused, then 7
    assert menu.text("Name?", "all") == "all"  # Enter keeps the shown default


def test_deepspeed_zero3_flow_with_arrow_keys(keys: Any, tmp_path: Path) -> None:
    presses = [
        ENTER,  # compute environment: this machine
        ENTER,  # machine type: multi-GPU is the default with 2 GPUs
        ENTER,  # machines: 1
        "n",  # debug checks
        "y",  # DeepSpeed
        DOWN + ENTER,  # ZeRO stage 2 -> 3
        DOWN + ENTER,  # optimizer offload none -> cpu
        DOWN + ENTER,  # parameter offload none -> cpu
        "y",  # zero3_init_flag
        "n",  # 16-bit save
        BACKSPACE + "4" + ENTER,  # gradient accumulation 1 -> 4
        "1.0" + ENTER,  # clipping
        ENTER,  # processes: 2
        ENTER,  # gpu ids: all
        "n",  # torch.compile
        DOWN + DOWN + ENTER,  # mixed precision no -> bf16
    ]
    answers = run_wizard(_menu(keys, *presses), gpu_count=2)
    path = tmp_path / "ds.yaml"
    text = yaml.safe_dump(answers, sort_keys=False)
    settings = resolve(file=sources.parse_config_text(text, path))
    assert settings["distributed_type"] == "DEEPSPEED"
    ds = settings.section("deepspeed_config")
    assert (ds["zero_stage"], ds["offload_optimizer_device"], ds["offload_param_device"]) == (
        3,
        "cpu",
        "cpu",
    )
    assert ds["zero3_init_flag"] is True and ds["gradient_clipping"] == 1.0
    assert settings["gradient_accumulation_steps"] == 4
    assert settings["num_processes"] == 2 and settings["gpu_ids"] == "all"
    assert settings["mixed_precision"] == "bf16"
