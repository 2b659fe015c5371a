"""The import hook: ``accelerate`` and ``accelerate.X.Y`` resolve to ``overdrive`` and ``overdrive.X.Y``."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from overdrive.alias.metadata import COMPAT_VERSION, find_distributions

ALIAS = "accelerate"
TARGET = "overdrive"


def target_name(fullname: str) -> str | None:
    """The overdrive module an ``accelerate...`` name stands for, or None for other names."""
    if fullname == ALIAS:
        return TARGET
    if fullname.startswith(ALIAS + "."):
        return TARGET + fullname[len(ALIAS) :]
    return None


class AliasPackage(ModuleType):
    """``accelerate`` itself: every attribute is overdrive's, except the version, which is the
    Hugging Face Accelerate release overdrive answers for (libraries compare it to decide
    which of their code paths to take; ``overdrive.__version__`` stays overdrive's own)."""

    def __init__(self, target: ModuleType) -> None:
        super().__init__(ALIAS, target.__doc__)

        self.__dict__["_target"] = target
        self.__version__ = COMPAT_VERSION
        self.__path__ = list(getattr(target, "__path__", []))
        self.__file__ = target.__file__

    def __getattr__(self, name: str) -> object:
        return getattr(self.__dict__["_target"], name)

    def __dir__(self) -> list[str]:
        return sorted(set(dir(self.__dict__["_target"])) | {"__version__"})


class AliasLoader(importlib.abc.Loader):
    """Hands back the already imported overdrive module, so both names share one module object
    (the top-level package: an :class:`AliasPackage` in front of it)."""

    def __init__(self, target: ModuleType) -> None:
        self.target = target
        self.target_spec = target.__spec__

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return AliasPackage(self.target) if spec.name == ALIAS else self.target

    def exec_module(self, module: ModuleType) -> None:
        if isinstance(module, AliasPackage):
            return  # its own module object: the alias spec stays on it
        # importlib stamped the alias spec onto the shared module; overdrive's own spec must win
        # so reloads, pickling and ``__name__`` keep pointing at the real module.
        module.__spec__ = self.target_spec
        module.__loader__ = self.target_spec.loader if self.target_spec else None


class AliasFinder(importlib.abc.MetaPathFinder):
    """A meta-path finder answering only for ``accelerate`` names; everything else passes through."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        name = target_name(fullname)
        if name is None:
            return None
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                return None
            raise
        is_package = hasattr(module, "__path__")
        spec = importlib.machinery.ModuleSpec(fullname, AliasLoader(module), is_package=is_package)
        if is_package:
            spec.submodule_search_locations = list(module.__path__)
        return spec

    def find_distributions(self, context: object = None) -> list[Any]:
        """The ``accelerate`` distribution metadata for ``importlib.metadata``."""

        return find_distributions(context)


def drop_alias_modules() -> None:
    """Forget every ``accelerate`` entry in ``sys.modules`` (the overdrive modules stay)."""
    for name in [n for n in sys.modules if target_name(n) is not None]:
        del sys.modules[name]
