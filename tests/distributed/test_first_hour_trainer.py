"""Issue 31: transformers' Trainer under an FSDP2 config with ``SHARDED_STATE_DICT`` (its
``save_model()`` then writes no weights): the first checkpoint warns with the one command that
gets them, and that command alone makes a folder ``from_pretrained`` loads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.dist import assert_ok, clean_env, run_launch

transformers = pytest.importorskip("transformers")

SCRIPT = Path(__file__).parent / "scripts" / "trainer_case.py"
FSDP2_SHARDED = """\
distributed_type: FSDP
num_processes: 2
fsdp_config:
  fsdp_version: 2
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer
  fsdp_state_dict_type: SHARDED_STATE_DICT
"""


@pytest.mark.distributed
def test_sharded_trainer_checkpoint_warns_and_merges_into_a_loadable_folder(
    tmp_path: Path,
) -> None:
    config = tmp_path / "fsdp2.yaml"
    config.write_text(FSDP2_SHARDED)
    spec = {"out": str(tmp_path / "r.json"), "output_dir": str(tmp_path / "run")}
    spec.update({"samples": 24, "max_steps": 4, "save_steps": 4, "batch": 2})
    done = run_launch(
        SCRIPT, nprocs=2, args=[json.dumps(spec)], launch_args=["--config_file", str(config)],
        timeout=600,
    )  # fmt: skip
    assert_ok(done)
    folder = tmp_path / "run" / "checkpoint-4" / "pytorch_model_fsdp_0"
    said = "overdrive: warning: fsdp_state_dict_type is SHARDED_STATE_DICT"
    warned = [line for line in done.stderr.splitlines() if said in line]
    assert len(warned) == 1, done.stderr[-3000:]
    assert f"(file {config}:7)" in warned[0]
    command = f"overdrive merge-weights {folder} {folder.parent}-merged"
    assert f"`{command}`" in warned[0]
    merged = subprocess.run(
        [sys.executable, "-m", *command.split()],  # the command as the warning writes it
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert merged.returncode == 0, merged.stderr
    loaded = transformers.LlamaForCausalLM.from_pretrained(f"{folder.parent}-merged")
    trained = json.loads(Path(spec["out"]).read_text())["weights"]
    sums = {k: v.double().sum().item() for k, v in loaded.state_dict().items()}
    assert sums.keys() == trained.keys()
    assert all(sums[k] == trained[k] for k in trained)
