"""A finished script's process group is gone before the interpreter finalizes: under
torchrun and under ``overdrive launch``, no gloo thread is left for finalization to stop
mid-work (which aborted a finished rank now and then); and a group the script destroyed
itself is held until then, not ended by DDP's reducer (which deadlocked now and then)."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.helpers.dist import SCRIPTS, assert_ok, run_launch, run_torchrun

SCRIPT = SCRIPTS / "exit_joins_gloo.py"


def counts(stdout: str, when: str) -> dict[str, int]:
    return {
        rank: int(n) for rank, n in re.findall(rf"rank (\d+): gloo threads {when}: (\d+)", stdout)
    }


@pytest.mark.parametrize(
    ("launcher", "layout"),
    [("torchrun", "ddp"), ("torchrun", "fsdp2"), ("overdrive", "ddp"), ("overdrive", "explicit")],
)
def test_the_group_and_its_threads_are_gone_at_exit(launcher: str, layout: str) -> None:
    result: subprocess.CompletedProcess[str] = (
        run_torchrun(SCRIPT, args=[layout])
        if launcher == "torchrun"
        else run_launch(SCRIPT, args=[layout])
    )
    assert_ok(result)
    before, after = counts(result.stdout, "before exit"), counts(result.stdout, "at exit")
    assert set(before) == set(after) == {"0", "1"}, result.stdout
    assert all(n > 0 for n in before.values()), before  # the check sees gloo's threads
    assert after == {"0": 0, "1": 0}, result.stdout
    if layout == "explicit":  # held past the model's end: only the exit ends the group
        assert counts(result.stdout, "once the model is freed") == before, result.stdout
