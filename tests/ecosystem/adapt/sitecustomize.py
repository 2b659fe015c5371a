"""First on the path of every ecosystem process (``tests/ecosystem/run.py`` puts it there).

Two things, neither of which touches the scripts or the libraries on disk:

- ``torchvision`` from PyPI is a CUDA build, whose C++ operators cannot load against the CPU
  build of torch here; it then fails at import on registering shapes for ``torchvision::nms``
  and ``qnms``. When its library does not load, those two operator names are declared first,
  so that ``import torchvision`` works (the scripts use its transforms only, pure Python).
- With ``ECOSYSTEM_OUT`` set, every ``Accelerator.backward(loss)`` call of the engine in use
  (Hugging Face Accelerate's or overdrive's, whichever ``import accelerate`` gives) appends
  the loss to ``losses-rank{RANK}.jsonl`` there, and the first call writes
  ``engine-rank{RANK}.json``: the distributed type, process count, mixed precision and the
  backend's plugin the accelerator reports. Recording only: the call itself is unchanged.
- With ``ECOSYSTEM_SEED`` set, torch's random generator is seeded with it as soon as torch
  loads, in every process and under either engine: for a script that takes no ``--seed``
  (``train_unconditional.py``), so that its model starts from the same weights in every run.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

_PATCHED = "_ecosystem_recorded"


def declare_torchvision_ops() -> None:
    """Load torchvision's operator library, or declare the two names it registers fakes for
    unconditionally when it cannot load (a CUDA build on a CPU torch)."""
    import torch

    spec = importlib.machinery.PathFinder.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return
    library = Path(list(spec.submodule_search_locations)[0]) / "_C.so"
    try:
        torch.ops.load_library(str(library))
        return
    except (OSError, RuntimeError):
        pass
    if hasattr(torch.ops.torchvision, "nms"):
        return
    lib = torch.library.Library("torchvision", "DEF")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    sys.modules[__name__].__dict__["_torchvision_lib"] = lib  # keep the definitions alive


def _value(x: Any) -> Any:
    return getattr(x, "value", x)


def engine_facts(accelerator: Any) -> dict[str, Any]:
    """What the accelerator says it runs: the distributed type and what backs it."""
    state = getattr(accelerator, "state", None)
    facts: dict[str, Any] = {
        "engine": type(accelerator).__module__.split(".")[0],
        "distributed_type": str(_value(accelerator.distributed_type)),
        "num_processes": int(accelerator.num_processes),
        "mixed_precision": str(_value(accelerator.mixed_precision)),
    }
    ds = getattr(state, "deepspeed_plugin", None)
    if ds is not None:
        facts["zero_stage"] = getattr(ds, "zero_stage", None)
    fsdp = getattr(state, "fsdp_plugin", None)
    if fsdp is not None:
        facts["fsdp_version"] = getattr(fsdp, "fsdp_version", None)
    return facts


def record_backward(cls: type) -> None:
    """Wrap ``cls.backward`` to record each loss (once per class)."""
    if getattr(cls, _PATCHED, False):
        return
    original = cls.backward

    def backward(self: Any, loss: Any, **kwargs: Any) -> Any:
        out = Path(os.environ["ECOSYSTEM_OUT"])
        rank = os.environ.get("RANK", "0")
        facts = out / f"engine-rank{rank}.json"
        if not facts.exists():
            facts.write_text(json.dumps(engine_facts(self)))
        with open(out / f"losses-rank{rank}.jsonl", "a") as f:
            f.write(json.dumps(float(loss.detach().float().item())) + "\n")
        return original(self, loss, **kwargs)

    backward.__wrapped__ = original  # type: ignore[attr-defined]
    cls.backward = backward  # type: ignore[attr-defined]
    setattr(cls, _PATCHED, True)


def _after_import(name: str) -> None:
    if name == "torch":
        import torch

        torch.manual_seed(int(os.environ["ECOSYSTEM_SEED"]))
        return
    if name == "accelerate":
        from accelerate.accelerator import Accelerator  # the real package here
    else:
        from overdrive.accelerator import Accelerator
    record_backward(Accelerator)


class _Wrapped(importlib.abc.Loader):
    """A package's own loader, then what the hook does after it (``_after_import``)."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        name = module.__name__
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        _after_import(name)


class _Hook(importlib.abc.MetaPathFinder):
    """Before ``torchvision`` loads, makes it loadable; after the engine package loads
    (``accelerate``, or ``overdrive`` behind the alias), wraps its ``backward``; after torch
    loads, seeds it."""

    def __init__(self, record: bool, seed: bool) -> None:
        self.names = {"torch"} if seed else set()
        if record:
            self.names |= {"accelerate", "overdrive"}
        self.declared = False

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname == "torchvision" and not self.declared:
            self.declared = True
            declare_torchvision_ops()
            return None
        if fullname not in self.names:
            return None
        spec = None
        for finder in [f for f in sys.meta_path if f is not self]:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find else None
            if spec is not None:
                break
        if spec is None or spec.loader is None or isinstance(spec.loader, _Wrapped):
            return spec
        spec.loader = _Wrapped(spec.loader)
        return spec


if __name__ == "sitecustomize":  # not when a test imports this file to check its helpers
    sys.meta_path.insert(
        0, _Hook(record=bool(os.environ.get("ECOSYSTEM_OUT")), seed="ECOSYSTEM_SEED" in os.environ)
    )
