"""``importlib.metadata`` answers for the alias: ``version("accelerate")`` is the version overdrive matches."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Any

# Hugging Face Accelerate's release whose API overdrive targets (Makefile COMPAT_VERSION); transformers
# compares against this, so it is the honest answer to "which accelerate API is here".
COMPAT_VERSION = "1.15.0"


class AliasDistribution(importlib.metadata.Distribution):
    """A distribution named ``accelerate`` that exists only while the alias is installed."""

    def read_text(self, filename: str) -> str | None:
        if filename == "METADATA":
            return (
                "Metadata-Version: 2.1\n"
                "Name: accelerate\n"
                f"Version: {COMPAT_VERSION}\n"
                "Summary: overdrive answering to the name accelerate\n"
            )
        if filename == "top_level.txt":
            return "accelerate\n"
        return None

    def locate_file(self, path: Any) -> Path:
        return Path(__file__).resolve().parents[2] / str(path)  # beside the overdrive package


def find_distributions(context: Any = None) -> list[importlib.metadata.Distribution]:
    """The alias distribution when the query asks for ``accelerate`` (or for every distribution)."""
    name = getattr(context, "name", None)
    if name is not None and name.replace("-", "_").lower() != "accelerate":
        return []
    return [AliasDistribution()]


def real_distributions() -> list[importlib.metadata.Distribution]:
    """Installed ``accelerate`` distributions other than the alias (none without a package of
    that name on the path: that look costs a millisecond, the metadata scan tens, and runs
    at every worker's start)."""
    import importlib.machinery

    if importlib.machinery.PathFinder.find_spec("accelerate") is None:
        return []
    return [
        d
        for d in importlib.metadata.distributions(name="accelerate")
        if not isinstance(d, AliasDistribution)
    ]
