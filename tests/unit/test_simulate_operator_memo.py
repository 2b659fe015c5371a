"""A simulated rank answers an operator it has seen with the same inputs without the fake
mode's dispatch (``overdrive.simulate.operator_memo``): new tensors, views and in-place
results come back as the fake mode gives them; what changes metadata always goes there; and
a whole simulation reports the same with the memo or without it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from overdrive.simulate.fake_world import SimulatedRank
from tests.helpers.env import forget_launcher
from tests.helpers.simulate_script import TINY_LLAMA_SCRIPT


@pytest.fixture
def rank() -> Iterator[SimulatedRank]:
    """A simulated rank's mode over a fake mode, as a simulated script runs under them."""
    with FakeTensorMode(allow_non_fake_inputs=True), SimulatedRank() as mode:
        yield mode


def _memo(rank: SimulatedRank) -> Any:
    assert rank.memo is not None
    return rank.memo


def _described(tensor: torch.Tensor) -> tuple[Any, ...]:
    return (
        type(tensor),
        tuple(tensor.shape),
        tensor.stride(),
        tensor.storage_offset(),
        tensor.dtype,
        tensor.device,
        tensor.untyped_storage().nbytes(),
    )


def _twice(rank: SimulatedRank, operator: Callable[[], Any], calls: int = 1) -> tuple[Any, Any]:
    """The result from the fake mode, then from the memo (which must answer all ``calls``
    operators of the second time)."""
    first = operator()
    answered = _memo(rank).answered
    second = operator()
    assert _memo(rank).answered == answered + calls
    return first, second


def _storage(tensor: torch.Tensor) -> int:
    return int(tensor.untyped_storage()._cdata)


def test_a_repeated_operator_gets_new_tensors_like_the_fake_modes(rank: SimulatedRank) -> None:
    x = torch.empty(4, 6, dtype=torch.bfloat16)
    first, second = _twice(rank, lambda: torch.nn.functional.gelu(x.float()), 2)
    assert isinstance(second, FakeTensor) and _described(second) == _described(first)
    assert len({_storage(first), _storage(second), _storage(x)}) == 3
    values, indices = _twice(rank, lambda: torch.max(x, dim=1))[1]
    assert (values.shape, values.dtype, indices.dtype) == ((4,), torch.bfloat16, torch.int64)
    assert _storage(values) != _storage(indices)


def test_a_repeated_view_shares_its_inputs_storage_and_autograd_sees_a_view(
    rank: SimulatedRank,
) -> None:
    base = torch.empty(8, 6, requires_grad=True).clone()  # a non-leaf, as activations are
    first, second = _twice(rank, lambda: base[2:5].t(), 2)
    assert _described(second) == _described(first)
    assert second.storage_offset() == 12 and _storage(second) == _storage(base)
    assert second._base is base
    before = base._version
    second.mul_(2)  # in place on the view: the base sees a new version
    assert base._version == before + 1


class ReturnsItsInput(TorchDispatchMode):
    """Above the rank's mode: whether each operator returned the tensor it wrote (its
    ``out=`` argument, else its first input) itself: what the peak tracker, also above it,
    sees (a new output would count as new memory)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[bool] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.seen.append(out is kwargs.get("out", args[0]))
        return out


def test_an_in_place_operator_returns_its_input_itself(rank: SimulatedRank) -> None:
    x = torch.empty(3, 5)
    above = ReturnsItsInput()
    with above:
        _twice(rank, lambda: x.add_(1))
    assert above.seen == [True, True]


def test_an_out_argument_is_returned_itself(rank: SimulatedRank) -> None:
    x, y, z = torch.empty(3), torch.empty(3), torch.empty(3)
    above = ReturnsItsInput()
    with above:
        for _ in range(2):
            torch.add(x, y, out=z)
    assert above.seen == [True, True]


def test_operators_that_change_a_tensors_metadata_always_reach_the_fake_mode(
    rank: SimulatedRank,
) -> None:
    x = torch.empty(2, 3)
    answered = _memo(rank).answered
    for _ in range(3):  # the third sees the first's input layout again
        x.t_()
    assert tuple(x.shape) == (3, 2) and _memo(rank).answered == answered
    x.resize_(4, 5)
    assert tuple(x.shape) == (4, 5)


def test_a_real_tensor_input_or_a_different_shape_is_not_answered(rank: SimulatedRank) -> None:
    x = torch.empty(4, 4)
    torch.abs(x)
    answered = _memo(rank).answered
    with torch._subclasses.fake_tensor.unset_fake_temporarily():
        real = torch.ones(4)
    assert tuple((x + real).shape) == (4, 4)
    assert tuple(torch.abs(torch.empty(4, 5)).shape) == (4, 5)
    assert tuple(torch.abs(x.t()).stride()) == (1, 4)
    assert _memo(rank).answered == answered


def test_the_memo_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OVERDRIVE_SIMULATE_OPERATOR_MEMO", "0")
    assert SimulatedRank().memo is None


def _report(tmp_path: Path, memo: str) -> dict[str, Any]:
    script = tmp_path / "train.py"
    script.write_text(TINY_LLAMA_SCRIPT + 'acc.save_state("checkpoint")\n')
    out = tmp_path / f"memo_{memo}.json"
    launch = [sys.executable, "-m", "overdrive.cli.main", "launch", "--simulate", "--cpu"]
    launch += ["--simulate_device", "cuda", "--simulate_steps", "2", "--simulate_json", str(out)]
    launch += ["--num_machines", "2", "--num_processes", "8", "--main_process_ip", "10.0.0.1"]
    launch += ["--use_fsdp", "--fsdp_version", "2", "--mixed_precision", "fp8"]
    launch += ["--fsdp_transformer_layer_cls_to_wrap", "LlamaDecoderLayer"]
    launch += ["--fsdp_activation_checkpointing", "true", "--parallelism_config_tp_size", "2"]
    env = {**__import__("os").environ, "OVERDRIVE_SIMULATE_OPERATOR_MEMO": memo}
    done = subprocess.run([*launch, str(script)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(out.read_text())
    return report


def _without_timings(report: dict[str, Any]) -> dict[str, Any]:
    """The report less what differs from run to run: seconds, and state.json's bytes (it
    holds the random states)."""
    report["checkpoint"].pop("bytes")
    for rank in report["ranks"]:
        rank.pop("seconds")
        rank["checkpoint"]["own"].pop(f"rank_{rank['rank']}/state.json")
    return report


def test_a_simulation_reports_the_same_with_the_memo_and_without(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torchao")
    pytest.importorskip("transformers")
    forget_launcher(monkeypatch, tmp_path / "cache")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with_memo = _without_timings(_report(tmp_path, "1"))
    without = _without_timings(_report(tmp_path, "0"))
    assert [r["rank"] for r in with_memo["ranks"]] == [0, 7]
    assert with_memo["ranks"][0]["collectives_per_step"][1]["all_reduce"]["count"] > 0
    assert with_memo == without
