"""Helpers at Hugging Face Accelerate's module paths."""

from __future__ import annotations

import random

import pytest
import torch


def test_utils_random_set_seed_seeds_python_and_torch() -> None:
    from overdrive.utils.random import set_seed

    set_seed(3)
    first = (random.random(), torch.rand(1).item())
    set_seed(3)
    assert (random.random(), torch.rand(1).item()) == first


def test_is_torch_version_compares_the_running_torch() -> None:
    from overdrive.utils.versions import compare_versions, is_torch_version

    base = str(torch.__version__).split("+")[0]
    assert is_torch_version(">=", base) and is_torch_version("==", base)
    assert not is_torch_version("<", base)
    assert is_torch_version(">", "1.0") and not is_torch_version("<", "1.0")
    assert compare_versions("torch", ">=", "2.0") and not compare_versions("torch", "<", "2.0")
    with pytest.raises(ValueError, match="operation"):
        is_torch_version("~=", "2.0")


def test_is_schedulefree_available_follows_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from overdrive.utils import is_schedulefree_available
    from overdrive.utils.imports import _installed

    for found in (True, False):
        spec = object() if found else None
        monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a, s=spec: s)
        _installed.cache_clear()
        assert is_schedulefree_available() is found
    _installed.cache_clear()
