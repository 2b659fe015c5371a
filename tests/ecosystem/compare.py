"""What two ecosystem runs left behind, compared: the losses each rank recorded, the weights
the script saved at the end, and what its checkpoints hold.

A run's folder holds ``losses-rank{N}.jsonl`` and ``engine-rank{N}.json`` (written by the
adaptation layer, ``adapt/sitecustomize.py``) and ``out/``, the script's output folder:
every ``*.safetensors`` under it outside ``checkpoint-*`` is the run's final weights.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch

from tests.examples.compare import max_abs_diff

CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def checkpoints(out: Path) -> list[str]:
    """The ``checkpoint-N`` folders in ``out``, oldest first (by N)."""
    names = [p.name for p in out.iterdir() if p.is_dir() and CHECKPOINT.match(p.name)]
    return sorted(names, key=lambda n: int(CHECKPOINT.match(n).group(1)))  # type: ignore[union-attr]


def resume_checkpoint(out: Path, spec: str) -> str:
    """The checkpoint a resume case starts from: ``spec`` itself, or for ``second-newest``
    the older of the two newest (so the resumed run has steps left to train)."""
    if spec != "second-newest":
        return spec
    names = checkpoints(out)
    if len(names) < 2:
        raise ValueError(f"{out} holds {names}: no second-newest checkpoint to resume from")
    return names[-2]


def safetensors_in(folder: Path, skip_checkpoints: bool = True) -> dict[str, dict[str, Any]]:
    """Every ``*.safetensors`` file under ``folder`` (its path relative to it -> tensors),
    leaving out those inside ``checkpoint-*`` folders unless asked."""
    from safetensors.torch import load_file

    files: dict[str, dict[str, Any]] = {}
    for path in sorted(folder.rglob("*.safetensors")):
        rel = path.relative_to(folder)
        if skip_checkpoints and any(CHECKPOINT.match(part) for part in rel.parts[:-1]):
            continue
        files[str(rel)] = load_file(str(path))
    return files


def compare_weights(
    first: dict[str, dict[str, Any]], second: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """Two runs' weight files: the largest difference and whether every tensor is bitwise
    equal; a note instead when the files, names or shapes differ."""
    if not first:
        return {"max_abs_diff": None, "bitwise": False, "note": "no weights saved"}
    if first.keys() != second.keys():
        only = sorted(set(first) ^ set(second))
        return {"max_abs_diff": None, "bitwise": False, "note": f"different files: {only}"}
    worst, bitwise = 0.0, True
    for name in first:
        a, b = first[name], second[name]
        diff = max_abs_diff(a, b)
        if diff is None:
            return {"max_abs_diff": None, "bitwise": False, "note": f"different tensors in {name}"}
        worst = max(worst, diff)
        bitwise = bitwise and all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)
    return {"max_abs_diff": worst, "bitwise": bitwise}


def read_losses(run: Path) -> dict[str, list[float]]:
    """Each rank's recorded losses (``rank0`` -> one value per ``backward`` call)."""
    losses = {}
    for path in sorted(run.glob("losses-rank*.jsonl")):
        rank = path.stem.split("-", 1)[1]
        losses[rank] = [float(line) for line in path.read_text().split()]
    return losses


def read_facts(run: Path) -> dict[str, dict[str, Any]]:
    """Each rank's engine facts (``rank0`` -> distributed type, processes, precision ...)."""
    return {
        p.stem.split("-", 1)[1]: json.loads(p.read_text())
        for p in sorted(run.glob("engine-rank*.json"))
    }


def compare_losses(first: dict[str, list[float]], second: dict[str, list[float]]) -> dict[str, Any]:
    """Two runs' per-rank losses: equal (the same count, bitwise), else the largest
    difference over the common steps, or a note when the ranks or counts differ."""
    if not first:
        return {"equal": False, "note": "no losses recorded"}
    if first.keys() != second.keys():
        return {"equal": False, "note": f"ranks {sorted(first)} vs {sorted(second)}"}
    steps = {len(v) for v in first.values()}
    if any(len(first[r]) != len(second[r]) for r in first):
        counts = {r: (len(first[r]), len(second[r])) for r in first}
        return {"equal": False, "note": f"different step counts {counts}"}
    diff = max((abs(a - b) for r in first for a, b in zip(first[r], second[r])), default=0.0)
    return {"equal": diff == 0.0, "max_abs_diff": diff, "steps": max(steps)}


def resumed_tail(full: dict[str, list[float]], resumed: dict[str, list[float]]) -> dict[str, Any]:
    """Whether a resumed run's losses are the last steps of the uninterrupted run's."""
    tails = {r: full.get(r, [])[len(full.get(r, [])) - len(v) :] for r, v in resumed.items()}
    return compare_losses(tails, resumed) if resumed else {"equal": False, "note": "no losses"}


def checkpoint_report(out: Path, kept: int | None, holds: tuple[str, ...]) -> dict[str, Any]:
    """The ``checkpoint-*`` folders a run kept, whether their number is ``kept``, and which
    of the entries each must hold (``holds``, what the script's save hook writes) are missing."""
    names = checkpoints(out) if out.is_dir() else []
    missing = {n: [h for h in holds if not (out / n / h).exists()] for n in names}
    missing = {n: m for n, m in missing.items() if m}
    ok = bool(names) and not missing and (kept is None or len(names) == kept)
    return {"kept": names, "missing": missing, "ok": ok}


def compare_checkpoint_files(first: Path, second: Path, holds: tuple[str, ...]) -> dict[str, Any]:
    """The weights the save hooks wrote (``holds`` in each kept checkpoint) in two runs."""
    a: dict[str, dict[str, Any]] = {}
    b: dict[str, dict[str, Any]] = {}
    for name in checkpoints(first) if first.is_dir() else []:
        for entry in holds:
            for side, root in ((a, first), (b, second)):
                target = root / name / entry
                if target.is_dir():
                    side.update(
                        {f"{name}/{entry}/{k}": v for k, v in safetensors_in(target).items()}
                    )
                elif target.is_file():
                    side.update(
                        {f"{name}/{k}": v for k, v in safetensors_in(target.parent).items()
                         if k == entry}
                    )  # fmt: skip
    return compare_weights(a, b)
