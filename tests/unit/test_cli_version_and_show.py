"""`overdrive --version`, and `config show` warning about what cannot take effect in the very
words `config validate` uses, both through the real CLI in a child process."""

from __future__ import annotations

import json
from pathlib import Path

import overdrive
from tests.faults.config_cli import overdrive as run_cli

# Valid, but only FSDP reads fsdp_config and only DEEPSPEED reads deepspeed_config.
INERT = """\
distributed_type: MULTI_CPU
num_processes: 2
fsdp_config:
  fsdp_version: 2
  fsdp_sharding_strategy: FULL_SHARD
deepspeed_config:
  zero_stage: 2
"""


def _warnings(stderr: str) -> list[str]:
    """The warning lines and the fix line under each."""
    lines = stderr.splitlines()
    kept = []
    for number, line in enumerate(lines):
        if line.startswith("overdrive: warning:") or (
            line.startswith("  fix:") and number and lines[number - 1] in kept
        ):
            kept.append(line)
    return kept


def test_version_prints_the_package_version() -> None:
    done = run_cli("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"overdrive {overdrive.__version__}\n"
    assert done.stderr == ""


def test_config_show_warns_about_inert_sections_as_validate_does(tmp_path: Path) -> None:
    path = tmp_path / "inert.yaml"
    path.write_text(INERT)
    validated = run_cli("config", "validate", path)
    assert validated.returncode == 0, validated.stderr
    expected = _warnings(validated.stderr)
    assert [line for line in expected if "cannot take effect" in line] == [
        line for line in expected if line.startswith("overdrive: warning:")
    ]
    assert len(expected) == 4  # fsdp_config and deepspeed_config, each with its fix

    shown = run_cli("config", "show", "--config_file", path)
    assert shown.returncode == 0, shown.stderr
    assert _warnings(shown.stderr) == expected
    assert "fsdp_config.fsdp_version" in shown.stdout  # the table itself is unchanged

    as_json = run_cli("config", "show", "--json", "--config_file", path)
    assert as_json.returncode == 0, as_json.stderr
    assert _warnings(as_json.stderr) == expected
    assert json.loads(as_json.stdout)["distributed_type"]["value"] == "MULTI_CPU"


def test_config_show_is_silent_when_every_section_takes_effect(tmp_path: Path) -> None:
    path = tmp_path / "fsdp.yaml"
    path.write_text("distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n")
    shown = run_cli("config", "show", "--config_file", path)
    assert shown.returncode == 0, shown.stderr
    assert "warning" not in shown.stderr
