"""The accelerate alias: same module objects, version metadata, opt-in over a real install, reversible."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from overdrive import alias


@pytest.fixture
def clean_alias(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(alias.OPT_IN_ENV, raising=False)
    alias.uninstall()
    yield
    alias.uninstall()


def test_same_module_objects_and_version(clean_alias: None) -> None:
    import overdrive
    import overdrive.utils.memory

    assert alias.install() is True
    accelerate = importlib.import_module("accelerate")
    memory = importlib.import_module("accelerate.utils.memory")
    assert accelerate.__version__ == "1.15.0" != overdrive.__version__  # libraries gate on it
    assert accelerate.utils is overdrive.utils
    assert memory is overdrive.utils.memory
    assert accelerate.Accelerator is overdrive.Accelerator
    assert overdrive.__spec__ is not None and overdrive.__spec__.name == "overdrive"
    assert importlib.metadata.version("accelerate") == alias.COMPAT_VERSION == "1.15.0"


def test_uninstall_restores(clean_alias: None) -> None:
    import multiprocessing.spawn

    before = multiprocessing.spawn.get_preparation_data
    alias.install()
    assert "overdrive_accelerate_alias" in multiprocessing.spawn.get_preparation_data("probe")
    importlib.import_module("accelerate.hooks")
    alias.uninstall()
    assert multiprocessing.spawn.get_preparation_data is before
    assert not alias.is_installed()
    assert not any(n == "accelerate" or n.startswith("accelerate.") for n in sys.modules)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("accelerate")
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.version("accelerate")


def test_real_accelerate_needs_opt_in(
    clean_alias: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = tmp_path / "accelerate-9.9.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: accelerate\nVersion: 9.9.9\n")
    (tmp_path / "accelerate").mkdir()  # an installed package: its module and its metadata
    (tmp_path / "accelerate" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert alias.install() is False
    assert not alias.is_installed()
    assert "9.9.9" in alias.engine_line() and alias.OPT_IN_ENV in alias.engine_line()
    monkeypatch.setenv(alias.OPT_IN_ENV, "1")
    assert alias.install() is True
    assert "shadows installed accelerate 9.9.9" in alias.engine_line()


def test_dispatch_model_on_one_device_moves_the_model_without_hooks() -> None:
    from torch import nn

    from overdrive.big_modeling import dispatch_model

    model = dispatch_model(nn.Linear(2, 2), {"": "cpu"})
    assert model.weight.device.type == "cpu"
    assert not hasattr(model, "_hf_hook") and model.hf_device_map == {"": "cpu"}


COMPAT_SITE = Path(__file__).resolve().parents[2] / ".compat" / "site"  # make compat-site


def _accelerate_init_submodules() -> list[str]:
    """The submodules that are attributes of the pinned Hugging Face Accelerate right after
    ``import accelerate`` (read off the real package, in a fresh interpreter)."""
    listing = (
        "import accelerate, types\n"
        "print(' '.join(sorted(k for k, v in vars(accelerate).items()\n"
        "    if isinstance(v, types.ModuleType) and v.__name__.startswith('accelerate.'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", listing],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(COMPAT_SITE)},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()


_SUBMODULE_PROBE = """
import sys
name = sys.argv[1]
if name == "accelerate":
    from overdrive import alias
    assert alias.install(force=True)
package = __import__(name)
package.utils.set_seed(0)
for sub in sys.argv[2:]:
    module = getattr(package, sub)
    assert module is sys.modules[f"overdrive.{sub}"], (sub, module)
    assert sub in dir(package), sub
print("ok")
"""


@pytest.mark.parametrize("name", ["accelerate", "overdrive"])
def test_submodules_are_attributes_after_a_bare_import(name: str) -> None:
    submodules = _accelerate_init_submodules()
    assert "utils" in submodules and "state" in submodules  # the pinned package was read
    # a fresh interpreter: in this one some submodule may already be imported, hence set
    done = subprocess.run(
        [sys.executable, "-c", _SUBMODULE_PROBE, name, *submodules],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"
