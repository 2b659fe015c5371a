"""Hostile or broken config files end in one clear error within seconds (issue 13, item 8).

A YAML alias bomb in a known key's value, an oversized file, a huge value, recursive
aliases and an empty file: `config validate`, `config show` and `launch` each exit 2
with one error and no traceback, well within the time limit, and never print the value.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.config_cli import assert_clean_refusal, overdrive


def _alias_bomb(levels: int = 10, width: int = 9) -> str:
    """A flow sequence whose aliases expand to width**levels strings (~3.5e9 for 9**10)."""
    node = "&l0 [" + ",".join(['"lol"'] * width) + "]"
    for level in range(1, levels):
        node = f"&l{level} [{node}," + ",".join([f"*l{level - 1}"] * (width - 1)) + "]"
    return node


def _commands(path: Path, script: Path) -> list[list[str | Path]]:
    return [
        ["config", "validate", path],
        ["config", "show", "--config_file", path],
        ["launch", "--dry_run", "--config_file", path, script],
    ]


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text("print('trained')\n")
    return path


@pytest.mark.parametrize("key", ["gpu_ids", "log_with", "tpu_name", "fsdp_config"])
def test_alias_bomb_in_a_known_key_is_refused_quickly(
    tmp_path: Path, script: Path, key: str
) -> None:
    path = tmp_path / "bomb.yaml"
    value = _alias_bomb()
    if key == "fsdp_config":
        path.write_text(f"fsdp_config:\n  fsdp_transformer_layer_cls_to_wrap: {value}\n")
    else:
        path.write_text(f"num_processes: 1\n{key}: {value}\n")
    assert path.stat().st_size < 1000  # small on disk: only the expansion is huge
    for command in _commands(path, script):
        message = assert_clean_refusal(overdrive(*command))
        assert str(path) in message and "alias" in message
        assert len(message) < 1000  # the value is never formatted into the message


def test_recursive_alias_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "loop.yaml"
    path.write_text("log_with: &loop [*loop]\n")
    message = assert_clean_refusal(overdrive("config", "validate", path))
    assert f"{path}:1" in message and "alias" in message


def test_oversized_file_is_refused_without_reading_it_all(tmp_path: Path, script: Path) -> None:
    path = tmp_path / "huge.yaml"
    with path.open("w") as handle:
        handle.write("tpu_name: ")
        for _ in range(64):  # 64 MiB in one value
            handle.write("x" * (1024 * 1024))
        handle.write("\n")
    for command in _commands(path, script):
        message = assert_clean_refusal(overdrive(*command), within_s=20)
        assert str(path) in message and "too large" in message
        assert len(message) < 1000


def test_a_large_bad_value_is_not_echoed(tmp_path: Path) -> None:
    path = tmp_path / "long.yaml"
    path.write_text("gpu_ids: [" + ", ".join(["zero"] * 8_000) + "]\n")  # 48 kB, under the cap
    message = assert_clean_refusal(overdrive("config", "validate", path))
    assert "gpu_ids" in message and f"{path}:1" in message
    assert len(message) < 1000


@pytest.mark.parametrize(
    "text", ["", "\n\n", "# only a comment\n", "---\n", "null\n", "~\n"], ids=repr
)
def test_empty_config_file_is_an_error(tmp_path: Path, script: Path, text: str) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text(text)
    for command in _commands(path, script):
        message = assert_clean_refusal(overdrive(*command))
        assert str(path) in message and "empty" in message


def test_empty_default_config_file_is_an_error_too(tmp_path: Path) -> None:
    default = tmp_path / "cache" / "overdrive" / "default_config.yaml"
    default.parent.mkdir(parents=True)
    default.write_text("")
    message = assert_clean_refusal(
        overdrive("config", "show", env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    )
    assert str(default) in message and "empty" in message
