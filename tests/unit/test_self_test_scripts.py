"""The self-test scripts in ``overdrive.test_utils.scripts`` pass on one process and on two
(``debug_launcher``), and their checks do fail when overdrive misbehaves."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

from overdrive import Accelerator, debug_launcher
from overdrive.strategies.base import Strategy
from overdrive.strategies.ddp import DDPStrategy
from overdrive.test_utils import path_in_accelerate_package, test_ops, test_script, test_sync
from overdrive.test_utils.scripts import test_cli
from tests.helpers.env import forget_launcher

SCRIPTS = [test_script, test_ops, test_sync]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    forget_launcher(monkeypatch, tmp_path)


def _name(module: ModuleType) -> str:
    return module.__name__.rsplit(".", 1)[-1]


@pytest.mark.parametrize("module", SCRIPTS, ids=_name)
def test_main_passes_on_one_process(module: ModuleType, capsys: pytest.CaptureFixture) -> None:
    module.main()
    assert f"{_name(module)}: " in capsys.readouterr().out


@pytest.mark.distributed
@pytest.mark.parametrize("module", SCRIPTS, ids=_name)
def test_main_passes_on_two_processes(module: ModuleType) -> None:
    debug_launcher(module.main, num_processes=2)


def test_cli_script_prints_the_state(capsys: pytest.CaptureFixture) -> None:
    test_cli.main()
    out = capsys.readouterr().out
    assert "process 0 of 1" in out and "Successfully ran on 1 process(es)" in out


def test_scripts_are_files_the_launcher_can_run() -> None:
    for name in ("test_script", "test_ops", "test_sync", "test_cli"):
        path = path_in_accelerate_package("test_utils", "scripts", f"{name}.py")
        assert path.is_file(), path
    assert test_sync.__file__ == str(
        path_in_accelerate_package("test_utils", "scripts", "test_sync.py")
    )


def test_scripts_load_only_when_asked_for() -> None:
    code = (
        "import sys, overdrive.test_utils as t; "
        "print('overdrive.test_utils.scripts' in sys.modules); t.test_ops; "
        "print('overdrive.test_utils.scripts.test_ops' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


def test_accumulate_check_catches_an_unscaled_loss(monkeypatch: pytest.MonkeyPatch) -> None:
    # backward without the 1/k scaling: the window's local gradient comes out k times too big
    monkeypatch.setattr(Accelerator, "backward", lambda self, loss, **kwargs: loss.backward())
    with pytest.raises(AssertionError, match=r"accumulate\(k=2.*step 0: local gradient"):
        test_sync.check_accumulate(2)


@pytest.mark.distributed
def test_sync_check_catches_unsynchronised_gradients(monkeypatch: pytest.MonkeyPatch) -> None:
    # DDP's chain has no DDP step, so nothing averages the gradients (forked children
    # inherit it)
    monkeypatch.setattr(DDPStrategy, "model_chain", Strategy.model_chain)
    with pytest.raises(ChildFailedError, match="AssertionError: step 1: gradient after no_sync"):
        debug_launcher(test_sync.main, num_processes=2)
