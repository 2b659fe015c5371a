"""After ``_reset_state()`` a state made before it refuses its attributes with Hugging Face
Accelerate's message until a new state is made (its own tests, and callers such as
transformers' ``TrainingArguments``, reset and rebuild the state this way)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from overdrive.accelerator import Accelerator
from overdrive.state import AcceleratorState, PartialState
from tests.helpers.env import forget_launcher


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]) -> Iterator[None]:
    forget_launcher(monkeypatch, tmp_path)
    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def test_a_partial_state_refuses_its_attributes_after_a_reset_until_a_new_one() -> None:
    state = PartialState()
    with pytest.raises(AttributeError, match="^'PartialState' object has no attribute 'other'$"):
        state.other  # noqa: B018
    state._reset_state()
    with pytest.raises(AttributeError) as raised:
        state.num_processes  # noqa: B018
    assert str(raised.value).startswith("`PartialState` object has no attribute `num_processes`")
    assert "This happens if `PartialState._reset_state()` was called" in str(raised.value)
    state.other = "set"  # other attributes still work
    assert state.other == "set"
    PartialState()
    assert state.num_processes == 1


def test_an_accelerators_state_answers_as_accelerator_state() -> None:
    accelerator = Accelerator(cpu=True)
    with pytest.raises(AttributeError, match="^'AcceleratorState' object has no attribute 'x'$"):
        accelerator.state.x  # noqa: B018
    accelerator.state._reset_state()  # AcceleratorState's reset: the PartialState ones stay
    plain = PartialState()
    with pytest.raises(AttributeError, match=r"`AcceleratorState._reset_state\(\)` was called"):
        accelerator.num_processes  # noqa: B018
    assert plain.num_processes == 1
    Accelerator(cpu=True)
    assert accelerator.num_processes == 1


def test_an_accelerators_state_holds_its_precision_and_plugins_as_accelerate_state_does() -> None:
    accelerator = Accelerator(cpu=True, mixed_precision="bf16")
    assert accelerator.state.mixed_precision == "bf16"
    assert accelerator.state.fsdp_plugin is None and accelerator.state.deepspeed_plugin is None
    with pytest.raises(AttributeError, match="'AcceleratorState' object has no attribute 'x'"):
        accelerator.state.x  # noqa: B018
    AcceleratorState._reset_state()
    with pytest.raises(AttributeError, match="_reset_state"):
        accelerator.state.mixed_precision  # noqa: B018
