"""Worker: save DTensor state trees with save_shards and/or load saved ones onto this group.

--save DIR: every process writes its pieces of a model-like and an optimizer-like tree,
  sharded on 1-D and 2-D meshes (``saving_layout``), then loads them back in that layout.
--load DIR (repeatable): loads each saved checkpoint onto this group's own layout
  (``loading_layout``: a different split, other dims) with place_like templates.
Every check compares against ``expected()``; one RESULT line per rank lists the mismatches.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

Layout = dict[str, tuple[Any, list[Any]]]


def expected() -> dict[str, torch.Tensor]:
    """The global tensors; sizes chosen to split unevenly over 2, 3 and 4 processes."""
    return {
        "w": torch.arange(21, dtype=torch.float32).reshape(7, 3),
        "b": (torch.arange(5) / 3).to(torch.bfloat16),
        "g": torch.arange(48, dtype=torch.float64).reshape(6, 8),
        "h": torch.arange(14, dtype=torch.float32).reshape(7, 2) - 5,
        "r": torch.tensor([1.5, -2.0, 3.25, 0.0]),
    }


def expected_optimizer() -> dict[str, Any]:
    full = expected()
    return {
        "state": {
            "w": {"exp_avg": full["w"] * 0.5, "step": torch.tensor(3.0)},
            "g": {"exp_avg": full["g"] - 1, "step": torch.tensor(3.0)},
        },
        "param_groups": [{"lr": 0.01, "betas": (0.9, 0.999), "params": ["w", "g"]}],
    }


def saving_layout(world: int) -> Layout:
    """1-D Shard(0) for w and b; on a (world/2, 2) mesh: g as Shard(0), Shard(1) and h as
    Replicate(), Shard(0) (HSDP: each box held by world/2 processes); r replicated."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard

    flat = init_device_mesh("cpu", (world,))
    grid = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("replicate", "shard"))
    return {
        "w": (flat, [Shard(0)]),
        "b": (flat, [Shard(0)]),
        "g": (grid, [Shard(0), Shard(1)]),
        "h": (grid, [Replicate(), Shard(0)]),
        "r": (flat, [Replicate()]),
    }


def loading_layout(world: int) -> Layout:
    """Everything on one 1-D mesh; g now split by columns."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard

    flat = init_device_mesh("cpu", (world,))
    split = {"w": Shard(0), "b": Shard(0), "g": Shard(1), "h": Shard(0), "r": Replicate()}
    return {k: (flat, [p]) for k, p in split.items()}


def build(layout: Layout, zeros: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """(model tree, optimizer tree) as DTensors in ``layout``; zeros: templates to load into."""
    from torch.distributed.tensor import distribute_tensor

    def dt(name: str, full: torch.Tensor) -> Any:
        mesh, placements = layout[name]
        return distribute_tensor(torch.zeros_like(full) if zeros else full, mesh, placements)

    model: dict[str, Any] = {k: dt(k, v) for k, v in expected().items()}
    model["buf"] = torch.zeros(3) if zeros else torch.tensor([7.0, 8.0, 9.0])
    optim = expected_optimizer()
    for name, state in optim["state"].items():
        state["exp_avg"] = dt(name, state["exp_avg"])
    return model, optim


def compare(got: Any, want: Any, template: Any, path: str, out: list[str]) -> int:
    """Checks done; every mismatch appended to ``out``."""
    from torch.distributed.tensor import DTensor

    if isinstance(want, dict):
        if not isinstance(got, dict) or got.keys() != want.keys():
            out.append(f"{path}: keys {list(got)} != {list(want)}")
            return 1
        return sum(compare(got[k], want[k], template[k], f"{path}/{k}", out) for k in want)
    if isinstance(template, DTensor):
        if not isinstance(got, DTensor) or got.placements != template.placements:
            out.append(f"{path}: not a DTensor placed like {template.placements}: {got!r}")
            return 1
        local_ok = torch.equal(got.to_local(), template.to_local())  # template holds the truth
        full = got.full_tensor()
        if not (local_ok and full.dtype == want.dtype and torch.equal(full, want)):
            out.append(f"{path}: values differ (local {local_ok})")
        return 1
    ok = torch.equal(got, want) if isinstance(want, torch.Tensor) else got == want
    if not ok:
        out.append(f"{path}: {got!r} != {want!r}")
    return 1


def load_and_check(directory: Path, layout: Layout, out: list[str]) -> int:
    from overdrive.checkpoint.shards import load_shards, place_like

    truths = build(layout, zeros=False)
    templates = build(layout, zeros=True)
    wants = ({**expected(), "buf": torch.tensor([7.0, 8.0, 9.0])}, expected_optimizer())
    checked = 0
    for stem, template, truth, want in zip(("model_0", "optimizer_0"), templates, truths, wants):
        got = load_shards(directory, stem, what=stem, place=place_like(template, what=stem))
        checked += compare(got, want, truth, f"{directory.name}/{stem}", out)
    return checked


def single_file_save_refuses(tree: dict[str, Any], directory: Path) -> str:
    """The error a plain single-file save gives for DTensor leaves ('' if it saved)."""
    from overdrive.checkpoint.errors import CheckpointError
    from overdrive.checkpoint.serialization import save_tree

    directory.mkdir()
    try:
        save_tree(tree, directory, "model_0", what="model 0")
    except CheckpointError as exc:
        return str(exc)
    return ""


def main() -> None:
    import torch.distributed as dist

    from overdrive.checkpoint.shards import save_shards

    parser = argparse.ArgumentParser()
    parser.add_argument("--save", type=Path)
    parser.add_argument("--load", type=Path, action="append", default=[])
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mismatches: list[str] = []
    checked, written, refused = 0, [], ""
    if args.save:
        args.save.mkdir(parents=True, exist_ok=True)
        model, optim = build(saving_layout(world), zeros=False)
        for stem, tree in (("model_0", model), ("optimizer_0", optim)):
            paths = save_shards(tree, args.save, stem, rank=rank, what=stem)
            written += [p.name for p in paths]
        dist.barrier()
        checked += load_and_check(args.save, saving_layout(world), mismatches)
        refused = single_file_save_refuses(model, args.save / f"plain_{rank}")
    for directory in args.load:
        checked += load_and_check(directory, loading_layout(world), mismatches)
    result = {"rank": rank, "checked": checked, "mismatches": mismatches, "written": written}
    result["single_file_error"] = refused
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
