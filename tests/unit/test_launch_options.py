"""Both `launch` parsers come from the one table of options (`overdrive.cli.launch_options`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import pytest

from overdrive.cli.launch_options import launch_options
from overdrive.cli.main import build_parser, main
from overdrive.commands.launch import given_flags, launch_command_parser


def _option_strings(parser: argparse.ArgumentParser) -> set[str]:
    return {o for action in parser._actions for o in action.option_strings}


def _overdrive_launch() -> argparse.ArgumentParser:
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser: argparse.ArgumentParser = commands.choices["launch"]
    return parser


def test_both_parsers_take_the_same_options() -> None:
    ours, face = _option_strings(_overdrive_launch()), _option_strings(launch_command_parser())
    assert ours == face, (sorted(ours - face), sorted(face - ours))


def test_every_declared_spelling_is_taken() -> None:
    declared = {spelling for option in launch_options() for spelling in option.spellings}
    assert declared | {"-h", "--help"} == _option_strings(launch_command_parser())
    assert {"--num_processes", "--num-processes", "--cpu", "--use_cpu", "-m", "-q"} <= declared


def test_the_face_reads_the_table_aliases_and_switch_values() -> None:
    args = launch_command_parser().parse_args(["--use-cpu", "--multi_gpu", "t.py"])
    assert args.cpu is True and args.multi_gpu is True
    flags, names = given_flags(args)
    assert flags == {"use_cpu": True, "distributed_type": "MULTI_GPU"}
    assert names["distributed_type"] == "multi_gpu"
    both = ["--distributed_type", "FSDP", "--multi_gpu", "t.py"]
    flags, names = given_flags(launch_command_parser().parse_args(both))
    assert flags["distributed_type"] == "FSDP" and names["distributed_type"] == "distributed_type"


@pytest.mark.parametrize("make", [launch_command_parser, _overdrive_launch])
def test_quiet_and_verbose_exclude_each_other(
    make: Callable[[], argparse.ArgumentParser],
) -> None:
    parser = make()
    with pytest.raises(SystemExit):
        parser.parse_args(["-q", "-v", "t.py"])


def test_no_python_is_refused_by_overdrive_launch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "t.py"
    script.write_text("")
    assert main(["launch", "--dry_run", "--no_python", str(script)]) == 2
    assert "starts every worker with Python" in capsys.readouterr().err
