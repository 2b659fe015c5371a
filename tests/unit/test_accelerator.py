"""The Accelerator facade on one process: settings, prepare, the step, strategies."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from torch import nn

from overdrive import (
    DistributedDataParallelKwargs,
    GradientAccumulationPlugin,
    MegatronLMPlugin,
    ProjectConfiguration,
)
from overdrive.accelerator import Accelerator
from overdrive.config.types import DistributedType
from overdrive.errors import ConfigError, OverdriveError
from overdrive.optimizer import AcceleratedOptimizer
from overdrive.scheduler import AcceleratedScheduler
from overdrive.strategies import SingleDeviceStrategy
from tests.helpers.env import forget_launcher


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]) -> None:
    forget_launcher(monkeypatch, tmp_path)


def _parts() -> tuple[nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    return model, opt, sched


def test_one_process_defaults_and_properties() -> None:
    acc = Accelerator(cpu=True)
    assert acc.device == torch.device("cpu")
    assert acc.distributed_type == DistributedType.NO
    assert (acc.num_processes, acc.process_index, acc.local_process_index) == (1, 0, 0)
    assert acc.is_main_process and acc.is_local_main_process
    assert not acc.use_distributed
    assert acc.mixed_precision == "no"
    assert acc.gradient_accumulation_steps == 1
    assert acc.sync_gradients
    assert isinstance(acc.strategy, SingleDeviceStrategy)
    assert acc.settings.source("use_cpu").kind == "code"


def test_code_arguments_become_settings_with_their_source(tmp_path: os.PathLike[str]) -> None:
    acc = Accelerator(
        gradient_accumulation_steps=3,
        project_config=ProjectConfiguration(project_dir=str(tmp_path), total_limit=2),
    )
    assert acc.gradient_accumulation_steps == 3
    assert str(acc.settings.source("gradient_accumulation_steps")) == (
        "code Accelerator(gradient_accumulation_steps=...)"
    )
    pc = acc.project_configuration
    assert pc.project_dir == str(tmp_path)
    assert pc.logging_dir == str(tmp_path)  # Hugging Face Accelerate: logging_dir is project_dir
    assert pc.total_limit == 2


def test_plugin_steps_are_the_accumulation_steps() -> None:
    acc = Accelerator(gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=4))
    assert acc.gradient_accumulation_steps == 4


def test_adjust_scheduler_off_cannot_take_effect_and_says_so() -> None:
    plugin = GradientAccumulationPlugin(num_steps=2, adjust_scheduler=False)
    with pytest.raises(ConfigError, match="step_scheduler_with_optimizer=False"):
        Accelerator(cpu=True, gradient_accumulation_plugin=plugin)


def test_adjust_scheduler_off_is_accepted_when_every_step_syncs() -> None:
    """A window of one micro-batch never skips a step, so there is nothing to adjust.
    transformers' Trainer accumulates by itself and always passes ``num_steps=1`` with the
    user's ``gradient_accumulation_kwargs`` (transformers' tests/trainer/
    test_trainer_accelerator.py::test_accelerate_config_from_dataclass_grad_accum)."""
    plugin = GradientAccumulationPlugin(num_steps=1, adjust_scheduler=False)
    acc = Accelerator(cpu=True, gradient_accumulation_plugin=plugin)
    assert acc.gradient_accumulation_steps == 1


def test_accumulation_given_twice_is_an_error() -> None:
    with pytest.raises(ConfigError, match="given twice"):
        Accelerator(
            gradient_accumulation_steps=2,
            gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=2),
        )


def test_duplicate_kwargs_handlers_are_an_error() -> None:
    with pytest.raises(ConfigError, match="two DistributedDataParallelKwargs"):
        Accelerator(
            kwargs_handlers=[DistributedDataParallelKwargs(), DistributedDataParallelKwargs()]
        )
    with pytest.raises(ConfigError, match="not a kwargs handler"):
        Accelerator(kwargs_handlers=[{"bucket_cap_mb": 1}])


def test_degrees_that_do_not_fit_name_setting_and_source() -> None:
    with pytest.raises(ConfigError) as info:
        Accelerator(megatron_lm_plugin=MegatronLMPlugin(tp_degree=2))  # one process
    text = str(info.value)
    assert "megatron_lm_config.tp_degree" in text and "does not divide the 1 processes" in text
    assert "code Accelerator(megatron_lm_plugin=" in text


def test_backend_from_environment_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCELERATE_USE_MEGATRON_LM", "true")
    monkeypatch.setenv("ACCELERATE_MEGATRON_LM_TP_DEGREE", "2")
    with pytest.raises(ConfigError, match="env ACCELERATE_MEGATRON_LM_TP_DEGREE"):
        Accelerator()


def test_prepare_returns_objects_in_order_and_wraps_them() -> None:
    acc = Accelerator(cpu=True)
    model, opt, sched = _parts()
    other = {"not": "prepared"}
    s2, m2, o2, x2 = acc.prepare(sched, model, opt, other)
    assert m2 is model  # one process: no wrapper, moved in place
    assert isinstance(o2, AcceleratedOptimizer) and o2.optimizer is opt
    assert isinstance(s2, AcceleratedScheduler) and s2.scheduler is sched
    assert s2._optimizers == [o2]  # the scheduler found its optimizer in the same call
    assert x2 is other
    assert acc._models == [model] and acc._optimizers == [o2] and acc._schedulers == [s2]
    assert acc.prepare(o2) is o2  # preparing twice changes nothing
    assert acc._optimizers == [o2]


def test_preparing_the_raw_objects_again_returns_the_first_wrappers() -> None:
    acc = Accelerator(cpu=True, gradient_accumulation_steps=2)
    model, opt, sched = _parts()
    m1, o1, s1 = acc.prepare(model, opt, sched)
    m2, o2, s2 = acc.prepare(model, opt, sched)
    assert (m2, o2, s2) == (m1, o1, s1)
    # two wrappers of one optimizer would each apply a partial window's k/m rescale
    assert acc._models == [m1] and acc._optimizers == [o1] and acc._schedulers == [s1]


def test_rng_types_are_checked_names() -> None:
    assert Accelerator(cpu=True).rng_types == []
    assert Accelerator(cpu=True, rng_types=["torch", "generator"]).rng_types == [
        "torch",
        "generator",
    ]
    with pytest.raises(ConfigError, match="rng_types got \\['tpu'\\]"):
        Accelerator(cpu=True, rng_types=["torch", "tpu"])


def test_prepare_one_object_returns_it_alone() -> None:
    acc = Accelerator(cpu=True)
    model, _, _ = _parts()
    assert acc.prepare(model) is model


def test_device_placement_per_object_count_must_match() -> None:
    acc = Accelerator(cpu=True)
    model, opt, _ = _parts()
    with pytest.raises(OverdriveError, match="2 objects but 1"):
        acc.prepare(model, opt, device_placement=[True])


def test_step_matches_plain_pytorch_with_clipping() -> None:
    acc = Accelerator(cpu=True)
    model, opt, _ = _parts()
    ref, ref_opt, _ = _parts()
    model, opt = acc.prepare(model, opt)
    torch.manual_seed(1)
    for _ in range(5):
        x, y = torch.randn(6, 4), torch.randn(6, 1)
        loss = nn.functional.mse_loss(model(x), y)
        acc.backward(loss)
        norm = acc.clip_grad_norm_(model.parameters(), 0.1)
        opt.step()
        opt.zero_grad()
        ref_loss = nn.functional.mse_loss(ref(x), y)
        ref_loss.backward()
        ref_norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.1)
        ref_opt.step()
        ref_opt.zero_grad()
        assert torch.equal(norm, ref_norm)
    for p, q in zip(model.parameters(), ref.parameters()):
        assert torch.equal(p, q)


def test_clip_grad_value_clamps() -> None:
    acc = Accelerator(cpu=True)
    model, opt, _ = _parts()
    model, opt = acc.prepare(model, opt)
    acc.backward(model(torch.randn(8, 4)).sum() * 100)
    acc.clip_grad_value_(model.parameters(), 0.01)
    assert max(p.grad.abs().max().item() for p in model.parameters()) <= 0.01


def test_accumulate_without_loader_steps_every_k_micro_batches() -> None:
    acc = Accelerator(cpu=True, gradient_accumulation_steps=3)
    model, opt, sched = _parts()
    model, opt, sched = acc.prepare(model, opt, sched)
    syncs = []
    for _ in range(7):
        with acc.accumulate(model):
            acc.backward(model(torch.randn(2, 4)).sum())
            syncs.append(acc.sync_gradients)
            opt.step()
            sched.step()
            opt.zero_grad()
    assert syncs == [False, False, True, False, False, True, False]
    assert opt.steps_taken == 2
    assert sched.scheduler.last_epoch == 2
    # the 7th micro-batch's gradient is still accumulating (no loader told us it ended)
    assert all(p.grad is not None for p in model.parameters())


def test_backward_divides_by_accumulation_steps() -> None:
    acc = Accelerator(cpu=True, gradient_accumulation_steps=4)
    w = nn.Parameter(torch.ones(()))
    acc.backward(w * 8.0)
    assert w.grad.item() == pytest.approx(2.0)


def test_unwrap_model_peels_torch_compile() -> None:
    acc = Accelerator(cpu=True)
    model, _, _ = _parts()
    compiled = torch.compile(model, backend="eager")
    assert acc.unwrap_model(compiled) is model


def test_no_sync_and_autocast_are_context_managers() -> None:
    acc = Accelerator(cpu=True)
    model, _, _ = _parts()
    with acc.no_sync(model), acc.autocast():
        out = model(torch.randn(1, 4))
    assert out.dtype == torch.float32


def test_register_for_checkpointing_checks_objects() -> None:
    acc = Accelerator(cpu=True)
    model, _, _ = _parts()
    acc.register_for_checkpointing(model)
    assert acc._custom_objects == [model]
    with pytest.raises(ValueError, match=r"Item at index 1, `7`"):
        acc.register_for_checkpointing(model, 7)


def test_process_helpers_on_one_process(capsys: pytest.CaptureFixture[str]) -> None:
    acc = Accelerator(cpu=True)
    acc.print("hello")
    assert capsys.readouterr().out == "hello\n"
    assert acc.on_main_process(lambda: 5)() == 5
    assert acc.on_local_main_process(lambda: 6)() == 6
    with acc.split_between_processes([1, 2, 3]) as share:
        assert share == [1, 2, 3]
    with acc.main_process_first():
        acc.wait_for_everyone()
    t = torch.arange(3.0)
    assert torch.equal(acc.gather(t), t)
    assert torch.equal(acc.reduce(t, scale=2.0), t * 2)


def test_free_memory_forgets_prepared_objects() -> None:
    acc = Accelerator(cpu=True)
    model, opt, sched = _parts()
    acc.prepare(model, opt, sched)
    assert acc.free_memory(model, opt) == [None, None]
    assert acc._models == [] and acc._optimizers == [] and acc._schedulers == []


def test_get_tracker_without_trackers_is_clear() -> None:
    acc = Accelerator(cpu=True)
    with pytest.raises(OverdriveError, match="no tracker named 'tensorboard'"):
        acc.get_tracker("tensorboard")


class _Stream(torch.utils.data.IterableDataset):
    """An iterable dataset without ``len()``."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __iter__(self):  # type: ignore[no-untyped-def]
        yield from zip(self.x, self.y)


@pytest.mark.parametrize("iterable", [False, True], ids=["map-style", "iterable"])
def test_trailing_partial_window_equals_one_step_on_its_batches(iterable: bool) -> None:
    k, b, batches = 3, 2, 7  # windows of 3, 3 and 1 micro-batches
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(b * batches, 4, generator=g), torch.randn(b * batches, 1, generator=g)
    data = _Stream(x, y) if iterable else torch.utils.data.TensorDataset(x, y)
    plugin = GradientAccumulationPlugin(num_steps=k, exact_accumulation=True)  # overdrive's
    acc = Accelerator(cpu=True, gradient_accumulation_plugin=plugin)
    model, opt, _ = _parts()
    ref, ref_opt, _ = _parts()
    model, opt, dl = acc.prepare(model, opt, torch.utils.data.DataLoader(data, batch_size=b))
    seen: list[torch.Tensor] = []
    sizes = []
    for bx, by in dl:
        with acc.accumulate(model):
            acc.backward(nn.functional.mse_loss(model(bx), by))
            opt.step()
            opt.zero_grad()
        seen.append(bx)
        if acc.sync_gradients:
            start = sum(sizes) * b
            window = slice(start, start + len(seen) * b)
            assert torch.equal(torch.cat(seen), x[window])
            nn.functional.mse_loss(ref(x[window]), y[window]).backward()
            ref_opt.step()
            ref_opt.zero_grad()
            sizes.append(len(seen))
            seen = []
            for p, q in zip(model.parameters(), ref.parameters()):
                assert torch.allclose(p, q, atol=1e-6), f"window {len(sizes)}"
    assert sizes == [3, 3, 1]
    assert opt.steps_taken == 3


def test_select_strategy_by_world_size() -> None:
    from types import SimpleNamespace

    from overdrive.config import load_settings
    from overdrive.parallel.decide import decide_layout
    from overdrive.strategies import DDPStrategy, StrategyOptions, select_strategy

    settings = load_settings()  # the autouse fixture cleared the environment
    cpu = torch.device("cpu")
    two = select_strategy(
        SimpleNamespace(num_processes=2, device=cpu, decision=decide_layout(settings, 2)),
        settings,
        StrategyOptions(
            ddp_kwargs=DistributedDataParallelKwargs(bucket_cap_mb=5, static_graph=True)
        ),
    )
    assert isinstance(two, DDPStrategy)
    assert two.ddp_kwargs == {"bucket_cap_mb": 5, "static_graph": True}  # only changed fields
    state = SimpleNamespace(num_processes=1, device=cpu, decision=decide_layout(settings, 1))
    one = select_strategy(state, settings)
    assert isinstance(one, SingleDeviceStrategy)


def test_log_before_init_trackers_is_an_error_not_a_silent_drop(tmp_path: Path) -> None:
    from overdrive.tracking import TrackerError

    acc = Accelerator(cpu=True, log_with="jsonl", project_dir=str(tmp_path))
    with pytest.raises(TrackerError, match="before init_trackers"):
        acc.log({"loss": 1.0}, step=0)
    Accelerator(cpu=True).log({"loss": 1.0}, step=0)  # no log_with: nothing to start, no error
