"""Issue 31: a config file's mistakes are all reported in one pass, a wrong value gets a
suggestion as a wrong key does, and the effective settings stay readable under Trainer."""

from __future__ import annotations

from pathlib import Path

import pytest

from overdrive.cli.main import main
from overdrive.config import load_settings
from overdrive.config.resolve import resolve
from overdrive.config.sources import from_mapping
from overdrive.errors import ConfigError, ConfigErrors
from overdrive.setup.effective_settings import ONE_LINE, WIDTH, summary
from tests.helpers.env import forget_launcher


@pytest.fixture(autouse=True)
def no_launcher(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    forget_launcher(monkeypatch, tmp_path / "cache")


def _validate(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["config", "validate", str(path)])
    return code, capsys.readouterr().err


def test_validate_reports_every_mistake_of_a_file_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("mixed_precison: bf16\ndistributed_type: FDSP\nnum_processes: two\n")
    code, err = _validate(bad, capsys)
    assert code == 2
    assert err.startswith("overdrive: error: 3 problems in the settings:\n")
    assert f"1. unknown setting `mixed_precison` (file {bad}:1)" in err
    assert "did you mean `mixed_precision`?" in err
    assert f"2. invalid value for `distributed_type` (file {bad}:2)" in err
    assert f"3. invalid value for `num_processes` (file {bad}:3)" in err
    assert err.count("fix:") == 3


def test_a_wrong_value_gets_the_closest_allowed_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("distributed_type: FDSP\n")
    code, err = _validate(bad, capsys)
    assert code == 2
    assert "FDSP is not one of: NO, MULTI_CPU" in err  # the allowed list, once
    assert f"fix: did you mean `FSDP`? (edit `distributed_type` in {bad}:1)" in err


@pytest.mark.parametrize(
    ("key", "value", "suggested"),
    [
        ("mixed_precision", "bf61", "`bf16`"),
        ("log_with", ["tensorbord"], "`tensorboard`"),
        ("fsdp_config.fsdp_sharding_strategy", "FULL_SHRD", "`FULL_SHARD`"),
    ],
)
def test_value_suggestions_for_words_and_lists(key: str, value: object, suggested: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve(file=from_mapping({key: value}, "file", "cfg.yaml"))
    assert f"did you mean {suggested}?" in str(info.value)


def test_an_unrelated_value_gets_no_suggestion() -> None:
    with pytest.raises(ConfigError) as info:
        resolve(env=from_mapping({"mixed_precision": "zzzz"}, "env", "ACCELERATE_MIXED_PRECISION"))
    assert "did you mean" not in str(info.value)
    assert "use one of: no, fp16, bf16, fp8" in str(info.value)


def test_mistakes_in_several_sources_are_reported_together(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("num_machines: zero\n")
    with pytest.raises(ConfigErrors) as info:
        load_settings(config_file=config, flags={}, environ={"ACCELERATE_MIXED_PRECISION": "fp61"})
    assert [e.key for e in info.value.errors] == ["num_machines", "mixed_precision"]
    assert "env ACCELERATE_MIXED_PRECISION" in str(info.value)


def test_a_cross_field_rule_is_reported_with_a_bad_value(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("num_machines: 2\nmixed_precision: fp61\n")  # no main_process_ip
    with pytest.raises(ConfigErrors) as info:
        load_settings(config_file=config, flags={}, environ={})
    assert [e.key for e in info.value.errors] == ["mixed_precision", "main_process_ip"]


def test_a_rule_about_a_value_that_failed_is_not_reported_twice(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    # machine_rank 1 would be "not below num_machines 1" only because num_machines failed.
    config.write_text("num_machines: two\nmachine_rank: 1\n")
    with pytest.raises(ConfigError) as info:
        load_settings(config_file=config, flags={}, environ={})
    assert not isinstance(info.value, ConfigErrors)
    assert "invalid value for `num_machines`" in str(info.value)


def test_one_mistake_reads_as_before(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("num_processes: two\n")
    with pytest.raises(ConfigError) as info:
        load_settings(config_file=config, flags={}, environ={})
    assert str(info.value).startswith("invalid value for `num_processes`")


# What transformers' Trainer passes in code, at their defaults, beside an FSDP2 config file.
TRAINER_CODE = {
    "mixed_precision": "no",
    "gradient_accumulation_steps": 1,
    "split_batches": False,
    "even_batches": True,
    "non_blocking": False,
}
FSDP2_FILE = (
    "distributed_type: FSDP\nnum_processes: 2\nuse_cpu: true\nfsdp_config:\n"
    "  fsdp_version: 2\n  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
    "  fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer\n"
    "  fsdp_state_dict_type: SHARDED_STATE_DICT\n  fsdp_cpu_ram_efficient_loading: true\n"
)


def test_effective_settings_under_trainer_are_lines_of_whole_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("fsdp2.yaml").write_text(FSDP2_FILE)
    settings = load_settings(config_file="fsdp2.yaml", code=TRAINER_CODE, environ={})
    text = summary(settings, 2)
    assert text is not None
    head, *lines = text.splitlines()
    assert head == (
        "effective settings (rank 0 of 2), 9 not at their default; 5 more set in code to "
        "their default values:"
    )
    assert all(len(line) <= WIDTH for line in lines)
    assert all(line.startswith("  ") for line in lines)
    listed = " ".join(lines)
    assert "fsdp_config.fsdp_state_dict_type=SHARDED_STATE_DICT (file fsdp2.yaml:8)" in listed
    assert "split_batches" not in text  # set in code, to its default: counted, not listed


def test_a_short_summary_stays_one_line() -> None:
    settings = resolve(code=from_mapping({"use_cpu": True}, "code", "Accelerator({}=...)"))
    text = summary(settings, 1)
    assert text == "effective settings (rank 0 of 1): use_cpu=true (code Accelerator(use_cpu=...))"
    assert len(text) <= ONE_LINE


def test_settings_code_set_to_their_defaults_alone_say_nothing() -> None:
    code = from_mapping(TRAINER_CODE, "code", "Accelerator({}=...)")
    assert summary(resolve(code=code), 1) is None
