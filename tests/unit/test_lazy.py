"""`overdrive.lazy.attributes`: module attributes loaded on first use, and the modules that use it."""

from __future__ import annotations

import subprocess
import sys
import types
from collections.abc import Iterator

import pytest

from overdrive.lazy.attributes import lazy_getattr, load, same_names


@pytest.fixture
def module() -> Iterator[types.ModuleType]:
    made = types.ModuleType("lazy_probe")
    sys.modules[made.__name__] = made
    yield made
    del sys.modules[made.__name__]


def test_targets_load_once_and_stay_in_the_module(module: types.ModuleType) -> None:
    calls: list[int] = []

    def computed() -> int:
        calls.append(1)
        return 42

    targets = {
        "answer": computed,
        "dumps": "json:dumps",
        "shlex": "shlex",
        **same_names({"sep": "os"}),
    }
    module.__getattr__ = lazy_getattr(module.__name__, targets)  # type: ignore[attr-defined]
    import json
    import os
    import shlex

    assert module.dumps is json.dumps and module.shlex is shlex and module.sep == os.sep
    assert module.answer == 42 and module.answer == 42 and calls == [1]
    assert vars(module)["answer"] == 42  # cached: the second look-up never reached __getattr__


def test_other_names_raise_the_usual_attribute_error(module: types.ModuleType) -> None:
    module.__getattr__ = lazy_getattr(module.__name__, {})  # type: ignore[attr-defined]
    with pytest.raises(AttributeError, match="^module 'lazy_probe' has no attribute 'nope'$"):
        _ = module.nope
    assert not hasattr(module, "nope")


def test_load_reads_every_kind_of_target() -> None:
    import os.path

    assert load("os.path:join") is os.path.join and load("os.path") is os.path
    assert load(lambda: 3) == 3


@pytest.mark.parametrize(
    "name",
    ["overdrive", "overdrive.utils", "overdrive.utils.constants", "overdrive.lazy.attributes"],
)
def test_lazy_modules_import_without_torch(name: str) -> None:
    code = f"import sys, {name}; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_modules_serve_their_lazy_names() -> None:
    import overdrive
    import overdrive.state
    import overdrive.test_utils
    import overdrive.utils
    import overdrive.utils.constants

    assert overdrive.set_seed.__module__ == "overdrive.processes.random_state"
    assert overdrive.AcceleratorState is overdrive.state.AcceleratorState
    assert overdrive.test_utils.test_sync.__name__ == "overdrive.test_utils.scripts.test_sync"
    assert overdrive.utils.bnb.__name__ == "overdrive.utils.bnb"
    assert overdrive.utils.gather.__module__.startswith("overdrive.")
    layers = overdrive.utils.constants.SUPPORTED_PYTORCH_LAYERS_FOR_UPCASTING
    assert [layer.__name__ for layer in layers][:2] == ["Conv1d", "Conv2d"]
    for name in ("overdrive", "overdrive.utils", "overdrive.utils.dataclasses"):
        with pytest.raises(AttributeError, match=f"^module '{name}' has no attribute 'nope'$"):
            _ = sys.modules[name].nope
