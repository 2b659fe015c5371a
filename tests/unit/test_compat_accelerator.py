"""Hugging Face Accelerate's Accelerator methods and properties on one process (issue 12, part 2)."""

from __future__ import annotations

import pickle
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset

from overdrive import Accelerator, AcceleratorState, GradientAccumulationPlugin, GradientState
from overdrive.errors import ConfigError
from tests.helpers.env import forget_launcher


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    forget_launcher(monkeypatch, tmp_path)


def _prepared(acc: Accelerator) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Linear(2, 1)
    return acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))


def test_process_decorators_and_facts() -> None:
    acc = Accelerator(cpu=True)
    assert acc.on_process(lambda: "ran", process_index=0)() == "ran"
    assert acc.on_process(lambda: "ran", process_index=1)() is None
    assert acc.on_process(process_index=0)(lambda: 1)() == 1
    assert acc.on_local_process(lambda: 2, local_process_index=0)() == 2
    assert acc.on_local_process(local_process_index=1)(lambda: 2)() is None
    assert acc.on_last_process(lambda: 3)() == 3
    assert acc.is_last_process and not acc.multi_device
    assert acc.data_parallel_rank == 0 and acc.tensor_parallel_rank == 0
    assert acc.is_fsdp2 is False and acc.torch_device_mesh is None
    assert acc.save_iteration == 0 and acc.step == 0


def test_dataloader_settings_as_properties() -> None:
    from overdrive import DataLoaderConfiguration

    config = DataLoaderConfiguration(even_batches=False, use_seedable_sampler=True)
    acc = Accelerator(cpu=True, dataloader_config=config)
    assert acc.even_batches is False and acc.use_seedable_sampler is True
    assert acc.non_blocking is False and acc.dispatch_batches is None
    assert acc.use_stateful_dataloader is False  # torchdata's loader only when asked for
    acc.even_batches = True
    assert acc.even_batches is True
    assert str(acc.settings.source("even_batches")).startswith("code")


def test_trigger_on_one_process() -> None:
    acc = Accelerator(cpu=True)
    assert acc.check_trigger() is False
    acc.set_trigger()
    assert acc.check_trigger() is True
    assert acc.check_trigger() is False  # cleared by the check


def test_save_writes_once_safe_or_not(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    acc = Accelerator(cpu=True)
    acc.save({"w": torch.ones(2)}, tmp_path / "w.safetensors", safe_serialization=True)
    assert torch.equal(load_file(str(tmp_path / "w.safetensors"))["w"], torch.ones(2))
    acc.save([1, 2], tmp_path / "obj.bin")
    assert torch.load(tmp_path / "obj.bin", weights_only=True) == [1, 2]
    with pytest.raises(ConfigError, match="dict of tensors"):
        acc.save([1], tmp_path / "x.safetensors", safe_serialization=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["obj.bin", "w.safetensors"]


def test_unscale_gradients_takes_prepared_optimizers_only() -> None:
    acc = Accelerator(cpu=True)
    model, opt = _prepared(acc)
    model(torch.ones(1, 2)).sum().backward()
    acc.unscale_gradients()
    acc.unscale_gradients(opt)
    with pytest.raises(ConfigError, match="not prepared"):
        acc.unscale_gradients(torch.optim.SGD(nn.Linear(1, 1).parameters(), lr=1))


def test_state_hooks_see_models_and_may_pop_what_they_saved(tmp_path: Path) -> None:
    acc = Accelerator(cpu=True, project_dir=str(tmp_path))
    model, _ = _prepared(acc)
    seen: list[tuple] = []

    def save_hook(models: list, weights: list, directory: str) -> None:
        seen.append(("save", len(models), len(weights)))
        (Path(directory) / "data.json").write_text('{"kind": "extra"}')

    handle = acc.register_save_state_pre_hook(save_hook)
    acc.register_load_state_pre_hook(lambda m, d: seen.append(("load", len(m), d)))
    for _ in range(2):  # the hook's own file neither blocks this save nor the next one
        acc.save_state(str(tmp_path / "ck"))
    assert (tmp_path / "ck" / "data.json").read_text() == '{"kind": "extra"}'
    acc.load_state(str(tmp_path / "ck"))
    assert seen == [("save", 1, 1), ("save", 1, 1), ("load", 1, str(tmp_path / "ck"))]
    handle.remove()
    # diffusers' hooks save a model themselves and pop it (on save and on load): allowed, and
    # the model is still restored with the checkpoint.
    acc.register_save_state_pre_hook(lambda m, w, d: w.pop())
    acc.register_load_state_pre_hook(lambda m, d: m.pop())
    acc.save_state(str(tmp_path / "ck2"))
    saved = [p.detach().clone() for p in model.parameters()]
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    acc.load_state(str(tmp_path / "ck2"))
    assert all(torch.equal(a, b) for a, b in zip(saved, model.parameters()))


def test_unknown_checkpoint_arguments_are_rejected_with_the_valid_names(tmp_path: Path) -> None:
    acc = Accelerator(cpu=True, project_dir=str(tmp_path))
    model, _ = _prepared(acc)
    with pytest.raises(TypeError, match=r"\['savefile'\]; valid: \['output_dir'"):
        acc.save_state(str(tmp_path / "a"), savefile=True)
    acc.save_state(str(tmp_path / "a"), safe_serialization=True)  # Accelerate's documented argument
    with pytest.warns(UserWarning, match="always writes tensors as safetensors"):
        acc.save_state(str(tmp_path / "b"), safe_serialization=False)
    with pytest.raises(TypeError, match="valid"):
        acc.load_state(str(tmp_path / "a"), map_location="cpu")
    with pytest.raises(ConfigError, match="strict"):
        acc.load_state(str(tmp_path / "a"), strict=False)
    acc.load_state(str(tmp_path / "a"), strict=True, load_kwargs=None)
    assert acc.unwrap_model(model, keep_torch_compile=False) is model
    with pytest.raises(TypeError):
        acc.unwrap_model(model, keep_torch_compilation=True)  # type: ignore[call-arg]


def test_accelerator_state_views_follow_the_newest_accelerator() -> None:
    first = Accelerator(cpu=True)
    assert AcceleratorState().process_index == 0
    assert AcceleratorState().mixed_precision == "no"
    second = Accelerator(cpu=True, mixed_precision="bf16")
    assert AcceleratorState().mixed_precision == "bf16"
    view = AcceleratorState()
    view.debug = True
    assert second.state.debug and second._debug
    view.debug = False
    assert AcceleratorState._shared_state != {}
    AcceleratorState._reset_state()
    assert AcceleratorState._shared_state == {}
    with pytest.raises(AttributeError, match=r"AcceleratorState._reset_state\(\)"):
        second.prepare(nn.Linear(1, 1))
    first.prepare(nn.Linear(1, 1))  # only the forgotten one refuses


def test_gradient_state_knows_the_active_dataloader() -> None:
    acc = Accelerator(cpu=True)
    dl = acc.prepare(DataLoader(range(6), batch_size=2))
    gs = acc.gradient_state
    assert gs.active_dataloader is None and not gs.in_dataloader
    ends = []
    for _ in dl:
        assert gs.active_dataloader is dl and gs.in_dataloader
        assert GradientState().active_dataloader is dl
        ends.append(gs.end_of_dataloader)
    assert ends == [False, False, True] and gs.dataloader_references == [None]
    GradientState._reset_state()


def test_plugin_kwargs_hold_what_differs_from_the_plugin_defaults() -> None:
    """As Hugging Face Accelerate's ``GradientAccumulationPlugin.to_kwargs()``: ``num_steps`` always,
    ``sync_each_batch`` only when asked for (transformers' tests/trainer/
    test_trainer_accelerator.py::test_accelerator_config_empty)."""
    assert Accelerator(cpu=True).gradient_state.plugin_kwargs == {"num_steps": 1}
    plugin = GradientAccumulationPlugin(num_steps=1, sync_each_batch=True)
    kwargs = Accelerator(cpu=True, gradient_accumulation_plugin=plugin).gradient_state.plugin_kwargs
    assert kwargs == {"num_steps": 1, "sync_each_batch": True}


def test_accelerator_pickles() -> None:
    acc = Accelerator(cpu=True)
    acc.prepare(DataLoader(range(8), batch_size=2))
    again = pickle.loads(pickle.dumps(acc))
    assert again.state.__dict__ == acc.state.__dict__
    assert again.num_processes == 1


def test_positional_prepare_data_loader_and_its_checks() -> None:
    from overdrive.data_loader import DataLoaderShard, prepare_data_loader

    acc = Accelerator(cpu=True)
    dl = prepare_data_loader(DataLoader(range(4), batch_size=2), acc.device, 1, 0, False, True)
    assert isinstance(dl, DataLoaderShard) and [b.tolist() for b in dl] == [[0, 1], [2, 3]]


class _Stream(IterableDataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.n))


def test_prepare_data_loader_shards_as_asked_for_a_world_it_names() -> None:
    """One process reads process i's share of a world of 2, as Hugging Face Accelerate deals
    it (the values are its own, from the same calls)."""
    from overdrive.data_loader import prepare_data_loader
    from overdrive.utils import set_seed

    def share(index: int, dataset: Any, **kwargs: Any) -> list[list[int]]:
        loader = DataLoader(dataset, batch_size=kwargs.pop("batch_size", 2), **kwargs)
        return [b.tolist() for b in prepare_data_loader(loader, None, 2, index)]

    assert share(0, range(10)) == [[0, 1], [4, 5], [8, 9]]
    assert share(1, range(10)) == [[2, 3], [6, 7], [0, 1]]  # the last round completed
    assert share(1, _Stream(10)) == [[2, 3], [6, 7], [0, 1]]
    set_seed(21)
    assert share(1, range(8), shuffle=True) == [[7, 3], [6, 4]]
    loader = DataLoader(range(6), batch_size=2)
    assert [b.tolist() for b in prepare_data_loader(loader, num_processes=2)] == [[0, 1], [4, 5]]


def test_split_between_processes_over_a_selectable_dataset() -> None:
    from overdrive.processes.process_state import split_for_process

    class Rows:
        def __init__(self, rows: list[int]) -> None:
            self.rows = rows

        def __len__(self) -> int:
            return len(self.rows)

        def select(self, indices: list[int]) -> Rows:
            return Rows([self.rows[i] for i in indices])

    data = Rows([10, 11, 12])
    assert split_for_process(data, 2, 0).rows == [10, 11]
    assert split_for_process(data, 2, 1).rows == [12]
    assert split_for_process(data, 2, 1, apply_padding=True).rows == [12, 12]


def test_join_warns_without_ddp_and_notebook_launcher_runs_here_alone() -> None:
    from overdrive import notebook_launcher

    acc = Accelerator(cpu=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with acc.join_uneven_inputs([nn.Linear(1, 1)]):
            pass
    assert "only supported for multi-GPU" in str(caught[-1].message)
    assert notebook_launcher(lambda x: x + 1, (1,), num_processes=1) == 2
    with acc.trigger_sync_in_backward(nn.Linear(1, 1)), acc.maybe_context_parallel():
        pass
