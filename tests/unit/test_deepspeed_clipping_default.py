"""DeepSpeed's gradient_clipping takes Hugging Face Accelerate's default "auto": a config
built from the settings clips at 1.0 unless a caller (transformers' Trainer, from
max_grad_norm) fills another number; a DeepSpeed JSON without the key leaves the engine's
own default (1.0 in DeepSpeed 0.19), as there."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from overdrive.ds.config import AUTO, build
from tests.unit.test_deepspeed_config import finished, settings_for

pytestmark = pytest.mark.deepspeed


def _optimizer() -> torch.optim.Optimizer:
    return torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)


def test_settings_without_the_key_clip_at_one_at_prepare(tmp_path: Path) -> None:
    cfg = build(settings_for(tmp_path, {"deepspeed_config": {"zero_stage": 2}}))
    assert cfg.config["gradient_clipping"] == AUTO
    assert "Hugging Face Accelerate" in cfg.sources["gradient_clipping"]
    out = finished(cfg, optimizer=_optimizer())
    assert out["gradient_clipping"] == 1.0 and cfg.gradient_clipping == 1.0
    assert "no caller gave a value" in cfg.sources["gradient_clipping"]


def test_a_callers_number_fills_auto(tmp_path: Path) -> None:
    from overdrive.ds.finish import finish

    cfg = build(settings_for(tmp_path, {"deepspeed_config": {"zero_stage": 2}}))
    out = finish(
        cfg, micro_batch=4, micro_source="test", world_size=2, optimizer=_optimizer(),
        scheduler=None, on_cpu=True, caller_clipping=0.5,
    )  # fmt: skip
    assert out["gradient_clipping"] == 0.5
    assert "max_grad_norm" in cfg.sources["gradient_clipping"]


def test_an_explicit_setting_and_a_json_without_the_key(tmp_path: Path) -> None:
    cfg = build(
        settings_for(tmp_path, {"deepspeed_config": {"zero_stage": 2, "gradient_clipping": 0.3}})
    )
    assert finished(cfg, optimizer=_optimizer())["gradient_clipping"] == 0.3
    ds_json = {"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": "auto"}
    cfg = build(settings_for(tmp_path, {}, ds_json))
    assert "gradient_clipping" not in finished(cfg, optimizer=_optimizer())
    ds_json["gradient_clipping"] = AUTO
    cfg = build(settings_for(tmp_path, {}, ds_json))
    assert finished(cfg, optimizer=_optimizer())["gradient_clipping"] == 1.0


def test_what_trainer_fills_in_the_exposed_plugin_reaches_prepare(tmp_path: Path) -> None:
    """transformers' Trainer fills "auto" with max_grad_norm in the plugin the Accelerator
    exposes (``accelerator.state.deepspeed_plugin``), replacing its ``hf_ds_config``; prepare
    reads the value there."""
    from types import SimpleNamespace

    from overdrive.compat.plugin_views import effective_deepspeed_plugin
    from overdrive.strategies.deepspeed import DeepSpeedStrategy, _caller_clipping

    settings = settings_for(tmp_path, {"deepspeed_config": {"zero_stage": 2}})
    strategy = DeepSpeedStrategy(torch.device("cpu"), build(settings))
    plugin = effective_deepspeed_plugin(None, settings, strategy)
    assert strategy.exposed_plugin is plugin
    assert plugin.hf_ds_config.config["gradient_clipping"] == AUTO
    filled = {**plugin.hf_ds_config.config, "gradient_clipping": 0.3}
    plugin.hf_ds_config = SimpleNamespace(config=filled)  # as propagate_args_to_deepspeed does
    assert _caller_clipping(strategy.exposed_plugin) == 0.3
