"""Compare the weights two example runs wrote (``weights-rank{N}.pt``, one list of
``{"initial": state, "final": state}`` per rank, one entry per model the example built)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


def _load(folder: Path) -> dict[str, list[dict[str, dict[str, torch.Tensor]]]]:
    return {p.name: torch.load(p) for p in sorted(folder.glob("weights-rank*.pt"))}


def max_abs_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float | None:
    """The largest absolute difference between two state dicts (None when their names or
    shapes differ)."""
    if a.keys() != b.keys() or any(a[k].shape != b[k].shape for k in a):
        return None
    diffs = [(a[k].double() - b[k].double()).abs().max().item() for k in a if a[k].numel()]
    return max(diffs, default=0.0)


def compare(first: Path, second: Path) -> dict[str, Any]:
    """The final weights of every rank and model of two runs: the largest difference, whether
    they are bitwise equal, and why no comparison was possible when it was not."""
    theirs, ours = _load(first), _load(second)
    if not theirs or theirs.keys() != ours.keys():
        return {"max_abs_diff": None, "bitwise": False, "note": "different weight files"}
    worst, bitwise = 0.0, True
    for rank, models in theirs.items():
        if len(models) != len(ours[rank]):
            return {"max_abs_diff": None, "bitwise": False, "note": "different model counts"}
        for a, b in zip(models, ours[rank]):
            diff = max_abs_diff(a["final"], b["final"])
            if diff is None:
                return {"max_abs_diff": None, "bitwise": False, "note": "different shapes"}
            worst = max(worst, diff)
            bitwise = bitwise and all(torch.equal(a["final"][k], b["final"][k]) for k in a["final"])
    return {"max_abs_diff": worst, "bitwise": bitwise}


def moved(folder: Path) -> float | None:
    """How far training moved rank 0's last model from its initial weights."""
    models = _load(folder).get("weights-rank0.pt")
    return max_abs_diff(models[-1]["initial"], models[-1]["final"]) if models else None
