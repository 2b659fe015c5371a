"""A run interrupted after a save and resumed in fresh processes ends bitwise where the
uninterrupted run ends, with every RNG stream in use: Dropout (torch, per rank), a dataset
that adds random noise as it is read (in the main process, or in DataLoader workers), python
and numpy draws in the step, the DataLoader's own generator, rng_types copies, and a sampler
that draws each epoch's order from torch's RNG (the resumed epoch must keep its order).

Each case launches scripts/ckpt_rng_resume.py twice (see its docstring): "full" saves after
batch 9 (mid-epoch, inside an accumulation window) and goes on to 15; "resume" loads that
save and trains to 15. Every rank's digests must match.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.dist import free_port, run_launch

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

SCRIPT = Path(__file__).parent / "scripts" / "ckpt_rng_resume.py"

CASES = {
    # The main process reads the data: the noise comes from each rank's own torch/numpy RNG;
    # a WeightedRandomSampler draws each epoch's order from rank 0's torch RNG.
    "2 processes": (2, ["--weighted"]),
    # Workers read the data; the loader has its own generator; rng_types copies rank 0's
    # torch RNG and generator at each epoch start (never again at the resumed start).
    "3 processes, 2 workers": (
        3,
        ["--workers", "2", "--generator", "--rng_types", "torch,generator", "--find_unused"],
    ),
}


def _launch(out: Path, nprocs: int, phase: str, extra: list[str]) -> subprocess.CompletedProcess:
    out.mkdir(exist_ok=True)
    for _ in range(3):  # only a port taken before any worker started is retried
        result = run_launch(
            SCRIPT,
            nprocs=nprocs,
            args=["--out", str(out), "--phase", phase, *extra],
            launch_args=["--main_process_port", str(free_port())],
        )
        text = (result.stdout + result.stderr).lower()
        if "address already in use" not in text or any(out.glob(f"{phase}_*.json")):
            break
    assert result.returncode == 0, f"{phase}: exit {result.returncode}\n{result.stderr[-4000:]}"
    return result


def _rows(out: Path, phase: str, nprocs: int) -> list[dict[str, Any]]:
    return [json.loads((out / f"{phase}_{r}.json").read_text()) for r in range(nprocs)]


@pytest.mark.parametrize("case", list(CASES))
def test_resumed_run_continues_every_rng_stream_exactly(case: str, tmp_path: Path) -> None:
    nprocs, extra = CASES[case]
    _launch(tmp_path, nprocs, "full", extra)
    _launch(tmp_path, nprocs, "resume", extra)
    full, resumed = _rows(tmp_path, "full", nprocs), _rows(tmp_path, "resume", nprocs)
    for rank, (a, b) in enumerate(zip(full, resumed)):
        assert len(a["seen"]) == 6, a  # batches 10..15 after the save
        assert b["seen"] == a["seen"], f"rank {rank}: other batches after the resume"
        assert b["losses"] == a["losses"], f"rank {rank}: losses differ after the resume"
        assert b["rng"] == a["rng"], f"rank {rank}: RNG streams end elsewhere"
        assert b["model"] == a["model"], f"rank {rank}: parameters differ"
        assert b["optimizer"] == a["optimizer"], f"rank {rank}: optimizer state differs"
    if "--rng_types" not in extra:
        # Each rank has its own torch stream, so one ending up with another's would show.
        assert len({r["rng"]["torch"] for r in full}) == nprocs
