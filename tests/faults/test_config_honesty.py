"""Config honesty (issue 13, item 10): what overdrive says about a config is what it does.

`config validate` refuses what `launch` refuses, a section that cannot take effect is
named, syntax errors carry their line, the wizard keeps an existing file, and every value
is attributed to what the user actually typed (`--multi_gpu`, `fsdp_plugin=`, `cpu=`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from overdrive.accelerator import Accelerator
from overdrive.arguments.plugins import (
    DeepSpeedPlugin,
    FullyShardedDataParallelPlugin,
    GradientAccumulationPlugin,
    MegatronLMPlugin,
)
from overdrive.errors import ConfigError
from tests.faults.config_cli import assert_clean_refusal, overdrive
from tests.helpers.env import forget_launcher

# Files `launch` refuses on a machine without GPUs (the tests hide every GPU).
REFUSED_BY_LAUNCH = {
    "deepspeed_pdsh": (
        "distributed_type: DEEPSPEED\nnum_machines: 2\nmain_process_ip: 10.0.0.1\n"
        "deepspeed_config:\n  deepspeed_multinode_launcher: pdsh\n"
    ),
    "megatron_pipeline": "distributed_type: MEGATRON_LM\nmegatron_lm_config:\n  pp_degree: 2\n",
    "xla": "distributed_type: XLA\n",
    "use_megatron_lm_pipeline": "use_megatron_lm: true\nmegatron_lm_config:\n  pp_degree: 2\n",
    "tp_not_dividing_world": (
        "distributed_type: MEGATRON_LM\nnum_processes: 3\nmegatron_lm_config:\n  tp_degree: 2\n"
    ),
    "multi_gpu_without_gpu": "distributed_type: MULTI_GPU\nnum_processes: 2\n",
    "fp8_on_cpu": "use_cpu: true\nmixed_precision: fp8\n",
    "dynamo_mode_without_inductor": (
        "dynamo_config:\n  dynamo_backend: eager\n  dynamo_mode: max-autotune\n"
    ),
}
ACCEPTED_BY_LAUNCH = {
    "cpu_pair": "distributed_type: MULTI_CPU\nnum_processes: 2\nmixed_precision: bf16\n",
    "defaults_plus_one": "gradient_accumulation_steps: 4\n",
    "deepspeed_zero3": "distributed_type: DEEPSPEED\nnum_processes: 2\n"
    "deepspeed_config:\n  zero_stage: 3\n",
    "megatron_tp": "distributed_type: MEGATRON_LM\nnum_processes: 2\nmegatron_lm_config:\n"
    "  tp_degree: 2\n",
}


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text("print('trained')\n")
    return path


@pytest.mark.parametrize("name", sorted(REFUSED_BY_LAUNCH))
def test_validate_refuses_what_launch_refuses(tmp_path: Path, script: Path, name: str) -> None:
    path = tmp_path / f"{name}.yaml"
    path.write_text(REFUSED_BY_LAUNCH[name])
    launched = assert_clean_refusal(overdrive("launch", "--dry_run", "--config_file", path, script))
    validated = assert_clean_refusal(overdrive("config", "validate", "--this_machine", path))
    assert validated == launched  # the same check, the same words
    assert str(path) in validated
    if name != "multi_gpu_without_gpu":  # the others are wrong on any machine
        assert assert_clean_refusal(overdrive("config", "validate", path)) == launched


def test_a_gpu_file_validates_on_a_machine_without_gpus_saying_what_it_lacks(
    tmp_path: Path,
) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text(
        "distributed_type: MULTI_GPU\nnum_processes: 8\ngpu_ids: all\nmixed_precision: bf16\n"
    )
    done = overdrive("config", "validate", path)
    assert done.returncode == 0, done.stderr
    assert "valid" in done.stdout and "on the machine it describes" in done.stdout
    assert "written for 8 GPU(s) per machine; this machine has 0 visible" in done.stdout
    assert f"--this_machine {path}" in done.stdout


@pytest.mark.parametrize("name", sorted(ACCEPTED_BY_LAUNCH))
def test_validate_accepts_what_launch_accepts(tmp_path: Path, script: Path, name: str) -> None:
    path = tmp_path / f"{name}.yaml"
    path.write_text(ACCEPTED_BY_LAUNCH[name])
    launched = overdrive("launch", "--dry_run", "--config_file", path, script)
    validated = overdrive("config", "validate", path)
    assert (launched.returncode, validated.returncode) == (0, 0), launched.stderr
    assert "valid" in validated.stdout


def test_validate_sees_the_environment_launch_sees(tmp_path: Path, script: Path) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text("num_processes: 4\n")
    env = {  # pipeline x tensor parallelism: not built
        "ACCELERATE_USE_MEGATRON_LM": "true",
        "ACCELERATE_MEGATRON_LM_TP_DEGREE": "2",
        "ACCELERATE_MEGATRON_LM_PP_DEGREE": "2",
    }
    launched = assert_clean_refusal(
        overdrive("launch", "--dry_run", "--config_file", path, script, env=env)
    )
    validated = assert_clean_refusal(overdrive("config", "validate", path, env=env))
    assert validated == launched and "env ACCELERATE_MEGATRON_LM_PP_DEGREE" in validated


@pytest.mark.parametrize(
    ("section", "body"),
    [
        ("fsdp_config", "  fsdp_version: 2\n  fsdp_offload_params: true\n"),
        ("megatron_lm_config", "  tp_degree: 2\n"),
        ("deepspeed_config", "  zero_stage: 2\n"),
    ],
)
def test_a_section_that_cannot_take_effect_is_named(
    tmp_path: Path, script: Path, section: str, body: str
) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text(f"distributed_type: MULTI_CPU\nnum_processes: 2\n{section}:\n{body}")
    for command in (
        ["config", "validate", path],
        ["launch", "--dry_run", "--config_file", path, script],
    ):
        done = overdrive(*command)
        assert done.returncode == 0, done.stderr
        warnings = [line for line in done.stderr.splitlines() if "warning:" in line]
        assert len(warnings) == 1, done.stderr
        assert f"{section} cannot take effect" in warnings[0]
        assert "MULTI_CPU" in warnings[0] and f"{path}:1" in warnings[0]
        assert f"{path}:4" in warnings[0]  # the first setting of the section


def test_a_section_used_by_its_backend_is_not_warned_about(tmp_path: Path) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text("distributed_type: MULTI_CPU\nnum_processes: 2\n")
    done = overdrive("config", "validate", path)
    assert done.returncode == 0 and "warning" not in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("num_processes: 2\nmixed_precision: fp16\ngpu_ids: [0, 1\n", 4),
        ("num_processes: 2\n  mixed_precision: fp16\nuse_cpu: true\n", 2),
        ("num_processes: 2\nmixed_precision: 'fp16\n", 3),
        ("num_processes: 2\n\tuse_cpu: true\n", 2),
    ],
)
def test_yaml_syntax_errors_name_their_line(tmp_path: Path, text: str, line: int) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(text)
    message = assert_clean_refusal(overdrive("config", "validate", path))
    assert f"{path}:{line}" in message and "cannot be parsed" in message


def test_json_syntax_errors_name_their_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{\n  "num_processes": 2,\n  "use_cpu": true,\n}\n')
    message = assert_clean_refusal(overdrive("config", "validate", path))
    assert f"{path}:4" in message and "cannot be parsed" in message


def test_wizard_keeps_an_existing_config_without_force(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text("mixed_precision: bf16\n")
    answers = "\n".join(["", "No distributed training", "n", "no"]) + "\n"
    refused = overdrive("config", "--config_file", path, stdin=answers)
    message = assert_clean_refusal(refused)
    assert "already exists" in message and "--force" in message
    assert path.read_text() == "mixed_precision: bf16\n"
    forced = overdrive("config", "--config_file", path, "--force", stdin=answers)
    assert forced.returncode == 0, forced.stderr
    assert "mixed_precision: 'no'" in path.read_text()


def test_multi_gpu_flag_is_reported_as_typed(script: Path) -> None:
    # --cpu rehearses the MULTI_GPU layout on CPU processes; the row names both flags as typed.
    for flags, cpu_flag in (
        (("--multi_gpu", "--cpu"), "flag --cpu"),
        (("--multi-gpu", "--use-cpu"), "flag --use_cpu"),
    ):
        done = overdrive("launch", "--dry_run", *flags, script)
        assert done.returncode == 0, done.stderr
        row = next(
            line for line in done.stdout.splitlines() if line.split()[:1] == ["distributed_type"]
        )
        assert "MULTI_CPU" in row and "flag --multi_gpu" in row and "--distributed_type" not in row
        assert "rehearsed on CPU processes" in row and cpu_flag in row


def test_dry_run_attributes_each_flag_to_the_flag_typed(script: Path) -> None:
    done = overdrive("launch", "--dry_run", "--use_cpu", "--num-processes", "2", script)
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines() if line.startswith("  ")}
    assert rows["use_cpu"].endswith("flag --use_cpu")  # not --cpu, the other flag for it
    assert rows["num_processes"].endswith("flag --num_processes")  # one flag, one name


@pytest.fixture
def no_launcher(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    forget_launcher(monkeypatch, tmp_path / "cache")


def _distributed_type_source(**kwargs: object) -> str:
    """Where the Accelerator says distributed_type came from (its error, if it refuses)."""
    try:
        accelerator = Accelerator(**kwargs)  # type: ignore[arg-type]
    except ConfigError as exc:
        return str(exc)
    return str(accelerator.settings.source("distributed_type"))


@pytest.mark.usefixtures("no_launcher")
@pytest.mark.parametrize(
    ("argument", "plugin"),
    [
        ("deepspeed_plugin", DeepSpeedPlugin(zero_stage=2)),
        ("megatron_lm_plugin", MegatronLMPlugin(tp_degree=1)),
        ("fsdp_plugin", FullyShardedDataParallelPlugin(sharding_strategy="FULL_SHARD")),
    ],
)
def test_plugins_are_reported_as_the_argument_passed(argument: str, plugin: object) -> None:
    text = _distributed_type_source(**{argument: plugin})
    assert f"Accelerator({argument}=" in text, text
    assert "use_deepspeed=" not in text and "use_fsdp=" not in text
    assert "use_megatron_lm=" not in text


@pytest.mark.usefixtures("no_launcher")
def test_code_arguments_are_reported_by_their_own_names() -> None:
    accelerator = Accelerator(cpu=True, dynamo_backend="no", mixed_precision="no")
    sources = accelerator.settings
    assert str(sources.source("use_cpu")) == "code Accelerator(cpu=...)"
    assert str(sources.source("dynamo_config.dynamo_backend")) == (
        "code Accelerator(dynamo_backend=...)"
    )
    accelerator = Accelerator(
        cpu=True, gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=2)
    )
    assert str(accelerator.settings.source("gradient_accumulation_steps")) == (
        "code Accelerator(gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=...))"
    )
