"""Context parallelism in one process: the degree, the layout's ``cp`` field and the
refusals the settings rules share (``config validate``, ``launch`` and the workers); the
checks of the model and the batch are test_context_parallel_block.py, the runs
tests/distributed/test_context_parallel.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from overdrive.arguments.plugins import ParallelismConfig
from overdrive.cli.main import main
from overdrive.config import load_settings
from overdrive.errors import ConfigError
from overdrive.parallel.cp_rules import CP_KEY
from overdrive.parallel.layout import layout_from_settings

FSDP2 = {"distributed_type": "FSDP", "fsdp_config.fsdp_version": 2}


def _settings(environ: dict[str, str] | None = None, **code: object):
    return load_settings(code=code, environ=environ or {})


def _cp(cp: int, **more: object):
    return _settings(**{**FSDP2, CP_KEY: cp, **more})


def test_cp_takes_its_processes_and_fsdp_shards_over_the_rest() -> None:
    layout = layout_from_settings(_cp(2), 4)
    assert (layout.dp_shard, layout.cp, layout.dp_replicate) == (2, 2, 1)
    assert layout.mesh_dims() == (("dp_shard", "cp"), (2, 2))
    # cp inside dp_shard: ranks 0,1 split one batch's sequences (dp rank 0), 2,3 the other
    assert [layout.dp_rank(r) for r in range(4)] == [0, 0, 1, 1]
    assert layout.data_ranks() == [0, 2]
    alone = layout_from_settings(_cp(2), 2)
    assert (alone.dp_shard, alone.cp) == (1, 2) and alone.data_ranks() == [0]


def test_cp_from_the_environment_and_from_parallelism_config() -> None:
    env = {"PARALLELISM_CONFIG_CP_SIZE": "2", "ACCELERATE_USE_FSDP": "true"}
    env["ACCELERATE_FSDP_VERSION"] = "2"
    assert layout_from_settings(_settings(environ=env), 2).cp == 2
    code = ParallelismConfig(cp_size=2).to_settings()
    assert code[CP_KEY] == 2
    assert code["parallelism_config.parallelism_config_cp_backend"] == "torch"
    assert code["parallelism_config.parallelism_config_cp_comm_strategy"] == "allgather"
    assert layout_from_settings(_settings(**FSDP2, **code), 4).cp == 2


@pytest.mark.parametrize(
    ("extra", "named", "fix"),
    [
        ({"distributed_type": "MULTI_CPU"}, "distributed_type = MULTI_CPU", "fsdp_version 2"),
        ({"fsdp_config.fsdp_version": 1}, "fsdp_config.fsdp_version = 1", "fsdp_version 2"),
        (
            {"fsdp_config.fsdp_sharding_strategy": "NO_SHARD"},
            "fsdp_sharding_strategy = NO_SHARD",
            "FULL_SHARD",
        ),
        ({"parallelism_config.parallelism_config_sp_size": 2}, "sp_size = 2", "set one of them"),
        ({"dynamo_config.dynamo_backend": "inductor"}, "dynamo_backend = inductor", "to no"),
        (
            {"parallelism_config.parallelism_config_tp_size": 2},
            "tensor-parallel degree 2",
            "set one of",
        ),
        (
            {"parallelism_config.parallelism_config_pp_size": 2},
            "pipeline degree 2",
            "set one of",
        ),
    ],
)
def test_what_cp_cannot_run_with_is_refused_naming_the_setting(
    extra: dict[str, object], named: str, fix: str
) -> None:
    settings = _cp(2, **extra)
    with pytest.raises(ConfigError) as caught:
        layout_from_settings(settings, 8)
    text = str(caught.value)
    assert named in text and f"{CP_KEY} = 2, from" in text, text
    assert "code Accelerator(" in text  # the origin of each value
    assert "fix: " in text and fix in text.split("fix:")[1], text


def test_a_cp_degree_that_does_not_divide_the_processes_is_refused() -> None:
    with pytest.raises(ConfigError, match="context-parallel degree 2 .* does not divide the 3"):
        layout_from_settings(_cp(2), 3)


def test_comm_strategy_and_backend_are_checked_where_they_are_read() -> None:
    with pytest.raises(ConfigError, match="cp_comm_strategy"):
        _cp(2, **{"parallelism_config.parallelism_config_cp_comm_strategy": "ring"})
    with pytest.raises(ConfigError, match="cp_backend"):
        _cp(2, **{"parallelism_config.parallelism_config_cp_backend": "deepspeed"})


def test_config_validate_and_launch_refuse_cp_without_fsdp2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "cfg.yaml"
    config.write_text(
        "distributed_type: MULTI_CPU\nnum_processes: 2\nuse_cpu: true\n"
        "parallelism_config:\n  parallelism_config_cp_size: 2\n"
    )
    assert main(["config", "validate", str(config)]) != 0
    err = capsys.readouterr()
    text = err.out + err.err
    assert "distributed_type = MULTI_CPU" in text and "parallelism_config_cp_size = 2" in text
    assert str(config) in text  # where the value came from
    script = tmp_path / "t.py"
    script.write_text("raise SystemExit('a worker started')\n")
    flags = ["--parallelism_config_cp_size", "2"]
    code = main(["launch", "--cpu", "--num_processes", "2", *flags, str(script)])
    err = capsys.readouterr().err
    assert code == 2 and "distributed_type" in err and "flag --parallelism_config_cp_size" in err
    assert "a worker started" not in err and "Traceback" not in err


def test_dry_run_shows_the_cp_coordinate(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    script = tmp_path / "t.py"
    script.write_text("")
    flags = ["--use_fsdp", "--fsdp_version", "2", "--parallelism_config_cp_size", "2"]
    code = main(["launch", "--cpu", "--num_processes", "4", *flags, "--dry_run", str(script)])
    out = capsys.readouterr().out
    assert code == 0
    assert "dp_shard=2 x cp=2" in out, out


def test_a_refusal_names_an_unset_setting_as_not_set() -> None:
    from overdrive.config import load_settings
    from overdrive.parallel.degree_rules import refuse_by_rules

    settings = load_settings(code={"distributed_type": None}, environ={}, config_file=None)
    rules = [("distributed_type", lambda v, s: v is None, "set it")]
    with pytest.raises(ConfigError, match=r"^distributed_type = not set \("):
        refuse_by_rules(rules, settings, what="context", asked_by="cp = 2")
