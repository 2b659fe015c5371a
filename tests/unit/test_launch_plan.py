"""LaunchPlan decisions, ports and suggest_command: pure, one process."""

from __future__ import annotations

import shlex
import socket
from pathlib import Path
from typing import Any

import pytest

from overdrive.config import load_settings
from overdrive.errors import LaunchError
from overdrive.launch import build_plan, suggest_command
from overdrive.launch.cluster import scheduler_hint
from overdrive.launch.describe import banner, settings_origin
from overdrive.launch.ports import port_is_free, settle_port


def settings(tmp_path: Path, **flags: Any):
    return load_settings(flags=flags, environ={"XDG_CACHE_HOME": str(tmp_path)})


def test_cpu_defaults_to_one_process_and_gloo(tmp_path: Path) -> None:
    plan = build_plan(settings(tmp_path), "train.py", gpu_count=0, environ={})
    assert (plan.nproc_per_node, plan.world_size, plan.device, plan.backend) == (
        1,
        1,
        "cpu",
        "gloo",
    )
    assert plan.main_addr == "127.0.0.1" and plan.main_port == 29500
    assert plan.omp_num_threads is None  # one process keeps every core


def test_total_processes_split_over_machines_with_ranks(tmp_path: Path) -> None:
    s = settings(
        tmp_path,
        use_cpu=True,
        num_processes=4,
        num_machines=2,
        machine_rank=1,
        main_process_ip="10.0.0.1",
    )
    plan = build_plan(s, "train.py", environ={}, cpu_count=8)
    assert plan.nproc_per_node == 2 and plan.world_size == 4
    env = plan.rank_env(1)
    assert env["RANK"] == "3" and env["GROUP_RANK"] == "1" and env["MASTER_ADDR"] == "10.0.0.1"
    assert plan.omp_num_threads == 4  # 8 cores over 2 local processes


def test_gpus_one_process_each_by_default(tmp_path: Path) -> None:
    plan = build_plan(settings(tmp_path), "train.py", gpu_count=4, environ={})
    assert (plan.nproc_per_node, plan.device, plan.backend) == (4, "cuda", "nccl")
    assert plan.cuda_visible_devices is None


def test_gpu_ids_become_cuda_visible_devices_through_parent_mask(tmp_path: Path) -> None:
    plan = build_plan(settings(tmp_path, gpu_ids="1,3"), "t.py", gpu_count=4, environ={})
    assert plan.cuda_visible_devices == "1,3" and plan.nproc_per_node == 2
    masked = build_plan(
        settings(tmp_path, gpu_ids="0,2"),
        "t.py",
        gpu_count=4,
        environ={"CUDA_VISIBLE_DEVICES": "4,5,6,7"},
    )
    assert masked.cuda_visible_devices == "4,6"
    assert masked.shared_env()["CUDA_VISIBLE_DEVICES"] == "4,6"


def test_gpu_errors_name_the_setting_and_fix(tmp_path: Path) -> None:
    with pytest.raises(LaunchError, match=r"gpu_ids = '5' \(flag --gpu_ids\) asks for GPU 5"):
        build_plan(settings(tmp_path, gpu_ids="5"), "t.py", gpu_count=2, environ={})
    with pytest.raises(LaunchError, match=r"(?s)flag --num_processes\) needs 4 GPU.*--cpu"):
        build_plan(settings(tmp_path, num_processes=4), "t.py", gpu_count=2, environ={})
    with pytest.raises(LaunchError, match=r"(?s)MULTI_GPU \(flag --distributed_type\).*--cpu"):
        build_plan(settings(tmp_path, distributed_type="MULTI_GPU"), "t.py", environ={})


def test_cpu_flag_wins_over_gpus(tmp_path: Path) -> None:
    plan = build_plan(settings(tmp_path, use_cpu=True, num_processes=3), "t.py", gpu_count=8)
    assert plan.device == "cpu" and plan.nproc_per_node == 3


def test_cpu_workers_are_told_they_run_on_the_cpu(tmp_path: Path) -> None:
    # an installed Hugging Face Accelerate forms the launched world on CPUs only when told so
    no_gpus = build_plan(settings(tmp_path, num_processes=2), "t.py", gpu_count=0, environ={})
    assert no_gpus.shared_env()["ACCELERATE_USE_CPU"] == "true"
    gpus = build_plan(settings(tmp_path, num_processes=2), "t.py", gpu_count=2, environ={})
    assert "ACCELERATE_USE_CPU" not in gpus.shared_env()


def test_worker_command_and_shell_line(tmp_path: Path) -> None:
    s = settings(tmp_path, use_cpu=True, num_processes=2)
    module = build_plan(s, "pkg.train", ["--x", "a b"], is_module=True, environ={})
    assert module.worker_command()[-5:] == [
        "overdrive.launch.bootstrap",
        "-m",
        "pkg.train",
        "--x",
        "a b",
    ]
    line = build_plan(s, "t.py", ["a b"], environ={}).shell_line(1)
    words = shlex.split(line.replace("$OVERDRIVE_SETTINGS", "X"))
    assert "RANK=1" in words and "LOCAL_WORLD_SIZE=2" in words and words[-1] == "a b"


def test_ports_move_on_one_machine_and_fail_on_several(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert not port_is_free(port)
        one = build_plan(settings(tmp_path, main_process_port=port), "t.py", environ={})
        moved = settle_port(one)
        assert moved.main_port != port and port_is_free(moved.main_port)
        assert f"main_process_port {port} (flag --main_process_port) is in use" in moved.port_note
        two = settings(
            tmp_path,
            main_process_port=port,
            num_machines=2,
            num_processes=2,
            main_process_ip="127.0.0.1",
        )
        with pytest.raises(LaunchError, match="(?s)already in use.*--main_process_port"):
            settle_port(build_plan(two, "t.py", environ={}))
        other = settings(
            tmp_path,
            main_process_port=port,
            num_machines=2,
            machine_rank=1,
            main_process_ip="127.0.0.1",
        )
        remote = build_plan(other, "t.py", environ={})
        assert settle_port(remote) is remote  # only the main machine can check its port


def test_bad_launcher_options_are_errors(tmp_path: Path) -> None:
    with pytest.raises(LaunchError, match="max_restarts"):
        build_plan(settings(tmp_path), "t.py", max_restarts=-1)
    with pytest.raises(LaunchError, match="no script"):
        build_plan(settings(tmp_path), "")


def test_suggest_command_quotes_and_names_processes(tmp_path: Path) -> None:
    cfg = tmp_path / "my cfg.yaml"
    cfg.write_text("num_processes: 4\nuse_cpu: true\n")
    s = load_settings(config_file=cfg, environ={"XDG_CACHE_HOME": str(tmp_path)})
    text = suggest_command(s, ["train.py", "--name", "a b"], environ={})
    assert shlex.split(text) == [
        "overdrive", "launch", "--config_file", str(cfg), "--cpu",
        "--num_processes", "4", "train.py", "--name", "a b",
    ]  # fmt: skip


def test_banner_and_origin(tmp_path: Path) -> None:
    s = load_settings(
        flags={"num_processes": 2, "use_cpu": True},
        environ={"XDG_CACHE_HOME": str(tmp_path), "ACCELERATE_MIXED_PRECISION": "bf16"},
    )
    assert settings_origin(s) == "env ACCELERATE_MIXED_PRECISION, flags --num_processes --use_cpu"
    text = banner(build_plan(s, "t.py", environ={}))
    assert "2 process(es) on 1 machine" in text and "mixed precision bf16" in text
    assert settings_origin(settings(tmp_path)) == "defaults only"


def test_scheduler_hint_only_when_slurm_has_more_nodes(tmp_path: Path) -> None:
    s = settings(tmp_path)
    assert scheduler_hint(s, {}) is None
    assert scheduler_hint(s, {"SLURM_NNODES": "1"}) is None
    assert "--num_machines 4" in (scheduler_hint(s, {"SLURM_NNODES": "4"}) or "")
