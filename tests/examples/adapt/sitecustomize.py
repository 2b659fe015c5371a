"""Put first on the path of an example's processes (``tests/examples/run.py`` does): once
``transformers`` is imported, its Auto classes build the tiny stand-ins of
``examples_standins`` instead of downloading. The example files themselves are unchanged
but for the mechanical rename."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from types import ModuleType
from typing import Any


class _AfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``transformers`` with the other finders, then patches it once it is loaded."""

    def __init__(self) -> None:
        self._loader: Any = None

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "transformers" or self._loader is not None:
            return None
        others = [f for f in sys.meta_path if f is not self]
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        for finder in others:
            if spec is not None:
                break
            spec = finder.find_spec(fullname, path, target)  # type: ignore[attr-defined]
        if spec is None or spec.loader is None:
            return None
        self._loader = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        import examples_standins

        # transformers swaps itself for a lazy module in sys.modules while it loads.
        examples_standins.patch_transformers(sys.modules[module.__name__])


if os.environ.get("EXAMPLES_ADAPT") == "1":
    sys.meta_path.insert(0, _AfterImport())
