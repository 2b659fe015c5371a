"""The DeepSpeed config: built from the settings, or a DeepSpeed JSON with "auto" filled;
contradictions name both values and both sources; ignored settings are reported.

No DeepSpeed import here (the builder is plain Python); the CLI cases run `overdrive` itself.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from overdrive.config import load_settings
from overdrive.ds.config import AUTO, build
from overdrive.ds.dummies import DummyOptim, DummyScheduler
from overdrive.ds.finish import describe, finish
from overdrive.errors import ConfigError
from tests.helpers.dist import REPO, clean_env

pytestmark = pytest.mark.deepspeed


def settings_for(tmp_path: Path, data: dict[str, Any], ds_json: dict[str, Any] | None = None):
    data = {"distributed_type": "DEEPSPEED", **data}
    if ds_json is not None:
        (tmp_path / "ds.json").write_text(json.dumps(ds_json, indent=1))
        data.setdefault("deepspeed_config", {})["deepspeed_config_file"] = str(tmp_path / "ds.json")
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_settings(config_file=path, environ={})


def line_of(tmp_path: Path, key: str) -> str:
    """``file <cfg.yaml>:<line>`` for the line that sets ``key``."""
    lines = (tmp_path / "cfg.yaml").read_text().splitlines()
    number = next(i for i, text in enumerate(lines, 1) if text.strip().startswith(f"{key}:"))
    return f"file {tmp_path / 'cfg.yaml'}:{number}"


def finished(cfg: Any, *, micro: int | None = 4, world: int = 2, optimizer: Any = None,
             scheduler: Any = None) -> dict[str, Any]:  # fmt: skip
    return finish(
        cfg,
        micro_batch=micro,
        micro_source=f"the prepared dataloader's batch size per process ({micro})",
        world_size=world,
        optimizer=optimizer,
        scheduler=scheduler,
        on_cpu=True,
    )


def test_settings_become_a_deepspeed_config_with_their_sources(tmp_path: Path) -> None:
    s = settings_for(
        tmp_path,
        {
            "mixed_precision": "bf16",
            "deepspeed_config": {
                "zero_stage": 3,
                "offload_optimizer_device": "cpu",
                "gradient_accumulation_steps": 4,
                "gradient_clipping": 1.0,
                "zero3_save_16bit_model": True,
            },
        },
    )
    cfg = build(s)
    c = cfg.config
    assert c["zero_optimization"]["stage"] == 3
    assert c["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert c["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True
    assert (c["gradient_accumulation_steps"], c["gradient_clipping"]) == (4, 1.0)
    assert c["bf16"] == {"enabled": True}
    assert cfg.gradient_accumulation_steps == 4 and cfg.mixed_precision == "bf16"
    assert cfg.sources["zero_optimization.stage"] == line_of(tmp_path, "zero_stage")
    assert cfg.sources["gradient_clipping"] == line_of(tmp_path, "gradient_clipping")
    assert cfg.sources["bf16.enabled"] == line_of(tmp_path, "mixed_precision")
    assert c["train_micro_batch_size_per_gpu"] == AUTO and not cfg.notes
    final = finished(cfg, micro=8, world=2)
    assert (final["train_micro_batch_size_per_gpu"], final["train_batch_size"]) == (8, 64)


def test_json_auto_values_are_filled_from_the_settings(tmp_path: Path) -> None:
    ds = {
        "train_micro_batch_size_per_gpu": AUTO,
        "train_batch_size": AUTO,
        "gradient_accumulation_steps": AUTO,
        "gradient_clipping": AUTO,
        "bf16": {"enabled": AUTO},
        "zero_optimization": {"stage": AUTO, "offload_optimizer": {"device": AUTO}},
    }
    s = settings_for(
        tmp_path,
        {
            "mixed_precision": "bf16",
            "gradient_accumulation_steps": 2,
            "deepspeed_config": {"zero_stage": 2, "gradient_clipping": 0.5},
        },
        ds,
    )
    cfg = build(s)
    c = cfg.config
    assert c["zero_optimization"] == {"stage": 2, "offload_optimizer": {"device": "none"}}
    assert (c["gradient_accumulation_steps"], c["gradient_clipping"]) == (2, 0.5)
    assert c["bf16"]["enabled"] is True
    origin = f"the DeepSpeed config file {tmp_path / 'ds.json'}"
    source = cfg.sources["zero_optimization.stage"]
    assert source.startswith(line_of(tmp_path, "zero_stage")) and origin in source
    assert '"auto"' in source
    final = finished(cfg, micro=3, world=2)
    assert (final["train_micro_batch_size_per_gpu"], final["train_batch_size"]) == (3, 12)


@pytest.mark.parametrize(
    ("setting", "json_part", "json_path", "yaml_key"),
    [
        ({"deepspeed_config": {"zero_stage": 2}}, {"zero_optimization": {"stage": 3}},
         "zero_optimization.stage = 3", "zero_stage"),
        ({"gradient_accumulation_steps": 2}, {"gradient_accumulation_steps": 8},
         "gradient_accumulation_steps = 8", "gradient_accumulation_steps"),
        ({"deepspeed_config": {"gradient_clipping": 1.0}}, {"gradient_clipping": 0.3},
         "gradient_clipping = 0.3", "gradient_clipping"),
        ({"mixed_precision": "no"}, {"bf16": {"enabled": True}},
         "bf16.enabled = true", "mixed_precision"),
    ],
)  # fmt: skip
def test_a_json_value_that_contradicts_a_setting_names_both(
    tmp_path: Path, setting: dict, json_part: dict, json_path: str, yaml_key: str
) -> None:
    s = settings_for(tmp_path, setting, json_part)
    with pytest.raises(ConfigError) as info:
        build(s)
    text = str(info.value)
    assert json_path in text and str(tmp_path / "ds.json") in text
    assert line_of(tmp_path, yaml_key) in text and "fix:" in text


def test_a_json_value_is_used_where_no_setting_was_given(tmp_path: Path) -> None:
    s = settings_for(tmp_path, {}, {"gradient_accumulation_steps": 4, "bf16": {"enabled": True}})
    cfg = build(s)
    assert cfg.gradient_accumulation_steps == 4 and cfg.mixed_precision == "bf16"
    assert str(tmp_path / "ds.json") in cfg.sources["gradient_accumulation_steps"]


def test_settings_a_json_makes_meaningless_are_reported(tmp_path: Path) -> None:
    s = settings_for(
        tmp_path,
        {"deepspeed_config": {"gradient_clipping": 1.0, "offload_param_device": "none"}},
        {"zero_optimization": {"stage": 3}},
    )
    cfg = build(s)
    other, note = cfg.notes  # offload_param_device none is DeepSpeed's default, but was set
    assert "deepspeed_config.offload_param_device = 'none'" in other
    assert "deepspeed_config.gradient_clipping = 1.0" in note
    assert line_of(tmp_path, "gradient_clipping") in note and "has no effect" in note
    assert "gradient_clipping" not in cfg.config and "fix:" in note
    assert any("has no effect" in line for line in describe(cfg))


def test_zero3_init_flag_with_a_json_that_names_no_stage_is_reported(tmp_path: Path) -> None:
    # The JSON's stage is DeepSpeed's default, 0 (building the config raised a TypeError).
    s = settings_for(tmp_path, {"deepspeed_config": {"zero3_init_flag": True}}, {"fp16": {}})
    (note,) = build(s).notes
    assert "deepspeed_config.zero3_init_flag = True" in note and "gives stage 0)" in note


def test_batch_sizes_the_json_fixes_must_fit_the_dataloader(tmp_path: Path) -> None:
    s = settings_for(tmp_path, {}, {"train_micro_batch_size_per_gpu": 16})
    with pytest.raises(ConfigError) as info:
        finished(build(s), micro=4)
    text = str(info.value)
    assert "train_micro_batch_size_per_gpu = 16" in text and str(tmp_path / "ds.json") in text
    assert "dataloader's batch size per process (4)" in text
    s = settings_for(tmp_path, {}, {"train_batch_size": 10})
    with pytest.raises(ConfigError, match=r"train_batch_size = 10.*= 8"):
        finished(build(s), micro=4, world=2)
    with pytest.raises(ConfigError, match="no prepared dataloader"):
        finished(build(settings_for(tmp_path, {}, {})), micro=None)


def test_optimizer_and_scheduler_sections_take_the_dummies_values(tmp_path: Path) -> None:
    ds = {
        "optimizer": {"type": "AdamW", "params": {"lr": AUTO, "weight_decay": AUTO}},
        "scheduler": {
            "type": "WarmupDecayLR",
            "params": {"warmup_num_steps": AUTO, "total_num_steps": AUTO, "warmup_max_lr": AUTO},
        },
    }
    cfg = build(settings_for(tmp_path, {}, ds))
    params = [torch.nn.Parameter(torch.zeros(2))]
    opt = DummyOptim(params, lr=0.3, weight_decay=0.1)
    final = finished(cfg, optimizer=opt, scheduler=DummyScheduler(opt, 100, 10))
    assert final["optimizer"]["params"] == {"lr": 0.3, "weight_decay": 0.1, "torch_adam": True}
    assert final["scheduler"]["params"] == {
        "warmup_num_steps": 10, "total_num_steps": 100, "warmup_max_lr": 0.3
    }  # fmt: skip
    torch_opt = torch.optim.SGD(params, lr=0.1)
    with pytest.raises(ConfigError, match=r"defines the optimizer \(AdamW\).*also got a SGD"):
        finished(cfg, optimizer=torch_opt, scheduler=DummyScheduler(opt, 100, 10))
    with pytest.raises(ConfigError, match="defines no optimizer"):
        finished(build(settings_for(tmp_path, {}, {})), optimizer=opt)
    with pytest.raises(ConfigError, match=r'leaves "auto" at scheduler.params.total_num_steps'):
        finished(cfg, optimizer=opt, scheduler=DummyScheduler(opt, None, 10))


def test_dummy_objects_under_another_backend_are_refused() -> None:
    from overdrive.accelerator import Accelerator

    acc = Accelerator(cpu=True)
    with pytest.raises(ConfigError, match="DummyOptim.*backend is single"):
        acc.prepare(DummyOptim([torch.nn.Parameter(torch.zeros(1))]))


def test_other_multi_machine_launchers_are_refused(tmp_path: Path) -> None:
    data = {
        "num_machines": 2,
        "main_process_ip": "10.0.0.1",
        "deepspeed_config": {"deepspeed_multinode_launcher": "pdsh", "deepspeed_hostfile": "h"},
    }
    with pytest.raises(ConfigError, match="pdsh.*not available"):
        build(settings_for(tmp_path, data))
    data["num_machines"] = 1
    notes = build(settings_for(tmp_path, data)).notes
    assert len(notes) == 2 and all("no hostfile is read" in n for n in notes)


def test_a_broken_json_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "ds.json").write_text('{"zero_optimization": {"stage": 2,}}')
    path = tmp_path / "cfg.yaml"
    path.write_text(
        f"distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: {tmp_path}/ds.json\n"
    )
    with pytest.raises(ConfigError, match=r"ds.json \(file .*cfg.yaml:3\) is not valid JSON"):
        build(load_settings(config_file=path, environ={}))


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "overdrive", *args],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )


def test_config_show_prints_the_final_deepspeed_config(tmp_path: Path) -> None:
    settings_for(tmp_path, {"deepspeed_config": {"zero_stage": 2}}, {"zero_optimization": {
        "stage": AUTO}, "train_micro_batch_size_per_gpu": AUTO})  # fmt: skip
    done = _cli("config", "show", "--config_file", str(tmp_path / "cfg.yaml"))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"DeepSpeed config (from the DeepSpeed config file {tmp_path / 'ds.json'}" in out
    assert '"stage": 2' in out and "zero_optimization.stage" in out
    assert line_of(tmp_path, "zero_stage") in out
    assert "filled when accelerator.prepare() runs" in out


def test_a_conflicting_json_stops_the_launch_within_seconds(tmp_path: Path) -> None:
    settings_for(tmp_path, {"deepspeed_config": {"zero_stage": 1}}, {"zero_optimization": {
        "stage": 3}})  # fmt: skip
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('a worker started')\n")
    start = time.monotonic()
    done = _cli("launch", "--cpu", "--num_processes", "2", "--config_file",
                str(tmp_path / "cfg.yaml"), str(script))  # fmt: skip
    assert time.monotonic() - start < 60  # a generous bound: it stops before any worker
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "zero_optimization.stage = 3" in done.stderr and "ds.json" in done.stderr
    assert "a worker started" not in done.stderr + done.stdout


def test_env_reports_deepspeed_and_its_compiled_ops() -> None:
    import importlib.metadata

    pytest.importorskip("deepspeed")
    deepspeed_version = importlib.metadata.version("deepspeed")
    done = _cli("env")
    assert done.returncode == 0, done.stderr
    assert f"DeepSpeed: {deepspeed_version} (accelerator: cpu)" in done.stdout
    assert "ops compiled at install:" in done.stdout
    assert "ops compiled on first use (" in done.stdout


def test_cpu_workers_get_deepspeeds_cpu_accelerator(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("")
    done = _cli("launch", "--dry_run", "--cpu", "--num_processes", "2", "--use_deepspeed",
                str(script))  # fmt: skip
    assert done.returncode == 0, done.stderr
    workers = [line for line in done.stdout.splitlines() if "LOCAL_RANK=" in line]
    assert len(workers) == 2 and all("DS_ACCELERATOR=cpu" in line for line in workers)


def test_clip_grad_norm_with_another_max_norm_than_deepspeeds_is_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """As in Hugging Face Accelerate, the engine clips by gradient_clipping whatever max_norm
    says; overdrive says so once and refuses nothing (max_grad_norm=0 asks for inf)."""

    from overdrive.strategies.deepspeed import DeepSpeedStrategy

    cfg = build(settings_for(tmp_path, {"deepspeed_config": {"gradient_clipping": 1.0}}))
    strategy = DeepSpeedStrategy(torch.device("cpu"), cfg)
    strategy.engine = object()  # type: ignore[assignment]  # no engine call inside a window
    strategy._boundary_pending = False  # the last backward told the engine: inside a window
    params = [torch.nn.Parameter(torch.zeros(2))]
    for max_norm in (0.5, 0.5, math.inf):
        assert math.isnan(float(strategy.clip_grad_norm_(params, max_norm, window=None)))
    text = caplog.text
    assert text.count("clip_grad_norm_(max_norm=0.5") == 1
    assert "gradient_clipping = 1.0" in text and line_of(tmp_path, "gradient_clipping") in text


def test_a_config_dict_in_code_is_checked_when_the_accelerator_is_made() -> None:
    from overdrive.accelerator import Accelerator
    from overdrive.arguments.plugins import DeepSpeedPlugin
    from overdrive.utils import DummyOptim as PublicDummyOptim

    assert PublicDummyOptim is DummyOptim  # where Hugging Face Accelerate's users import it
    plugin = DeepSpeedPlugin(zero_stage=2, hf_ds_config={"zero_optimization": {"stage": 3}})
    try:
        with pytest.raises(ConfigError) as info:
            Accelerator(cpu=True, deepspeed_plugin=plugin)
    finally:  # the refused Accelerator's process state had made a (one-process) group
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    text = str(info.value)
    assert "the DeepSpeed config dict given in code" in text
    assert "zero_optimization.stage = 3" in text and "deepspeed_config.zero_stage = 2" in text
    assert "code Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=...))" in text


def test_zero3_bucket_sizes_written_auto_come_from_the_models_hidden_size(tmp_path: Path) -> None:
    zero = {
        "stage": 3,
        "reduce_bucket_size": AUTO,
        "stage3_prefetch_bucket_size": AUTO,
        "stage3_param_persistence_threshold": AUTO,
    }
    cfg = build(settings_for(tmp_path, {}, {"zero_optimization": zero}))

    class Model(torch.nn.Module):
        config = type("Config", (), {"hidden_size": 64})()

    out = finish(
        cfg, micro_batch=4, micro_source="loader", world_size=2, optimizer=None,
        scheduler=None, on_cpu=True, model=Model(),
    )  # fmt: skip
    assert out["zero_optimization"]["reduce_bucket_size"] == 64 * 64
    assert out["zero_optimization"]["stage3_prefetch_bucket_size"] == int(0.9 * 64 * 64)
    assert out["zero_optimization"]["stage3_param_persistence_threshold"] == 640
    assert "hidden size 64" in cfg.sources["zero_optimization.reduce_bucket_size"]
    with pytest.raises(ConfigError, match="reduce_bucket_size"):  # no hidden size: still named
        finished(build(settings_for(tmp_path, {}, {"zero_optimization": zero})))


def test_a_caller_that_accumulates_itself_keeps_the_jsons_window(tmp_path: Path) -> None:
    """transformers' Trainer passes GradientAccumulationPlugin(num_steps=1) and a JSON whose
    "auto" it filled with its own steps: the engine gets the JSON's window, overdrive divides
    nothing (Trainer does). Anyone else gets the conflict named."""
    s = load_settings(code={"gradient_accumulation_steps": 1, "use_deepspeed": True}, environ={})
    given = {"gradient_accumulation_steps": 4, "zero_optimization": {"stage": 2}}
    cfg = build(s, code_config=given, caller_accumulates=True)
    assert cfg.caller_accumulates and cfg.gradient_accumulation_steps == 4
    with pytest.raises(ConfigError, match="gradient_accumulation_steps"):
        build(s, code_config=given)
