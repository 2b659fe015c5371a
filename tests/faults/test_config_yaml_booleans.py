"""The YAML boolean trap (issue 13, item 9): unquoted NO / no / yes / on / off mean the word.

YAML 1.1 reads `distributed_type: NO` as false. A single-GPU config file is written exactly
like that (Hugging Face Accelerate docs, Reference > The Command Line), so the example a user copies must validate and mean NO,
wherever a config file is read: `config validate`, `config show`, `launch`, and the
`load_settings` the Accelerator uses.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from overdrive.config import load_settings, schema
from overdrive.config.kinds import Bool, Choice
from tests.faults.config_cli import overdrive

# A single-GPU config file with distributed_type NO unquoted.
SINGLE_GPU_EXAMPLE = """\
distributed_type: NO
mixed_precision: fp16
gradient_accumulation_steps: 1
"""

# A full config file's core part, as a user writes it without the quotes `accelerate config`
# puts around 'no': `downcast_bf16: no` is YAML 1.1's false.
CORE_EXAMPLE_UNQUOTED = """\
compute_environment: LOCAL_MACHINE
distributed_type: NO
num_processes: 1
num_machines: 1
machine_rank: 0
main_process_ip: null
main_process_port: null
mixed_precision: no
gradient_accumulation_steps: 4
use_cpu: false
debug: false
downcast_bf16: no
gpu_ids: all
rdzv_backend: static
"""

# Every spelling YAML 1.1 (PyYAML) turns into a boolean.
YAML11_BOOLEANS = [
    w for word in ("yes", "no", "on", "off") for w in (word, word.title(), word.upper())
]


def _write(tmp_path: Path, text: str, name: str = "example.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    assert yaml.safe_load(text)  # the trap is real: PyYAML alone reads booleans here
    return path


def test_single_gpu_example_validates(tmp_path: Path) -> None:
    path = _write(tmp_path, SINGLE_GPU_EXAMPLE)
    assert yaml.safe_load(SINGLE_GPU_EXAMPLE)["distributed_type"] is False
    done = overdrive("config", "validate", path)
    assert done.returncode == 0, done.stderr
    assert "valid" in done.stdout
    shown = overdrive("config", "show", "--json", "--config_file", path)
    assert shown.returncode == 0, shown.stderr
    values = json.loads(shown.stdout)
    assert values["distributed_type"] == {"value": "NO", "source": f"file {path}:1"}
    assert values["mixed_precision"]["value"] == "fp16"


def test_unquoted_core_example_means_what_it_says(tmp_path: Path) -> None:
    path = _write(tmp_path, CORE_EXAMPLE_UNQUOTED)
    settings = load_settings(config_file=path, environ={})  # what the Accelerator reads
    assert settings["distributed_type"] == "NO"
    assert settings["mixed_precision"] == "no"
    assert settings["downcast_bf16"] is False
    assert str(settings.source("downcast_bf16")) == f"file {path}:12"
    assert overdrive("config", "validate", path).returncode == 0


def test_launch_reads_the_unquoted_single_gpu_example(tmp_path: Path) -> None:
    path = _write(tmp_path, SINGLE_GPU_EXAMPLE)
    script = tmp_path / "train.py"
    script.write_text("print('trained')\n")
    done = overdrive("launch", "--dry_run", "--config_file", path, script)
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if "distributed_type" in line)
    assert row.split()[:2] == ["distributed_type", "NO"] and f"file {path}:1" in row


def _word_settings() -> list[tuple[str, str]]:
    """(key, allowed word) for every choice whose word YAML 1.1 would read as a boolean."""
    return [
        (s.key, word)
        for s in schema.SETTINGS
        if isinstance(s.kind, Choice)
        for word in s.kind.allowed
        if word.lower() in ("yes", "no", "on", "off")
    ]


def _file_text(key: str, word: str) -> str:
    if "." in key:
        section, name = key.split(".", 1)
        return f"{section}:\n  {name}: {word}\n"
    return f"{key}: {word}\n"


@pytest.mark.parametrize(("key", "word"), _word_settings())
def test_every_choice_takes_its_unquoted_word(tmp_path: Path, key: str, word: str) -> None:
    for spelling in (word, word.upper(), word.lower()):
        path = _write(tmp_path, _file_text(key, spelling))
        assert load_settings(config_file=path, environ={})[key] == word


def test_distributed_type_is_among_the_trapped_choices() -> None:
    assert ("distributed_type", "NO") in _word_settings()


@pytest.mark.parametrize("spelling", YAML11_BOOLEANS)
def test_unquoted_yes_no_on_off_are_still_booleans_for_switches(
    tmp_path: Path, spelling: str
) -> None:
    path = _write(tmp_path, f"downcast_bf16: {spelling}\nuse_cpu: {spelling}\n")
    settings = load_settings(config_file=path, environ={})
    expected = spelling.lower() in ("yes", "on")
    assert settings["downcast_bf16"] is expected and settings["use_cpu"] is expected
    assert isinstance(schema.get("downcast_bf16").kind, Bool)


def test_unquoted_word_in_a_text_setting_stays_the_word(tmp_path: Path) -> None:
    path = _write(tmp_path, "tpu_name: on\ntpu_zone: No\n")
    settings = load_settings(config_file=path, environ={})
    assert (settings["tpu_name"], settings["tpu_zone"]) == ("on", "No")
