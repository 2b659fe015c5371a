"""``accelerate.commands.launch``'s parsed namespace reads as Hugging Face Accelerate's:
options not typed hold its parse defaults, which stay no flag (the config file still decides),
and ``prepare_simple_launcher_cmd_env`` gives its mpirun line for a file's mpirun_hostfile."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from unittest.mock import patch

import pytest

from overdrive.commands.launch import _validate_launch_command, launch_command_parser
from overdrive.utils.launch import prepare_simple_launcher_cmd_env
from tests.helpers.env import forget_launcher


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]) -> Iterator[None]:
    forget_launcher(monkeypatch, tmp_path)
    yield


def test_untyped_options_hold_the_parse_defaults_and_the_file_still_decides(
    tmp_path: Path,
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        "debug: true\nnum_processes: 1\ndistributed_type: 'NO'\n"
        "fsdp_config:\n  fsdp_sync_module_states: false\n"
    )
    argv = ["--num-processes", "2", "--config-file", str(config), "t.py"]
    args = launch_command_parser().parse_args(argv)
    assert args.fsdp_sync_module_states == "true" and args.rdzv_backend == "static"
    assert not args.debug
    _validate_launch_command(args)  # merges; only a launch refuses NO with 2 processes
    assert args.debug is True and args.num_processes == 2
    assert args.fsdp_sync_module_states is False  # the file's, over the parse default
    typed = launch_command_parser().parse_args(["--fsdp_sync_module_states", "true", "t.py"])
    typed.config_file = str(config)
    _validate_launch_command(typed)
    assert typed.fsdp_sync_module_states is True  # typed: a flag, over the file


def test_an_mpirun_hostfile_gives_the_mpirun_line(tmp_path: Path) -> None:
    config = tmp_path / "mpi.yaml"
    config.write_text(
        "distributed_type: MULTI_CPU\nuse_cpu: true\nnum_machines: 4\nnum_processes: 16\n"
        "main_process_ip: 127.0.0.1\nmain_process_port: 29500\n"
        "mpirun_config:\n  mpirun_hostfile: /home/user/hostfile\n"
    )
    args = launch_command_parser().parse_args(["t.py", "--x"])
    args.config_file = str(config)
    args, _, _ = _validate_launch_command(args)
    with (
        patch("overdrive.utils.launch.which", return_value=True),
        patch("overdrive.utils.launch.subprocess.check_output", return_value=b"Intel MPI"),
    ):
        command, _ = prepare_simple_launcher_cmd_env(args)
    head = ["mpirun", "-f", "/home/user/hostfile", "-ppn", "4", "-n", "16"]
    assert command == [*head, sys.executable, "t.py", "--x"]
