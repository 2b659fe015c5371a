"""`overdrive config default|show|validate` as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml


def _cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None):
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "OVERDRIVE_"))}
    base["CUDA_VISIBLE_DEVICES"] = ""
    return subprocess.run(
        [sys.executable, "-m", "overdrive", *args],
        capture_output=True,
        text=True,
        env={**base, **(env or {})},
        cwd=cwd,
        timeout=120,
    )


def test_default_then_show_json_lists_sources(tmp_path: Path) -> None:
    cfg = tmp_path / "cfg.yaml"
    made = _cli("config", "default", "--mixed-precision", "bf16", "--config-file", str(cfg))
    assert made.returncode == 0, made.stderr
    data = yaml.safe_load(cfg.read_text())
    assert data["mixed_precision"] == "bf16" and data["distributed_type"] == "MULTI_CPU"
    shown = _cli(
        "config",
        "show",
        "--json",
        "--config_file",
        str(cfg),
        env={"ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "4"},
    )
    assert shown.returncode == 0, shown.stderr
    payload = json.loads(shown.stdout)
    assert payload["mixed_precision"]["value"] == "bf16"
    assert payload["mixed_precision"]["source"].startswith(f"file {cfg}:")
    assert payload["gradient_accumulation_steps"] == {
        "value": 4,
        "source": "env ACCELERATE_GRADIENT_ACCUMULATION_STEPS",
    }
    assert payload["tpu_zone"]["source"] == "default"


def test_default_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("mixed_precision: fp16\n")
    refused = _cli("config", "default", "--config_file", str(cfg))
    assert refused.returncode == 2 and "--force" in refused.stderr
    assert cfg.read_text() == "mixed_precision: fp16\n"
    forced = _cli("config", "default", "--config_file", str(cfg), "--force")
    assert forced.returncode == 0 and "mixed_precision: 'no'" in cfg.read_text()


def test_show_table_uses_the_default_file(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    (cache / "overdrive").mkdir(parents=True)
    (cache / "overdrive" / "default_config.yaml").write_text("num_processes: 3\n")
    shown = _cli("config", "show", "--changed", env={"XDG_CACHE_HOME": str(cache)})
    assert shown.returncode == 0, shown.stderr
    row = next(line for line in shown.stdout.splitlines() if line.startswith("num_processes"))
    assert row.split()[1] == "3"
    assert row.endswith("default_config.yaml:1")
    assert "rdzv_backend" not in shown.stdout  # --changed hides defaults


def test_validate_good_and_bad_files(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("mixed_precision: fp16\nnum_processes: 2\n")
    ok = _cli("config", "validate", str(good))
    assert ok.returncode == 0 and "valid (2 settings set" in ok.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("num_processes: 2\nmixed_precison: fp16\n")
    failed = _cli("config", "validate", str(bad))
    assert failed.returncode == 2
    assert "Traceback" not in failed.stderr
    assert failed.stderr.startswith("overdrive: error: unknown setting `mixed_precison`")
    assert f"{bad}:2" in failed.stderr and "did you mean `mixed_precision`" in failed.stderr
    missing = _cli("config", "validate", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr


def test_validate_refuses_fsdp_settings_a_worker_would_refuse(tmp_path: Path) -> None:
    """The FSDP policy is built at preflight too: before, this file validated and every
    worker of its launch stopped on the same refusal."""
    cfg = tmp_path / "fsdp.yaml"
    cfg.write_text(
        "distributed_type: FSDP\nnum_processes: 2\nuse_cpu: true\nfsdp_config:\n"
        "  fsdp_version: 1\n  fsdp_state_dict_type: LOCAL_STATE_DICT\n"
    )
    failed = _cli("config", "validate", str(cfg))
    assert failed.returncode == 2 and "Traceback" not in failed.stderr
    assert "fsdp_config.fsdp_state_dict_type LOCAL_STATE_DICT" in failed.stderr
    assert f"{cfg}:6" in failed.stderr and "fix: use SHARDED_STATE_DICT" in failed.stderr


def test_bad_environment_fails_show_cleanly(tmp_path: Path) -> None:
    shown = _cli(
        "config", "show", env={"XDG_CACHE_HOME": str(tmp_path), "ACCELERATE_MIXED_PRECISION": "fp9"}
    )
    assert shown.returncode == 2
    assert "env ACCELERATE_MIXED_PRECISION" in shown.stderr and "Traceback" not in shown.stderr
