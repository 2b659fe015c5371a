"""A programmatic-configuration example loop, run by Hugging Face Accelerate and, ported by renaming imports,
by overdrive, each on 2 CPU processes: the same batches, losses, learning rates and final
weights (loops/programmatic_loop.py). Hugging Face Accelerate forms a gloo group on a CPU host only
under torchrun with ACCELERATE_USE_CPU=1, so that is how it runs here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.compat.harness import REPO, environment, free_port
from tests.compat.port import rename_imports
from tests.compat.test_conformance import SITE

LOOP = Path(__file__).resolve().parent / "loops" / "programmatic_loop.py"


def _run(launcher: str, script: Path, out: Path, mode: str) -> list[list[dict[str, Any]]]:
    out.mkdir()
    if launcher == "torchrun":
        start = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
        start += ["--master_port", str(free_port())]
    else:
        start = [sys.executable, "-m", "overdrive", "launch", "--cpu", "--num_processes", "2"]
        start += ["--main_process_port", str(free_port())]
    env = environment(launcher, SITE.resolve(), call_timeout=300)
    done = subprocess.run(
        [*start, str(script), str(out), mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=out,
    )
    assert done.returncode == 0, f"{launcher}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return [
        [json.loads(line) for line in (out / f"rank{r}.jsonl").read_text().splitlines()]
        for r in range(2)
    ]


@pytest.fixture(scope="module")
def ported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("programmatic") / "programmatic_loop.py"
    path.write_text(rename_imports(LOOP.read_text()))
    assert "import accelerate" not in path.read_text() and "from accelerate" not in path.read_text()
    return path


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["none", "config"])
def test_same_loss_and_learning_rate_trace_as_hugging_face_accelerate(
    ported: Path, tmp_path: Path, mode: str
) -> None:
    theirs = _run("torchrun", LOOP, tmp_path / "accelerate", mode)
    ours = _run("overdrive", ported, tmp_path / "overdrive", mode)
    batches = 25 if mode == "config" else 13  # 200 samples, batch 8: split or per process
    for rank, (a, b) in enumerate(zip(theirs, ours)):
        assert len(a) == len(b) == 3 * batches + 1, (rank, len(a), len(b))
        for x, y in zip(a[:-1], b[:-1]):
            assert (x["epoch"], x["batch"], x["first_id"]) == (
                y["epoch"],
                y["batch"],
                y["first_id"],
            )
            assert x["lr"] == pytest.approx(y["lr"], rel=1e-12), (rank, x, y)
            assert x["loss"] == pytest.approx(y["loss"], rel=1e-6), (rank, x, y)
        assert a[-1]["classifier_sum"] == pytest.approx(b[-1]["classifier_sum"], rel=1e-6)
    assert {r["lr"] for r in ours[0][:-1]} != {0.0}  # the schedule moved (warmup, then decay)


@pytest.mark.distributed
@pytest.mark.slow
def test_accelerator_split_batches_argument_is_ignored_as_there(
    ported: Path, tmp_path: Path
) -> None:
    # The loop may pass Accelerator(split_batches=True). Hugging Face Accelerate (1.x) accepts the
    # argument and ignores it; so does overdrive, with a warning naming the argument that splits.
    theirs = _run("torchrun", LOOP, tmp_path / "accelerate", "argument")
    ours = _run("overdrive", ported, tmp_path / "overdrive", "argument")
    assert len(theirs[0]) == len(ours[0]) == 3 * 13 + 1


def test_the_loop_accumulates_by_hand_as_documented() -> None:
    text = LOOP.read_text()
    for line in (
        "accelerator.backward(loss / accelerator.gradient_accumulation_steps)",
        "if (batch_idx + 1) % accelerator.gradient_accumulation_steps == 0:",
        "model, optimizer, dataloader, lr_scheduler = accelerator.prepare(",
    ):
        assert line in text
    assert str(REPO) not in text
