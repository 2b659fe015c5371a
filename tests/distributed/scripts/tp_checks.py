"""Tensor parallelism written as the ordinary training loop; prints ``RESULT {json}`` rows.

``--case llama``: a tiny transformers Llama split by its own plan; ``--case mlp``: a plain
``nn.Sequential`` split by a user-given plan (with ``--sp``: a LayerNorm between a rowwise
and a colwise Linear, run ``sequence_parallel`` on slices of the sequence). Either way every process also trains an
unsplit copy on the whole global batch (the one-process reference) and the rows carry both
loss traces, the clipped norms, what ``gather_for_metrics`` returned and whether the
processes of one tensor-parallel group read the same batches.

The layout comes from the flags: ``--tp N`` (``ParallelismConfig(tp_size=N)`` in code; leave
it out to take it from the launch flags) and ``--fsdp`` (FSDP2 FULL_SHARD over the
data-parallel processes, sharded checkpoints); ``--sp``: sequence parallelism
(``ParallelismConfig(sequence_parallel=True)`` for the Llama; the rows then record the shape
each norm's input had inside the forward). ``--save DIR`` / ``--resume DIR``: save the
state halfway and the full model at the end / resume from that state (any layout with
the same global batch), save the full model and the state at the end too. ``--reload DIR``:
load that end state and save the full model again (a layout change back).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent))

from reference import train_reference  # noqa: E402
from tiny_llama import tiny_llama  # noqa: E402

from overdrive import (  # noqa: E402
    Accelerator,
    DataLoaderConfiguration,
    FullyShardedDataParallelPlugin,
    ParallelismConfig,
)

STEPS, SEQ, VOCAB = 10, 8, 128
MLP_PLAN = {"0": "colwise", "2": "rowwise"}
SP_MLP_PLAN = {
    "0": "colwise",
    "2": "rowwise",
    "3": "sequence_parallel",
    "4": "colwise",
    "6": "rowwise",
}


def build_llama(tied: bool = False) -> nn.Module:
    return tiny_llama(layers=2, vocab=VOCAB, seq=SEQ, tied=tied)


def build_mlp(sp: bool = False) -> nn.Module:
    torch.manual_seed(0)
    layers = [nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16)]
    if sp:
        layers += [nn.LayerNorm(16), nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16)]
    return nn.Sequential(*layers)


def record_norm_inputs(model: nn.Module, shapes: dict[str, list[int]]) -> None:
    """The local shape of each norm's input the first time it runs (a slice under SP)."""

    def hook(name: str, module: nn.Module, args: tuple) -> None:
        x = args[0]
        local = x.to_local() if hasattr(x, "to_local") else x
        shapes.setdefault(name, list(local.shape))

    for name, module in model.named_modules():
        if type(module).__name__.endswith("Norm"):
            module.register_forward_pre_hook(lambda m, a, n=name: hook(n, m, a))


def loss_of(case: str, model: nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
    if case == "llama":
        return model(input_ids=batch[0], labels=batch[0]).loss
    return nn.functional.mse_loss(model(batch[0]), batch[1])


def dataset(case: str, samples: int) -> TensorDataset:
    g = torch.Generator().manual_seed(5)
    if case == "llama":
        return TensorDataset(torch.randint(0, VOCAB, (samples, SEQ), generator=g))
    if case == "sp_mlp":  # (batch, sequence, features)
        return TensorDataset(
            torch.randn(samples, SEQ, 16, generator=g), torch.randn(samples, SEQ, 16, generator=g)
        )
    return TensorDataset(
        torch.randn(samples, 16, generator=g), torch.randn(samples, 16, generator=g)
    )


def accelerator(args: argparse.Namespace) -> Accelerator:
    kwargs: dict = {}
    if args.tp:
        plan = {"mlp": MLP_PLAN, "sp_mlp": SP_MLP_PLAN}.get(args.case)
        sp = args.sp and args.case == "llama"
        shards = {"dp_shard_size": args.hybrid} if args.hybrid else {}
        kwargs["parallelism_config"] = ParallelismConfig(
            tp_size=args.tp, tp_plan=plan, sequence_parallel=sp, **shards
        )
    if args.fsdp or args.hybrid:
        kwargs["fsdp_plugin"] = FullyShardedDataParallelPlugin(
            fsdp_version=2,
            sharding_strategy="HYBRID_SHARD" if args.hybrid else "FULL_SHARD",
            state_dict_type="SHARDED_STATE_DICT",
            cpu_ram_efficient_loading=args.efficient,
        )
    exact = DataLoaderConfiguration(exact_resume=True)  # overdrive's exact resume
    return Accelerator(
        cpu=True, gradient_accumulation_steps=args.accum, dataloader_config=exact, **kwargs
    )


def same_batch_in_each_tp_group(acc: Accelerator, batch: torch.Tensor) -> bool:
    """Every process's batch against the batch of its data-parallel rank's first process."""
    layout = getattr(acc.strategy, "layout", None)
    per_rank = acc.gather(batch.float().reshape(1, -1)).reshape(acc.num_processes, -1)
    if layout is None:
        return True
    first = {layout.dp_rank(r): r for r in reversed(range(acc.num_processes))}
    return all(
        torch.equal(per_rank[r], per_rank[first[layout.dp_rank(r)]])
        for r in range(acc.num_processes)
    )


def optimizer_fraction(opt: torch.optim.Optimizer, model: nn.Module) -> float:
    """Elements of AdamW's exp_avg this process holds, over the whole model's parameters."""
    raw = getattr(opt, "optimizer", opt)
    local = [
        getattr(s["exp_avg"], "to_local", lambda t=s["exp_avg"]: t)() for s in raw.state.values()
    ]
    return sum(t.numel() for t in local) / sum(p.numel() for p in model.parameters())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", choices=["llama", "mlp", "sp_mlp"], default="llama")
    parser.add_argument("--sp", action="store_true", help="sequence parallelism (Llama)")
    parser.add_argument("--tp", type=int, default=0)
    parser.add_argument("--fsdp", action="store_true")
    parser.add_argument(
        "--hybrid", type=int, default=0, help="HYBRID_SHARD: processes per shard group"
    )
    parser.add_argument("--tied", action="store_true", help="Llama with tied embeddings")
    parser.add_argument(
        "--efficient",
        action="store_true",
        help="fsdp_cpu_ram_efficient_loading: built in cpu_ram_efficient_init(), empty off rank 0",
    )
    parser.add_argument("--batch", type=int, default=2, help="per data-parallel rank")
    parser.add_argument("--global_batch", type=int, default=4)
    parser.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step")
    parser.add_argument(
        "--backend_clips",
        action="store_true",
        help="the loop does not clip (it reads the norm); megatron_lm_config.gradient_clipping does",
    )
    parser.add_argument("--save", default=None)
    parser.add_argument("--resume", default=None)
    parser.add_argument("--reload", default=None, help="load DIR/end, save_model DIR/reloaded")
    args = parser.parse_args()

    acc = accelerator(args)
    data = dataset(args.case, STEPS * args.global_batch)

    def build() -> nn.Module:
        return build_llama(args.tied) if args.case == "llama" else build_mlp(args.case == "sp_mlp")

    ref = build()  # seeded: the same weights as the model's on the main process
    with acc.cpu_ram_efficient_init() if args.efficient else contextlib.nullcontext():
        model = build()
    born_empty = any(p.is_meta for p in model.parameters())
    # Calls of one layer's module: twice per step when recomputed. A pre-hook, as the
    # recomputation stops inside the layer's last op once it has what backward needs.
    calls: list[int] = []
    probe = model.model.layers[0].mlp if args.case == "llama" else model[0]
    probe.register_forward_pre_hook(lambda *a: calls.append(1))
    norm_inputs: dict[str, list[int]] = {}
    record_norm_inputs(model, norm_inputs)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    loader = DataLoader(data, batch_size=args.batch)
    model, opt, loader = acc.prepare(model, opt, loader)
    born_empty_per_rank = acc.gather(torch.tensor([float(born_empty)])).tolist()
    assert loader.total_batch_size == args.global_batch, loader.total_batch_size

    if args.reload:
        acc.load_state(str(Path(args.reload) / "end"))
        acc.save_model(model, str(Path(args.reload) / "reloaded"))
        if acc.is_main_process:
            print("RESULT " + json.dumps({"rank": 0, "strategy": acc.strategy.name}))
        return

    start = 0
    if args.resume:
        acc.load_state(str(Path(args.resume) / "half"))
        start = STEPS // 2
        ref = None  # the reference is the uninterrupted run's saved model
    losses, norms, same_batches = [], [], True
    for step, batch in enumerate(loader, start=start):
        with acc.accumulate(model):
            loss = loss_of(args.case, model, batch)
            acc.backward(loss)
            if acc.sync_gradients:
                acc.clip_grad_value_(model.parameters(), 100.0)  # no effect on these numbers
                limit = float("inf") if args.backend_clips else 1.0
                norms.append(float(acc.clip_grad_norm_(model.parameters(), limit)))
            opt.step()
            opt.zero_grad()
        losses.append(acc.reduce(loss.detach(), "mean").item())
        same_batches &= same_batch_in_each_tp_group(acc, batch[0])
        if args.save and step + 1 == STEPS // 2:
            acc.save_state(str(Path(args.save) / "half"))

    ref_losses: list[float] = []
    ref_norms: list[float] = []
    if ref is not None:
        ref_losses, ref_norms = train_reference(
            ref,
            ref_opt,
            DataLoader(data, batch_size=args.global_batch),
            lambda m, b: loss_of(args.case, m, b),
            args.accum,
        )

    # Evaluation: 7 samples over the data-parallel ranks, gathered back exactly, in order.
    eval_data = dataset(args.case, 7)
    eval_loader = acc.prepare_data_loader(DataLoader(eval_data, batch_size=2))
    seen, seen_objects = [], []
    for b in eval_loader:
        seen.append(acc.gather_for_metrics(b[0]))
        firsts = [float(x) for x in b[0].flatten(1)[:, 0]]
        seen_objects += acc.gather_for_metrics(firsts, use_gather_object=True)
    expected = eval_data.tensors[0]
    gathered_exactly = torch.equal(torch.cat(seen), expected) and seen_objects == [
        float(x) for x in expected.flatten(1)[:, 0]
    ]
    data_parallel_copies = acc.reduce(torch.ones(()), "sum").item()
    mine = torch.tensor([[acc.tensor_parallel_rank, acc.data_parallel_rank]])
    coordinates = acc.gather(mine).tolist()  # (tp rank, dp rank) of every process

    out = args.save or args.resume
    if out:
        acc.save_model(model, str(Path(out) / ("resumed" if args.resume else "final")))
    if args.resume:
        acc.save_state(str(Path(args.resume) / "end"))
    acc.wait_for_everyone()
    if acc.is_main_process:
        row = {
            "rank": acc.process_index,
            "strategy": acc.strategy.name,
            "type": str(acc.distributed_type),
            "losses": losses,
            "ref_losses": ref_losses,
            "norms": norms,
            "ref_norms": ref_norms,
            "same_batches": bool(same_batches),
            "gathered_exactly": gathered_exactly,
            "reduce_counts": data_parallel_copies,
            "coordinates": coordinates,
            "mesh": dict(zip(acc.strategy.mesh.mesh_dim_names, acc.strategy.mesh.shape))
            if hasattr(acc.strategy, "mesh")
            else {},
            "still_tied": args.case == "llama"
            and acc.unwrap_model(model).lm_head.weight
            is acc.unwrap_model(model).model.embed_tokens.weight,
            "probe_calls": len(calls),
            "born_empty": born_empty_per_rank,
            "optimizer_fraction": optimizer_fraction(opt, model),
            "param_types": sorted({type(p).__name__ for p in model.parameters()}),
            "fsdp_applied": any(type(m).__name__.startswith("FSDP") for m in model.modules()),
            # leftover parameters read through local values in forward stay Parameters
            "attributes_are_parameters": all(
                isinstance(getattr(m, n), nn.Parameter)
                for m in model.modules()
                for n, _ in m.named_parameters(recurse=False)
            ),
            "plan": getattr(acc.strategy, "plans", {}) and next(iter(acc.strategy.plans.values())),
            "norm_inputs": norm_inputs,
            # None under plain FSDP: nothing asked for a parallel layout
            "reports_sequence_parallel": getattr(
                acc.parallelism_config, "sequence_parallel", False
            ),
        }
        print("RESULT " + json.dumps(row))


if __name__ == "__main__":
    main()
