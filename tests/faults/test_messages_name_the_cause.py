"""Refusals that name the real cause, and a fix that is not what the user already did: a
config path that is a symlink loop or a directory, ``as_accelerate`` asked for after a real
accelerate was imported, a checkpoint lacking a weight the model holds empty, and the TPU
keys that cannot take effect."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from overdrive.big_modeling import init_empty_weights, load_checkpoint_and_dispatch
from overdrive.config import load_settings
from overdrive.config.inert import no_effect_notes
from overdrive.errors import ConfigError
from overdrive.setup.effective_settings import summary
from tests.faults.config_cli import assert_clean_refusal, overdrive
from tests.helpers.dist import clean_env


@pytest.mark.parametrize("kind", ["loop", "directory"])
def test_a_config_path_that_is_no_file_is_named_for_what_it_is(tmp_path: Path, kind: str) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('ran')\n")
    config = tmp_path / "config.yaml"
    if kind == "loop":
        os.symlink(tmp_path / "other.yaml", config)
        os.symlink(config, tmp_path / "other.yaml")
        said = "is a symbolic link in a loop"
    else:
        config.mkdir()
        said = "is a directory, not a file"
    err = assert_clean_refusal(overdrive("launch", "--cpu", "--config_file", config, script))
    assert f"config file {config} {said}" in err, err
    assert "does not exist" not in err and "create it" not in err, err


def test_as_accelerate_after_a_real_accelerate_was_imported_names_the_flag_and_a_new_fix(
    tmp_path: Path,
) -> None:
    site = tmp_path / "site"
    (site / "accelerate").mkdir(parents=True)
    (site / "accelerate" / "__init__.py").write_text('__version__ = "9.9.9"\n')
    info = site / "accelerate-9.9.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: accelerate\nVersion: 9.9.9\n")
    (site / "sitecustomize.py").write_text("import accelerate\n")  # imported before any script
    script = tmp_path / "train.py"
    script.write_text("print('ran')\n")
    done = subprocess.run(
        [sys.executable, "-m", "overdrive.run", "--as_accelerate", str(script)],
        capture_output=True,
        text=True,
        env=clean_env({"PYTHONPATH": str(site)}),
        timeout=120,
    )
    assert done.returncode == 2 and "ran" not in done.stdout, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    assert "as_accelerate (from flag --as_accelerate)" in done.stderr, done.stderr
    assert "OVERDRIVE_AS_ACCELERATE=1" not in done.stderr, done.stderr
    fix = done.stderr.split("fix: ", 1)[1]
    assert "python -m overdrive.run" not in fix.replace("before python -m overdrive.run", ""), fix
    assert "sitecustomize" in fix, fix


def test_a_weight_the_checkpoint_lacks_and_the_model_holds_empty_is_named(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    weights = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4)).state_dict()
    del weights["1.bias"]
    save_file(weights, str(tmp_path / "model.safetensors"))
    with init_empty_weights():
        model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    # Accelerate and overdrive before: loaded, then "Cannot copy out of meta tensor", unnamed.
    with pytest.raises(ConfigError, match=r"holds no value for 1\.bias of Sequential") as caught:
        load_checkpoint_and_dispatch(
            model, tmp_path / "model.safetensors", device_map={"0": "cpu", "1": "cpu"}, strict=False
        )
    assert "fix: load a checkpoint that holds every weight" in str(caught.value)
    whole = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))  # real weights: the gap keeps its own
    kept = whole[1].bias.detach().clone()
    load_checkpoint_and_dispatch(whole, tmp_path / "model.safetensors", strict=False)
    assert torch.equal(whole[1].bias, kept)


def test_tpu_name_and_zone_are_named_as_unable_to_take_effect_like_the_other_tpu_keys(
    tmp_path: Path,
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "tpu_name: pod\ntpu_zone: zone-a\ntpu_use_sudo: true\nmixed_precision: bf16\n"
    )
    settings = load_settings(config_file=config, environ={})
    line = summary(settings) or ""
    assert "mixed_precision=bf16" in line, line
    assert not any(f"{key}=" in line for key in ("tpu_name", "tpu_zone", "tpu_use_sudo")), line
    notes = "\n".join(no_effect_notes(settings))
    for key in ("tpu_name", "tpu_zone", "tpu_use_sudo"):
        assert f"`{key}`" in notes and "cannot take effect" in notes, notes
