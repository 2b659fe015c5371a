"""A script written for Hugging Face Accelerate (it imports ``accelerate``) skips the batches
it already trained on by itself after ``load_state`` (diffusers counts and ``continue``s past
them): its prepared loader restarts the saved epoch in the saved order, so it resumes on the
batches an uninterrupted run takes. A script that imports overdrive resumes where it stopped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import json, sys, warnings
import torch
from torch.utils.data import DataLoader
{imports}

out, phase = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
acc = Accelerator(cpu=True)
loader = acc.prepare(DataLoader(list(range(24)), batch_size=2, shuffle=True))
seen = []
if phase == "full":
    for step, batch in enumerate(loader):
        seen.append(batch.tolist())
        if step == 4:
            acc.save_state(out + "/ckpt")
else:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        acc.load_state(out + "/ckpt")
    for step, batch in enumerate(loader):
        if {skips} and step < 5:  # diffusers' manual skip of what was trained before the save
            continue
        seen.append(batch.tolist())
    seen = {{"batches": seen, "warned": any("start that epoch again" in str(w.message) for w in caught)}}
print("RESULT " + json.dumps(seen))
"""


def _run(tmp_path: Path, flavour: str, phase: str) -> object:
    imports = (
        "from accelerate import Accelerator"
        if flavour == "accelerate"
        else "from overdrive import Accelerator"
    )
    script = tmp_path / f"{flavour}.py"
    script.write_text(SCRIPT.format(imports=imports, skips=flavour == "accelerate"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "OVERDRIVE_"))}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    done = subprocess.run(
        [sys.executable, "-m", "overdrive.run", str(script), str(tmp_path / flavour), phase],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


@pytest.mark.parametrize("flavour", ["accelerate", "overdrive"])
def test_a_mid_epoch_resume_continues_on_the_uninterrupted_batches(
    tmp_path: Path, flavour: str
) -> None:
    full = _run(tmp_path, flavour, "full")
    resumed = _run(tmp_path, flavour, "resume")
    assert isinstance(full, list) and isinstance(resumed, dict)
    assert resumed["batches"] == full[5:]
    assert resumed["warned"] is (flavour == "accelerate")
