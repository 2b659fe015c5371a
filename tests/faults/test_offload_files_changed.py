"""Weights files changed under a model that reads them lazily (offload ``.dat`` files, the
safetensors checkpoint an offload index points into): the next read is a clear error naming
the file, never a wrong number or a SIGBUS. Each case runs ``scripts/offload_file_changed.py``
in its own process, so a signal shows as the exit status."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent / "scripts" / "offload_file_changed.py"


def _run(case: str, folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "overdrive.run", str(SCRIPT), case, str(folder)],
        capture_output=True,
        text=True,
        timeout=300,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    )


def _assert_refused(done: subprocess.CompletedProcess[str], name: str, problem: str) -> None:
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr[-2000:])
    assert "SAME" not in done.stdout and "DIFFERENT" not in done.stdout, done.stdout
    last = done.stderr.strip().splitlines()
    message = "\n".join(last[-3:])
    assert "WeightFileError" in message and name in message and problem in message, message
    assert "fix: leave offload and checkpoint files untouched" in message, message


@pytest.mark.parametrize(
    ("case", "problem"),
    [
        ("dat_half", "truncated or extended"),  # read wrong with no error before
        ("dat_big", "truncated or extended"),  # a 4 MB weight: SIGBUS before
        ("dat_replaced", "replaced by another"),
    ],
)
def test_offloaded_dat_changed_after_the_first_forward_is_refused(
    tmp_path: Path, case: str, problem: str
) -> None:
    _assert_refused(_run(case, tmp_path), "0.weight.dat", problem)


@pytest.mark.parametrize("case", ["torn", "torn_unrecorded"])
def test_safetensors_dat_torn_to_the_raw_size_is_not_read_as_raw(tmp_path: Path, case: str) -> None:
    _assert_refused(_run(case, tmp_path), "w.dat", "header")


def test_checkpoint_truncated_under_a_disk_offloaded_from_pretrained_is_refused(
    tmp_path: Path,
) -> None:
    pytest.importorskip("transformers")
    _assert_refused(_run("checkpoint", tmp_path), "model.safetensors", "truncated or extended")


def test_weights_loaded_from_a_checkpoint_do_not_depend_on_its_file_afterwards(
    tmp_path: Path,
) -> None:
    """load_checkpoint_in_model left the weights memory-mapped into the checkpoint: truncating
    it after the load killed the next forward with SIGBUS."""
    done = _run("loaded", tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "SAME", (done.returncode, done.stderr)
