"""``overdrive launch --num_processes 2`` where Hugging Face Accelerate is installed and the
alias is not asked for: a script that imports the installed package (as Trainer does) runs in
one world of 2, not in two worlds of 1."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers.dist import REPO, clean_env, launch_command

COMPAT_SITE = Path(os.environ.get("OVERDRIVE_COMPAT_SITE", REPO / ".compat" / "site"))

# Trainer builds an Accelerator; a bare PartialState() on CPU processes stays a world of one
# under Hugging Face Accelerate's own launcher too (it reads ACCELERATE_USE_CPU only there).
SCRIPT = """\
import accelerate
from accelerate import Accelerator, PartialState

Accelerator()
state = PartialState()
print("ENGINE", accelerate.__file__, flush=True)
print("WORLD", state.num_processes, "RANK", state.process_index, flush=True)
"""


@pytest.mark.distributed
def test_the_installed_accelerate_sees_the_whole_world(tmp_path: Path) -> None:
    script = tmp_path / "world.py"
    script.write_text(SCRIPT)
    command = launch_command(script, nprocs=2)
    command.remove("--cpu")  # as a user types it on a host without GPUs
    done = subprocess.run(
        command,
        env=clean_env({"PYTHONPATH": str(COMPAT_SITE)}),
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    engines = {line.split()[1] for line in done.stdout.splitlines() if line.startswith("ENGINE")}
    assert engines == {str(COMPAT_SITE / "accelerate" / "__init__.py")}
    worlds = sorted(line for line in done.stdout.splitlines() if line.startswith("WORLD"))
    assert worlds == ["WORLD 2 RANK 0", "WORLD 2 RANK 1"], done.stdout
