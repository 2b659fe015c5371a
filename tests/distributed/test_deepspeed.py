"""DeepSpeed ZeRO stages 0-3 on 2 CPU processes (DS_ACCELERATOR=cpu, gloo): the plain loop
trains exactly like one plain process; a DeepSpeed JSON with "auto" values trains like the
equivalent YAML.

Each case launches ``scripts/ds_checks.py`` (see its docstring for what it checks).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from safetensors.torch import load_file

from tests.helpers.deepspeed import DS_ENV
from tests.helpers.dist import assert_ok, result_rows, run_launch

pytest.importorskip("deepspeed")
pytestmark = [pytest.mark.distributed, pytest.mark.deepspeed]

SCRIPT = "ds_checks.py"
MAX_NORM = 0.05


def _yaml(tmp_path: Path, section: dict) -> Path:
    data = {"distributed_type": "DEEPSPEED", "num_processes": 2, "deepspeed_config": section}
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _train(tmp_path: Path, config: Path, name: str, *extra: str) -> dict:
    out = tmp_path / name
    result = run_launch(
        SCRIPT,
        launch_args=["--config_file", str(config)],
        args=["--out", str(out), *extra],
        env=DS_ENV,
    )
    assert_ok(result)
    (row,) = result_rows(result.stdout)
    assert row["type"] == "DEEPSPEED" and row["unwrapped"] == "Net"
    assert row["accumulation"] == 2  # DeepSpeed's value, reported by the accelerator
    assert row["steps"] == 6  # 2 epochs x windows of 2, 2 and 1 micro-batches
    assert row["lr"] == row["ref_lr"]
    if not extra:
        # StepLR(2) advanced once per process per optimizer step (Hugging Face Accelerate's
        # default): 6 steps x 2 processes = 12 advances, 6 halvings
        assert row["lr"] == 1e-2 * 0.5**6
    assert row["max_diff"] < 1e-5 and row["saved_diff"] == 0.0 and row["norm_diff"] < 2e-5
    return row


STAGES = {
    0: {},
    1: {},
    2: {},
    3: {},
    "3-offload": {"offload_optimizer_device": "cpu", "offload_param_device": "cpu"},
}
# CPU Adam (offload) compiles on first use for minutes: `make deepspeed` runs it. ZeRO-1 is
# DeepSpeed's ZeRO-2 optimizer class without gradient partitioning, and overdrive's training
# and checkpoint code never tells the two apart: `make test` keeps stage 2, `make extended`
# runs stage 1.
EXTENDED = {"3-offload": [pytest.mark.slow, pytest.mark.extended], 1: [pytest.mark.extended]}
CASES = [pytest.param(c, marks=EXTENDED[c]) if c in EXTENDED else c for c in STAGES]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_zero_stage_trains_like_one_process(
    tmp_path: Path, case: int | str, request: pytest.FixtureRequest
) -> None:
    stage = int(str(case)[0])
    section = {"zero_stage": stage, "gradient_accumulation_steps": 2}
    section.update({"gradient_clipping": MAX_NORM, **STAGES[case]})
    if "offload_optimizer_device" in section:
        request.getfixturevalue("cpu_adam_built")
    row = _train(tmp_path, _yaml(tmp_path, section), "run")
    assert row["stage"] == stage
    offload = "offload_optimizer_device" in section
    assert row["basic_optimizer"] == ("DeepSpeedCPUAdam" if offload else "AdamW")


# The regional case runs in `make extended` (`make test` keeps its FSDP2 and DDP forms).
@pytest.mark.parametrize(
    "regional",
    [False, pytest.param(True, marks=pytest.mark.extended)],
    ids=["engine", "regional"],
)
def test_dynamo_backend_compiles_under_deepspeed_and_trains_the_same(
    tmp_path: Path, regional: bool
) -> None:
    """DeepSpeed wraps the model itself, so dynamo_config's compile step runs on its engine,
    or (regional) on each repeated block of its model in place (eager: the same numbers as
    one plain process)."""
    section = {"zero_stage": 2, "gradient_accumulation_steps": 2, "gradient_clipping": MAX_NORM}
    config = _yaml(tmp_path, section)
    data = yaml.safe_load(config.read_text())
    data["dynamo_config"] = {
        "dynamo_backend": "EAGER",
        "dynamo_use_regional_compilation": regional,
    }
    config.write_text(yaml.safe_dump(data))
    row = _train(tmp_path, config, "run")
    assert row["unwrapped"] == "Net" and row["compiled"] is not regional
    blocks = ["blocks.0", "blocks.1", "blocks.2"]
    assert (set(blocks) <= set(row["compiled_blocks"])) is regional


@pytest.mark.extended
def test_json_with_auto_values_trains_like_the_yaml(tmp_path: Path) -> None:
    section = {"zero_stage": 2, "gradient_accumulation_steps": 2, "gradient_clipping": MAX_NORM}
    from_yaml = tmp_path / "yaml"
    from_yaml.mkdir()
    _train(from_yaml, _yaml(from_yaml, section), "run")
    ds_json = {
        "train_micro_batch_size_per_gpu": "auto",
        "train_batch_size": "auto",
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto",
        "zero_optimization": {"stage": "auto"},
    }
    (tmp_path / "ds.json").write_text(json.dumps(ds_json))
    with_json = _yaml(tmp_path, {**section, "deepspeed_config_file": str(tmp_path / "ds.json")})
    row = _train(tmp_path, with_json, "run")
    assert row["stage"] == 2
    a = load_file(str(from_yaml / "run" / "model" / "model.safetensors"))
    b = load_file(str(tmp_path / "run" / "model" / "model.safetensors"))
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)  # the same run


def test_json_optimizer_and_scheduler_through_dummies(tmp_path: Path) -> None:
    ds_json = {
        "gradient_clipping": "auto",  # without it the setting is reported as having no effect
        "zero_optimization": {"stage": "auto"},
        "optimizer": {
            "type": "AdamW",
            "params": {"lr": "auto", "weight_decay": "auto", "betas": [0.9, 0.999], "eps": 1e-8},
        },
        "scheduler": {
            "type": "WarmupLR",
            "params": {
                "warmup_min_lr": "auto",
                "warmup_max_lr": "auto",
                "warmup_num_steps": "auto",
                "warmup_type": "linear",
            },
        },
    }
    (tmp_path / "ds.json").write_text(json.dumps(ds_json))
    section = {"zero_stage": 2, "gradient_accumulation_steps": 2, "gradient_clipping": MAX_NORM}
    config = _yaml(tmp_path, {**section, "deepspeed_config_file": str(tmp_path / "ds.json")})
    row = _train(tmp_path, config, "run", "--dummy")
    assert row["stage"] == 2
    assert (row["basic_optimizer"], row["scheduler"]) == ("AdamW", "WarmupLR")  # DeepSpeed's
    assert row["lr"] == 1e-2  # warmed up over 4 of the 6 steps
