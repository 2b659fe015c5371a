"""transformers' Trainer on Hugging Face Accelerate and on overdrive, the same unmodified script
(tests/distributed/scripts/trainer_case.py) both ways: 1 process, and 2-process DDP on CPU
(Hugging Face Accelerate under torchrun with ACCELERATE_USE_CPU=1, the only way it forms a gloo
group on a CPU host; overdrive under ``overdrive launch``, its package answering to
``import accelerate``). The loss traces and final weights must be the same."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.compat.harness import REPO, environment, free_port
from tests.compat.test_conformance import SITE

pytest.importorskip("transformers")

SCRIPT = REPO / "tests" / "distributed" / "scripts" / "trainer_case.py"


def _run(engine: str, nprocs: int, tmp: Path) -> dict[str, Any]:
    out = tmp / f"{engine}-{nprocs}.json"
    spec = {"out": str(out), "output_dir": str(tmp / f"{engine}-{nprocs}"), "samples": 24}
    spec.update(batch=4 // nprocs, max_steps=10)
    if engine == "accelerate":
        env = environment("torchrun", SITE.resolve(), call_timeout=300)
        start = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nprocs)]
        start += ["--master_port", str(free_port())]
    else:
        # Without Hugging Face Accelerate's folder on the path: the alias answers instead.
        env = environment("overdrive", None, call_timeout=300)
        start = [sys.executable, "-m", "overdrive", "launch", "--cpu"]
        start += ["--num_processes", str(nprocs), "--main_process_port", str(free_port())]
    done = subprocess.run(
        [*start, str(SCRIPT), json.dumps(spec)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp,
    )
    assert done.returncode == 0, f"{engine}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return json.loads(out.read_text())


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.parametrize("nprocs", [1, 2])
def test_trainer_gives_hugging_face_accelerates_numbers(tmp_path: Path, nprocs: int) -> None:
    theirs = _run("accelerate", nprocs, tmp_path)
    ours = _run("overdrive", nprocs, tmp_path)
    assert theirs["world"] == ours["world"] == nprocs
    assert len(ours["losses"]) == 10
    assert ours["losses"] == theirs["losses"]
    assert ours["weights"] == theirs["weights"]
