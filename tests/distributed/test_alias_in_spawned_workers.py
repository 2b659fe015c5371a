"""DataLoader workers started by spawn import the script again in a fresh interpreter: there,
``import accelerate`` answers with the same engine as in the worker that started them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.distributed.test_first_hour_engine import _installed_accelerate
from tests.helpers.dist import run_launch

SCRIPT = """\
import accelerate
from torch.utils.data import DataLoader, Dataset


class Who(Dataset):
    def __len__(self):
        return 2

    def __getitem__(self, index):
        return getattr(accelerate, "WHO", "overdrive")


if __name__ == "__main__":
    loader = DataLoader(Who(), batch_size=2, num_workers=1, multiprocessing_context="spawn")
    print("PARENT", getattr(accelerate, "WHO", "overdrive"), flush=True)
    print("WORKER", " ".join(next(iter(loader))), flush=True)
"""


@pytest.mark.distributed
@pytest.mark.parametrize("installed", [True, False], ids=["shadowing", "alone"])
def test_spawned_loader_workers_import_overdrive_as_accelerate(
    installed: bool, tmp_path: Path
) -> None:
    script = tmp_path / "who.py"
    script.write_text(SCRIPT)
    env = _installed_accelerate(tmp_path) if installed else {}
    launch_args = ["--as_accelerate"] if installed else []
    done = run_launch(script, nprocs=1, launch_args=launch_args, env=env, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "PARENT overdrive" in done.stdout
    assert "WORKER overdrive overdrive" in done.stdout, done.stdout + done.stderr[-2000:]
