"""Per-step time of a composed layout, pipeline x tensor x data parallelism: prepared by
overdrive vs the same layout written by hand (``init_device_mesh``, ``parallelize_module``,
``fully_shard``, ``PipelineStage`` and ``Schedule1F1B`` on the ``pp`` group).

``--dp`` replicates each stage (``megatron_lm_config``'s degrees; the replicas average
their gradients after the schedule); ``--shard`` shards each stage with FSDP2 instead
(``ParallelismConfig(pp_size=, dp_shard_size=, tp_size=, pp_loss_fn=)``, each block and the
stage's root a unit, as by hand; as many micro-batches as stages, that layout's default).
The pipeline degree is what the launched processes leave after ``--tp`` and ``--dp`` or
``--shard``. Both
copies live in one launch and alternate in blocks of ``--steps`` timed steps, so a slow
phase of a shared machine hits both. Prints the step times as ``RESULT {json}`` on the main
process.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.pipelining import PipelineStage, Schedule1F1B
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: shared helpers

from launched import report_alternating  # noqa: E402
from pp_worker import mse  # noqa: E402
from worker import PLAN, build  # noqa: E402

from overdrive import (  # noqa: E402
    Accelerator,
    FullyShardedDataParallelPlugin,
    MegatronLMPlugin,
    ParallelismConfig,
)


def by_hand(
    model: nn.Sequential, mesh: DeviceMesh, micro: int, shard: bool
) -> tuple[nn.Module, Any]:
    """This process's stage (an even slice of the blocks), split over ``tp``, sharded over
    ``dp`` when ``shard``, and its 1F1B schedule."""
    pp_rank, pp = mesh["pp"].get_local_rank(), mesh["pp"].size()
    per = len(model) // pp
    stage_module = nn.Sequential(*list(model)[pp_rank * per : (pp_rank + 1) * per])
    if mesh["tp"].size() > 1:
        plan: dict[str, Any] = {}
        for i in range(len(stage_module)):
            plan[f"{i}.up"], plan[f"{i}.down"] = ColwiseParallel(), RowwiseParallel()
        parallelize_module(stage_module, mesh["tp"], plan)
    if shard:
        for block in stage_module:
            fully_shard(block, mesh=mesh["dp"], reshard_after_forward=True)
        fully_shard(stage_module, mesh=mesh["dp"], reshard_after_forward=False)
    device = torch.device("cpu")
    stage = PipelineStage(stage_module, pp_rank, pp, device, group=mesh["pp"].get_group())
    return stage_module, Schedule1F1B(stage, micro, loss_fn=mse)


def overdrive_accelerator(pp: int, tp: int, micro: int, shard: int) -> Accelerator:
    """With ``shard`` above 1, the whole layout and the loss in ``ParallelismConfig`` under
    FSDP2. Otherwise the degrees as ``megatron_lm_config`` gives them (the data-parallel
    degree is what the processes leave), the tensor-parallel plan in ``ParallelismConfig``."""
    plan = PLAN if tp > 1 else None
    if shard > 1:
        sizes = {"pp_size": pp, "dp_shard_size": shard, "tp_size": tp}
        layout = ParallelismConfig(**sizes, tp_plan=plan, pp_loss_fn=mse)
        fsdp = FullyShardedDataParallelPlugin(
            fsdp_version=2,
            auto_wrap_policy="TRANSFORMER_BASED_WRAP",
            transformer_cls_names_to_wrap=["Block"],
        )
        return Accelerator(cpu=True, parallelism_config=layout, fsdp_plugin=fsdp)
    plugin = MegatronLMPlugin(
        pp_degree=pp, tp_degree=tp, num_micro_batches=micro, pipeline_loss_fn=mse
    )
    config = ParallelismConfig(tp_size=tp, tp_plan=PLAN) if tp > 1 else None
    return Accelerator(cpu=True, megatron_lm_plugin=plugin, parallelism_config=config)


def average_over(replicas: DeviceMesh, model: nn.Module) -> None:
    """What each replica of a stage does after the schedule: average its gradients."""
    if replicas.size() == 1:
        return
    for p in model.parameters():
        if p.grad is not None:
            grad = getattr(p.grad, "_local_tensor", p.grad)
            dist.all_reduce(grad, group=replicas.get_group())
            grad.div_(replicas.size())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--dp", type=int, default=1, help="replicas of each stage")
    p.add_argument("--shard", type=int, default=1, help="FSDP2 shards of each stage")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--micro", type=int, default=4)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--steps", type=int, default=10)
    args = p.parse_args()
    if args.dp > 1 and args.shard > 1:
        p.error("--dp and --shard: one of them (HSDP stages are not benched)")
    dp = max(args.dp, args.shard)
    pp = int(os.environ["WORLD_SIZE"]) // (args.tp * dp)
    micro = pp if args.shard > 1 else args.micro
    acc = overdrive_accelerator(pp, args.tp, micro, args.shard)
    ours = build(args.layers, args.width)
    ours_opt = torch.optim.AdamW(ours.parameters(), lr=1e-4)
    ours, ours_opt = acc.prepare(ours, ours_opt)
    names = ("pp", "dp", "tp")
    mesh = init_device_mesh("cpu", (pp, dp, args.tp), mesh_dim_names=names)
    raw, schedule = by_hand(build(args.layers, args.width), mesh, micro, args.shard > 1)
    raw_opt = torch.optim.AdamW(raw.parameters(), lr=1e-4)
    units = [sum(isinstance(m, FSDPModule) for m in s.modules()) for s in (ours.stage_module, raw)]
    assert units[0] == units[1], f"FSDP2 units: overdrive {units[0]}, by hand {units[1]}"
    first, last = mesh["pp"].get_local_rank() == 0, mesh["pp"].get_local_rank() == pp - 1
    g = torch.Generator().manual_seed(1 + mesh["dp"].get_local_rank())
    x, y = torch.randn(args.batch, args.width, generator=g), torch.randn(args.batch, args.width)

    def step_ours() -> None:
        acc.backward(ours(x, labels=y).loss)
        ours_opt.step()
        ours_opt.zero_grad()

    def step_raw() -> None:
        schedule.step(*((x,) if first else ()), target=y if last else None, losses=[])
        if args.shard == 1:  # FSDP2 reduce-scatters inside the schedule's last backward
            average_over(mesh["dp"], raw)
        raw_opt.step()
        raw_opt.zero_grad()

    impls = {"raw": step_raw, "overdrive": step_ours}
    report_alternating(acc, impls, rounds=args.rounds, steps=args.steps)


if __name__ == "__main__":
    main()
