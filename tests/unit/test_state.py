"""PartialState on one process: device, type resolution, errors, process-control helpers."""

from __future__ import annotations

import warnings
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
from hypothesis import given
from hypothesis import strategies as st

from overdrive import InitProcessGroupKwargs
from overdrive.config import load_settings
from overdrive.config.types import DistributedType
from overdrive.errors import ConfigError
from overdrive.processes.process_state import split_for_process
from overdrive.state import PartialState


def _state(env: dict[str, str] | None = None, **code: object) -> PartialState:
    env = env or {}
    return PartialState(settings=load_settings(code=code, environ=env), environ=env)


def test_single_process_defaults() -> None:
    state = _state()
    assert (state.process_index, state.num_processes, state.num_machines) == (0, 1, 1)
    assert state.rank == 0 and state.is_main_process and state.is_local_main_process
    assert state.distributed_type == DistributedType.NO
    assert not state.use_distributed and state.backend is None
    assert state.debug is False
    state.wait_for_everyone()  # no group: a no-op


def test_use_cpu_forces_the_cpu() -> None:
    assert _state({"ACCELERATE_USE_CPU": "1"}).device == torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_multi_gpu_without_cuda_names_the_source_and_fix() -> None:
    env = {"ACCELERATE_USE_FSDP": "0"}
    settings = load_settings(code={"distributed_type": "MULTI_GPU"}, environ=env)
    with pytest.raises(ConfigError) as err:
        PartialState(settings=settings, environ=env)
    text = str(err.value)
    assert "MULTI_GPU" in text and str(settings.source("distributed_type")) in text
    assert "fix:" in text and "MULTI_CPU" in text


def test_multi_gpu_with_use_cpu_rehearses_on_cpu_and_says_why() -> None:
    env = {"ACCELERATE_USE_CPU": "true"}
    settings = load_settings(code={"distributed_type": "MULTI_GPU"}, environ=env)
    state = PartialState(settings=settings)
    assert state.device.type == "cpu"
    where = str(settings.source("distributed_type"))
    assert "rehearsed on CPU processes" in where and "env ACCELERATE_USE_CPU" in where


def test_multi_cpu_on_one_process_runs_undistributed() -> None:
    assert _state(distributed_type="MULTI_CPU").distributed_type == DistributedType.NO


def test_plain_python_with_more_processes_asked_warns_with_the_command() -> None:
    with pytest.warns(UserWarning, match=r"overdrive launch --num_processes 4") as record:
        _state({"ACCELERATE_NUM_PROCESSES": "4"})
    assert "env ACCELERATE_NUM_PROCESSES" in str(record[0].message)


def test_matching_world_does_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _state({"ACCELERATE_NUM_PROCESSES": "1"})


def test_code_value_contradicting_the_launched_world_is_an_error() -> None:
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    with pytest.raises(ConfigError, match="2 processes are running") as err:
        _state(env, num_processes=4)
    assert "overdrive launch --num_processes 4" in str(err.value)


def test_backends_needing_a_group_get_one_even_alone() -> None:
    assert not dist.is_initialized()
    state = _state(distributed_type="FSDP")
    try:
        assert dist.is_initialized() and dist.get_world_size() == 1
        assert state.backend == "gloo" and state.use_distributed
        assert state.distributed_type == DistributedType.FSDP
        other = _state(distributed_type="FSDP")  # reuses the group
        other.destroy_process_group()  # not its group: stays
        assert dist.is_initialized()
    finally:
        state.destroy_process_group()
    assert not dist.is_initialized()


def test_init_process_group_kwargs_reach_the_group(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, object]] = []
    real = dist.init_process_group

    def spy(**kwargs: object) -> None:
        calls.append(kwargs)
        real(**kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(dist, "init_process_group", spy)
    handler = InitProcessGroupKwargs(timeout=timedelta(seconds=77))
    settings = load_settings(code={"distributed_type": "FSDP"}, environ={})
    state = PartialState(settings=settings, environ={}, init_kwargs=handler)
    try:
        assert len(calls) == 1
        assert calls[0]["timeout"] == timedelta(seconds=77) and calls[0]["backend"] == "gloo"
    finally:
        state.destroy_process_group()


def test_decorators_and_print(capsys: pytest.CaptureFixture[str]) -> None:
    state = _state()
    assert state.on_main_process(lambda: 1)() == 1
    assert state.on_local_main_process(lambda: 2)() == 2
    assert state.on_process(lambda: 3, process_index=1)() is None
    assert state.on_process(process_index=0)(lambda: 4)() == 4
    with state.main_process_first(), state.local_main_process_first():
        state.print("hello")
    assert capsys.readouterr().out == "hello\n"
    with state.split_between_processes([1, 2, 3]) as mine:
        assert mine == [1, 2, 3]


@given(n=st.integers(0, 40), world=st.integers(1, 6), pad=st.booleans())
def test_split_for_process_covers_inputs_in_order(n: int, world: int, pad: bool) -> None:
    items = list(range(n))
    shares = [split_for_process(items, world, r, pad) for r in range(world)]
    tensors = [split_for_process(torch.arange(n), world, r, pad) for r in range(world)]
    assert [s for s in shares] == [t.tolist() for t in tensors]
    if not pad:
        assert [x for s in shares for x in s] == items
        assert max(map(len, shares)) - min(map(len, shares)) <= 1
    elif n:
        assert len({len(s) for s in shares}) == 1
        assert sorted(set(x for s in shares for x in s)) == items


def test_split_for_process_dicts_and_errors() -> None:
    got = split_for_process({"a": [1, 2, 3], "b": (4, 5, 6), "c": "kept"}, 2, 1)
    assert got == {"a": [3], "b": (6,), "c": "kept"}
    with pytest.raises(ValueError, match="one length"):
        split_for_process({"a": [1], "b": [1, 2]}, 2, 0)
    with pytest.raises(TypeError):
        split_for_process(3, 2, 0)
