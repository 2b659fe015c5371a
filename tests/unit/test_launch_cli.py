"""`overdrive launch` argument handling (through --dry_run) and `overdrive env`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from overdrive.cli.env_cmd import OPTIONAL_BACKENDS, backend_versions, report
from overdrive.cli.launch_cmd import flag_settings
from overdrive.cli.main import main


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    for name in list(__import__("os").environ):
        if name.startswith(("ACCELERATE_", "OVERDRIVE_")):
            monkeypatch.delenv(name)


def dry_run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["launch", "--dry_run", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def setting_rows(out: str) -> dict[str, list[str]]:
    rows = [line.split() for line in out.splitlines() if line.startswith("  ") and "=" not in line]
    return {row[0]: row[1:] for row in rows}


def test_both_spellings_and_sources(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "t.py"
    script.write_text("")
    code, out, _ = dry_run(
        capsys, "--num-processes", "3", "--cpu", "--dynamo_backend", "inductor",
        "--zero_stage", "2", str(script),
    )  # fmt: skip
    assert code == 0
    rows = setting_rows(out)
    assert rows["num_processes"] == ["3", "flag", "--num_processes"]
    assert rows["use_cpu"] == ["true", "flag", "--cpu"]
    assert rows["dynamo_config.dynamo_backend"] == ["inductor", "flag", "--dynamo_backend"]
    assert rows["deepspeed_config.zero_stage"][0] == "2"
    assert rows["mixed_precision"] == ["no", "default"]  # unset flags stay unset


def test_script_args_after_the_script_are_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "t.py"
    script.write_text("")
    _, out, _ = dry_run(capsys, "--cpu", "--", str(script), "--cpu", "--", "-q", "a b")
    command = next(line for line in out.splitlines() if "RANK=0" in line)
    assert command.endswith(f"{script} --cpu -- -q 'a b'")
    _, out, _ = dry_run(capsys, "--cpu", "-m", "json.tool", "--sort-keys")
    command = next(line for line in out.splitlines() if "RANK=0" in line)
    assert command.endswith("overdrive.launch.bootstrap -m json.tool --sort-keys")


def test_user_errors_exit_2_with_one_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = dry_run(capsys, "--cpu")
    assert code == 2 and err.startswith("overdrive: error: no script to launch")
    code, _, err = dry_run(capsys, "--cpu", str(tmp_path / "missing.py"))
    assert code == 2 and "does not exist" in err
    script = tmp_path / "t.py"
    script.write_text("")
    code, _, err = dry_run(capsys, "--cpu", "--mixed_precision", "fp12", str(script))
    assert code == 2 and "--mixed_precision" in err and "Traceback" not in err


def test_a_backend_not_built_yet_stops_before_any_worker_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "t.py"
    script.write_text("")
    config = tmp_path / "xla.yaml"
    config.write_text("distributed_type: XLA\n")  # not built
    code = main(
        ["launch", "--cpu", "--num_processes", "2", "--config_file", str(config), str(script)]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "distributed_type XLA" in err and "not available yet" in err
    assert f"file {config}:1" in err
    assert "Traceback" not in err and "RANK" not in err


def test_degrees_that_do_not_compose_stop_before_any_worker_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "t.py"
    script.write_text("")
    monkeypatch.setenv("ACCELERATE_USE_MEGATRON_LM", "true")
    monkeypatch.setenv("ACCELERATE_MEGATRON_LM_TP_DEGREE", "2")
    monkeypatch.setenv("ACCELERATE_MEGATRON_LM_PP_DEGREE", "2")  # pp x tp composes
    monkeypatch.setenv("ACCELERATE_MEGATRON_LM_NUM_MICRO_BATCHES", "2")
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "fp16")  # but not with fp16
    code = main(["launch", "--cpu", "--num_processes", "4", str(script)])
    err = capsys.readouterr().err
    assert code == 2 and "cannot run with pipeline parallelism" in err and "use bf16" in err
    assert "env ACCELERATE_MEGATRON_LM_PP_DEGREE" in err and "env ACCELERATE_MIXED_PRECISION" in err
    assert "Traceback" not in err and "RANK" not in err


def test_fp8_on_cpu_stops_before_any_worker_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "t.py"
    script.write_text("")
    code = main(["launch", "--cpu", "--mixed_precision", "fp8", str(script)])
    err = capsys.readouterr().err
    assert code == 2 and "flag --mixed_precision" in err and "compute capability 8.9" in err
    assert "Traceback" not in err


def test_every_flag_maps_to_one_setting() -> None:
    names = [name for name, _ in flag_settings()]
    assert len(names) == len(set(names))
    assert {"cpu", "num_processes", "zero_stage", "fsdp_sharding_strategy"} <= set(names)
    assert "megatron_lm_tp_degree" in names


def test_env_report_lists_versions_backends_and_config(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("mixed_precision: bf16\n")
    before = {name for name in OPTIONAL_BACKENDS if name in sys.modules}
    backend_versions()
    assert {name for name in OPTIONAL_BACKENDS if name in sys.modules} == before  # none imported
    text = report(str(cfg))  # its DeepSpeed section imports deepspeed on purpose (its ops)
    assert "torch: " in text and "Python: " in text and "GPUs visible: 0" in text
    assert f"config file (given): {cfg}" in text and "mixed_precision: bf16" in text
    assert all(f"  {name}: " in text for name in OPTIONAL_BACKENDS)


def test_env_command_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["env"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("overdrive: ") and "not present; defaults apply" in out


# Issue 3's launch options: (flag, value or None for a switch, setting key, resolved value).
ISSUE_FLAGS = [
    ("num_processes", "4", "num_processes", 4),
    ("num_machines", "2", "num_machines", 2),
    ("machine_rank", "1", "machine_rank", 1),
    ("main_process_ip", "10.0.0.1", "main_process_ip", "10.0.0.1"),
    ("main_process_port", "29555", "main_process_port", 29555),
    ("rdzv_backend", "c10d", "rdzv_backend", "c10d"),
    ("same_network", "no", "same_network", False),
    ("gpu_ids", "0,1", "gpu_ids", "0,1"),
    ("cpu", None, "use_cpu", True),
    ("mixed_precision", "bf16", "mixed_precision", "bf16"),
    ("gradient_accumulation_steps", "8", "gradient_accumulation_steps", 8),
    ("use_deepspeed", None, "use_deepspeed", True),
    ("use_fsdp", None, "use_fsdp", True),
    ("use_megatron_lm", None, "use_megatron_lm", True),
    ("dynamo_backend", "inductor", "dynamo_config.dynamo_backend", "inductor"),
]


@pytest.mark.parametrize("spelling", ["snake", "kebab"])
@pytest.mark.parametrize(("flag", "value", "key", "expected"), ISSUE_FLAGS)
def test_issue_flags_in_both_spellings_resolve_as_flag_sources(
    flag: str, value: str | None, key: str, expected: object, spelling: str
) -> None:
    from overdrive.cli.launch_cmd import _dest
    from overdrive.cli.main import build_parser
    from overdrive.config import load_settings

    typed = "--" + (flag if spelling == "snake" else flag.replace("_", "-"))
    args = build_parser().parse_args(["launch", typed, *([value] if value else []), "x.py"])
    flags = {s.key: getattr(args, _dest(s.key)) for _, s in flag_settings()}
    given = {k: v for k, v in flags.items() if v is not None}
    assert list(given) == [key]
    # A second machine needs the main machine's address (given in code, a separate source).
    context = {"num_machines": 2, "main_process_ip": "10.0.0.1"}
    context = {k: v for k, v in context.items() if k != key and flag != "main_process_ip"}
    settings = load_settings(
        code=context, flags=flags, flag_names={s.key: n for n, s in flag_settings()}
    )
    assert settings[key] == expected
    assert str(settings.source(key)) == f"flag --{flag}"


@pytest.mark.parametrize("spelling", ["--max_restarts", "--max-restarts"])
def test_launcher_options_in_both_spellings(spelling: str) -> None:
    from overdrive.cli.main import build_parser

    monitor = spelling.replace("max", "monitor").replace("restarts", "interval")
    args = build_parser().parse_args(["launch", spelling, "2", monitor, "0.5", "x.py"])
    assert (args.max_restarts, args.monitor_interval, args.command) == (2, 0.5, ["x.py"])


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["launch", "--num_processe", "2", "x.py"],
            "--num_processe (did you mean --num_processes?)",
        ),
        (["test", "--num-processe", "2"], "(did you mean --num-processes?)"),
        (
            ["config", "show", "--jsn"],
            "overdrive config show: error: unrecognized arguments: --jsn",
        ),
        (["launch", "--config-fil", "c.yaml", "x.py"], "did you mean --config-file?"),
    ],
)
def test_unknown_or_abbreviated_options_are_errors_with_a_suggestion(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err and err.count("error:") == 1


def test_a_parallel_layout_that_cannot_factor_stops_before_any_worker_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "t.py"
    script.write_text("")
    argv = ["launch", "--cpu", "--num_processes", "3", "--use_fsdp"]
    argv += ["--fsdp_sharding_strategy", "HYBRID_SHARD"]
    code = main([*argv, "--parallelism_config_dp_shard_size", "2", str(script)])
    err = capsys.readouterr().err
    assert code == 2
    assert "does not fit 3 processes" in err and "flag --parallelism_config_dp_shard_size" in err
    assert "Traceback" not in err
