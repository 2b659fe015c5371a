"""Hugging Face Accelerate's ``accelerate.commands.*`` and ``accelerate.utils.launch`` functions,
answered by overdrive's own launch path and config files."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
import yaml

from overdrive.commands import env as env_cmd
from overdrive.commands.config.config_args import (
    ClusterConfig,
    SageMakerConfig,
    load_config_from_file,
)
from overdrive.commands.estimate import add_timm_hub_prefix, estimate_command_parser, gather_data
from overdrive.commands.launch import (
    _validate_launch_command,
    launch_command,
    launch_command_parser,
)
from overdrive.commands.to_fsdp2 import (
    convert_config_to_fsdp2,
    to_fsdp2_command,
    to_fsdp2_command_parser,
)
from overdrive.commands.tpu import tpu_command_launcher, tpu_command_parser
from overdrive.config.types import DistributedType
from overdrive.utils.launch import (
    _convert_nargs_to_dict,
    prepare_multi_gpu_env,
    prepare_simple_launcher_cmd_env,
)


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    for name in list(os.environ):
        if name.startswith(("ACCELERATE_", "OVERDRIVE_", "KMP_")):
            monkeypatch.delenv(name)


def test_parser_takes_both_spellings_lists_one_and_types_numbers() -> None:
    parser = launch_command_parser()
    dashed = parser.parse_args(["--multi-gpu", "--num-processes", "4", "--use-fsdp", "t.py", "-x"])
    snake = parser.parse_args(["--multi_gpu", "--num_processes", "4", "--use_fsdp", "t.py", "-x"])
    assert vars(dashed) == vars(snake)
    assert snake.num_processes == 4 and snake.multi_gpu and snake.use_fsdp
    assert snake.training_script == "t.py" and snake.training_script_args == ["-x"]
    help_text = parser.format_help()
    assert "--num_processes" in help_text and "--fsdp_version" in help_text
    assert "--fsdp-version" not in help_text and "--use-fsdp" not in help_text


def test_validate_fills_args_from_the_config_file_and_keeps_provenance(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("debug: true\nmixed_precision: bf16\nnum_processes: 2\n")
    parser = launch_command_parser()
    args = parser.parse_args(["--config_file", str(config), "--num_processes", "3", "t.py"])
    assert args.debug is False
    args, settings, precision_from_file = _validate_launch_command(args)
    assert args.debug is True and args.mixed_precision == "bf16" and args.num_processes == 3
    assert precision_from_file is True
    assert settings.source("num_processes").kind == "flag"
    assert settings.source("debug").kind == "file"


def test_simple_launcher_env_is_the_workers_and_pins_threads_only_for_cpu() -> None:
    parser = launch_command_parser()
    args, _, _ = _validate_launch_command(parser.parse_args(["--cpu", "t.py", "--lr", "1"]))
    command, env = prepare_simple_launcher_cmd_env(args)
    assert command[-3:] == ["t.py", "--lr", "1"] and command[0] == sys.executable
    assert env["KMP_AFFINITY"] == "granularity=fine,compact,1,0" and env["KMP_BLOCKTIME"] == "1"
    assert "OVERDRIVE_SETTINGS" in env or any("SETTINGS" in k for k in env)
    args, _, _ = _validate_launch_command(parser.parse_args(["t.py"]))
    _, env = prepare_simple_launcher_cmd_env(args)
    assert "KMP_AFFINITY" not in env and "KMP_BLOCKTIME" not in env


def test_no_python_is_refused_with_the_reason() -> None:
    args = launch_command_parser().parse_args(["--no_python", "t.py"])
    with pytest.raises(ValueError, match="starts every worker with Python"):
        prepare_simple_launcher_cmd_env(args)


def test_multi_process_env_picks_a_free_port_for_port_zero() -> None:
    args = argparse.Namespace(num_processes=2, main_process_port=0, cpu=True)
    env = prepare_multi_gpu_env(args)
    assert args.master_port.isdigit() and args.master_port != "0"
    assert env["MASTER_PORT"] == args.master_port and env["WORLD_SIZE"] == "2"


def test_script_arguments_become_typed_hyperparameters() -> None:
    converted = _convert_nargs_to_dict(["--name", "bert", "--do", "False", "--n", "3", "--lr=5e-5"])
    assert converted == {"name": "bert", "do": False, "n": 3, "lr": 5e-5}
    with pytest.raises(ValueError, match="--do_train has no value"):
        _convert_nargs_to_dict(["--do_train", "--epochs", "3"])


def test_launch_command_runs_the_script_and_raises_on_failure(tmp_path: Path) -> None:
    marker = tmp_path / "ran.txt"
    good = tmp_path / "good.py"
    good.write_text(f"open({str(marker)!r}, 'w').write('ok')\n")
    launch_command(launch_command_parser().parse_args(["-q", "--num_processes", "1", str(good)]))
    assert marker.read_text() == "ok"
    bad = tmp_path / "bad.py"
    bad.write_text("raise SystemExit(3)\n")
    with pytest.raises(subprocess.CalledProcessError) as caught:
        launch_command(launch_command_parser().parse_args(["-q", "--num_processes", "1", str(bad)]))
    # the script's own exit status, as Hugging Face Accelerate's one-process launcher reports
    assert caught.value.returncode == 3
    assert caught.value.cmd == [str(bad)]


def test_config_dataclasses_round_trip_and_refuse_unknown_keys(tmp_path: Path) -> None:
    config = ClusterConfig(
        compute_environment="LOCAL_MACHINE",
        distributed_type="MULTI_GPU",
        mixed_precision="bf16",
        use_cpu=False,
        debug=False,
        num_processes=4,
        fsdp_config={"fsdp_version": 2},
    )
    assert config.distributed_type is DistributedType.MULTI_GPU
    path = tmp_path / "c.yaml"
    config.to_yaml_file(str(path))
    assert yaml.safe_load(path.read_text())["distributed_type"] == "MULTI_GPU"
    loaded = load_config_from_file(str(path))
    assert isinstance(loaded, ClusterConfig) and loaded.num_processes == 4
    assert loaded.fsdp_config == {"fsdp_version": 2}
    path.write_text("num_processes: 2\nnot_a_key: 1\nalso_bad: 2\n")
    with pytest.raises(ValueError, match="unknown keys \\('also_bad', 'not_a_key'\\)"):
        load_config_from_file(str(path))
    sagemaker = tmp_path / "s.json"
    sagemaker.write_text(
        json.dumps(
            {
                "compute_environment": "AMAZON_SAGEMAKER",
                "ec2_instance_type": "ml.p3.2xlarge",
                "iam_role_name": "role",
            }
        )
    )
    assert isinstance(load_config_from_file(str(sagemaker)), SageMakerConfig)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_config_from_file(str(tmp_path / "missing.yaml"))


def test_to_fsdp2_converts_drops_and_writes(tmp_path: Path) -> None:
    fsdp1 = {
        "fsdp_config": {
            "fsdp_sharding_strategy": "SHARD_GRAD_OP",
            "fsdp_use_orig_params": True,
            "fsdp_offload_params": False,
            "custom": 1,
        }
    }
    out = convert_config_to_fsdp2(json.loads(json.dumps(fsdp1)))["fsdp_config"]
    assert out == {"fsdp_reshard_after_forward": False, "fsdp_offload_params": False,
                   "custom": 1, "fsdp_version": 2}  # fmt: skip
    source = tmp_path / "fsdp1.yaml"
    source.write_text(yaml.safe_dump(fsdp1))
    target = tmp_path / "fsdp2.yaml"
    parser = to_fsdp2_command_parser()
    to_fsdp2_command(
        parser.parse_args(["--config_file", str(source), "--output_file", str(target)])
    )
    assert yaml.safe_load(target.read_text())["fsdp_config"]["fsdp_version"] == 2
    with pytest.raises(FileExistsError):
        to_fsdp2_command(
            parser.parse_args(["--config_file", str(source), "--output_file", str(target)])
        )
    with pytest.raises(ValueError, match="--output_file must be provided"):
        to_fsdp2_command(parser.parse_args(["--config_file", str(source)]))


def test_tpu_config_builds_one_gcloud_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "tpu.yaml"
    config.write_text("tpu_name: pod\ntpu_zone: zone-a\ncommands: [echo one, echo two]\n")
    args = tpu_command_parser().parse_args(
        ["--config_file", str(config), "--install_accelerate", "--debug"]
    )
    tpu_command_launcher(args)
    printed = capsys.readouterr().out
    assert printed.strip() == (
        "Running gcloud compute tpus tpu-vm ssh pod --zone zone-a --command "
        "cd /usr/share; pip install accelerate -U; echo one; echo two --worker all"
    )
    with pytest.raises(ValueError, match="--tpu_name and --tpu_zone"):
        tpu_command_launcher(tpu_command_parser().parse_args(["--command", "ls", "--debug"]))


def test_env_command_reports_where_each_command_is(capsys: pytest.CaptureFixture[str]) -> None:
    with mock.patch("overdrive.commands.env.which", return_value=None):
        info = env_cmd.env_command(env_cmd.env_command_parser().parse_args([]))
    assert info["`accelerate` bash location"] == "Not found"
    assert info["`overdrive` bash location"] == "Not found"
    assert "torch" in capsys.readouterr().out


def test_estimate_sizes_match_the_model(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=4,
    )  # fmt: skip
    config.save_pretrained(tmp_path)
    model = transformers.LlamaForCausalLM(config)
    total = sum(p.numel() for p in model.parameters()) * 4
    layer = sum(p.numel() for p in model.model.layers[0].parameters()) * 4
    embedding = model.model.embed_tokens.weight.numel() * 4
    args = estimate_command_parser().parse_args([str(tmp_path), "--dtypes", "float32", "int8"])
    (fp32, largest, size, usage), (int8, largest8, size8, _) = gather_data(args)
    assert (fp32, int8) == ("float32", "int8")
    assert size == total and size8 == total / 4
    assert largest == max(layer, embedding) and largest8 == largest / 4
    assert max(usage.values()) == total * 4


def test_timm_hub_prefix() -> None:
    assert add_timm_hub_prefix("timm/resnet50.a1_in1k") == "hf-hub:timm/resnet50.a1_in1k"
    assert add_timm_hub_prefix("resnet50") == "resnet50"
    assert add_timm_hub_prefix("local-dir:/m") == "local-dir:/m"
