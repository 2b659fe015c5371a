"""Pipeline parallelism written as the ordinary training loop; prints ``RESULT {json}`` rows.

``--case llama``: a tiny transformers Llama (4 layers) split by its repeated layers; ``--case
mlp``: a plain ``nn.Sequential`` with a loss given in code. The main process also trains an
unsplit copy on the whole global batches (the one-process reference); its row carries both
loss traces, the clipped norms, an eval loss under ``torch.no_grad()``, which layers each
stage kept and whether the processes of one pipeline read the same batches. ``--save DIR``
saves the state halfway (``save_state``) and the full weights at the end with ``save_model``
(and the reference's next to them, the initial weights, and a second reference that sums each
batch's gradient over the pipeline's micro-batches: two orders of summation, whose difference
measures the arithmetic noise); ``--resume DIR`` continues from that state and saves the full
weights again. ``--optimizer sgd`` trains with plain SGD and no clipping, so a wrong gradient
scale shows in the weights in proportion; ``--scale_error F`` multiplies the pipeline's loss
division by F (a deliberate bug, for the test that shows such a bug is caught).
``--optimizer adamw,sgd`` trains once per optimizer in the same processes, each run with an
Accelerator and model of its own (one launch instead of two), and prints a row for each; a
``--save`` folder then gets a subfolder per optimizer.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent))

from reference import train_other_orders, train_reference  # noqa: E402
from tiny_llama import tiny_llama  # noqa: E402

from overdrive import (  # noqa: E402
    Accelerator,
    DataLoaderConfiguration,
    MegatronLMPlugin,
    ParallelismConfig,
)
from overdrive.strategies.pipeline import PipelineParallelStrategy  # noqa: E402

STEPS, SEQ, VOCAB = 10, 8, 128


def build_llama() -> nn.Module:
    return tiny_llama(layers=4, vocab=VOCAB, seq=SEQ)


def build_mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 16)
    )


def mse(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(output, target)


def loss_of(case: str, model: nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
    if case == "llama":
        return model(input_ids=batch[0], labels=batch[0]).loss
    if isinstance(model, nn.Sequential):  # the unsplit reference
        return mse(model(batch[0]), batch[1])
    return model(batch[0], labels=batch[1]).loss  # pipelined: the loss given in code


def dataset(case: str, samples: int) -> TensorDataset:
    g = torch.Generator().manual_seed(5)
    if case == "llama":
        return TensorDataset(torch.randint(0, VOCAB, (samples, SEQ), generator=g))
    return TensorDataset(
        torch.randn(samples, 16, generator=g), torch.randn(samples, 16, generator=g)
    )


def optimizer_for(name: str, model: nn.Module) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(model.parameters(), lr=0.1)
    return torch.optim.AdamW(model.parameters(), lr=1e-2)


def inject_scale_error(factor: float) -> None:
    """A deliberate bug: the pipeline's loss (so every gradient) scaled by ``factor``."""
    scaled = PipelineParallelStrategy._scaled

    def wrong(self: PipelineParallelStrategy, loss_fn: Any) -> Any:
        right = scaled(self, loss_fn)
        return lambda output, target: right(output, target) * factor

    PipelineParallelStrategy._scaled = wrong  # type: ignore[method-assign]


def save_weights(model: nn.Module, folder: Path) -> None:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(folder / "model.safetensors"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", choices=["llama", "mlp"], default="llama")
    parser.add_argument("--batch", type=int, default=4, help="per data-parallel rank")
    parser.add_argument("--global_batch", type=int, default=4)
    parser.add_argument("--save", default=None)
    parser.add_argument("--resume", default=None, help="load DIR/half, save DIR/resumed")
    parser.add_argument("--mixed_precision", default="no")
    parser.add_argument("--split", default="", help="pipeline split points, e.g. 4")
    parser.add_argument("--accum", type=int, default=1, help="batches per optimizer step")
    parser.add_argument("--optimizer", default="adamw", help="adamw, sgd, or several: adamw,sgd")
    parser.add_argument("--scale_error", type=float, default=1.0)
    parser.add_argument("--parallelism", default="", help="ParallelismConfig sizes, k=v,...")
    parser.add_argument("--no_loss_fn", action="store_true", help="give no loss in code")
    parser.add_argument(
        "--backend_clips",
        action="store_true",
        help="the loop does not clip (it reads the norm); megatron_lm_config.gradient_clipping does",
    )
    args = parser.parse_args()

    if args.scale_error != 1.0:
        inject_scale_error(args.scale_error)
    names = args.optimizer.split(",")
    assert set(names) <= {"adamw", "sgd"}, names
    for name in names:
        save = args.save
        if save and len(names) > 1:
            save = str(Path(save) / name)
        run(args, name, save)


def run(args: argparse.Namespace, optimizer: str, save: str | None) -> None:
    """Train the pipeline and the one-process reference with ``optimizer``; print the row."""
    split = [int(x) for x in args.split.split(",")] if args.split else None
    layout: dict = {}
    loss_fn = mse if args.case == "mlp" and not args.no_loss_fn else None
    if args.parallelism:  # e.g. pp_size=2,dp_shard_size=2: the layout in code, FSDP2 stages
        sizes = {k: int(v) for k, v in (kv.split("=") for kv in args.parallelism.split(","))}
        config = ParallelismConfig(**sizes, pp_loss_fn=loss_fn, pp_split_points=split)
        layout = {"parallelism_config": config}
    else:
        plugin = MegatronLMPlugin(pipeline_loss_fn=loss_fn, pipeline_split_points=split)
        layout = {"megatron_lm_plugin": plugin}
    acc = Accelerator(
        cpu=True,
        mixed_precision=args.mixed_precision,
        gradient_accumulation_steps=args.accum,
        dataloader_config=DataLoaderConfiguration(exact_resume=True),  # overdrive's exact resume
        **layout,
    )
    data = dataset(args.case, STEPS * args.global_batch)
    model = build_llama() if args.case == "llama" else build_mlp()
    ref = copy.deepcopy(model)
    initial = copy.deepcopy(model)
    if save and acc.is_main_process:
        save_weights(model, Path(save) / "initial")
    # Calls of a module inside the first layer: twice per batch on its stage when
    # recomputed (a pre-hook: the recomputation stops inside the layer's last op).
    calls: list[int] = []
    probe = model.model.layers[0].mlp if args.case == "llama" else model[0]
    probe.register_forward_pre_hook(lambda *a: calls.append(1))
    opt = optimizer_for(optimizer, model)
    ref_opt = optimizer_for(optimizer, ref)
    clip = float("inf") if optimizer == "sgd" else 1.0
    loader = DataLoader(data, batch_size=args.batch)
    model, opt, loader = acc.prepare(model, opt, loader)
    assert loader.total_batch_size == args.global_batch, loader.total_batch_size

    start = 0
    if args.resume:
        acc.load_state(str(Path(args.resume) / "half"))
        start = STEPS // 2
    losses, norms, same_batches = [], [], True
    for step, batch in enumerate(loader, start=start):
        with acc.accumulate(model):
            loss = loss_of(args.case, model, batch)
            acc.backward(loss)
            if acc.sync_gradients:
                limit = float("inf") if args.backend_clips else clip
                norms.append(float(acc.clip_grad_norm_(model.parameters(), limit)))
            opt.step()
            opt.zero_grad()
        losses.append(acc.reduce(loss.detach(), "mean").item())
        per_rank = acc.gather(batch[0].float().reshape(1, -1)).reshape(acc.num_processes, -1)
        layout = acc.strategy.layout  # type: ignore[attr-defined]
        first = {layout.dp_rank(r): r for r in reversed(range(acc.num_processes))}
        same_batches &= all(
            torch.equal(per_rank[r], per_rank[first[layout.dp_rank(r)]])
            for r in range(acc.num_processes)
        )
        if save and step + 1 == STEPS // 2:
            acc.save_state(str(Path(save) / "half"))

    model.eval()
    with torch.no_grad():
        first_batch = next(iter(loader))
        eval_loss = float(loss_of(args.case, model, first_batch))
        out = model(first_batch[0])  # no labels: forward only, the output on the last stage
    width = [SEQ, VOCAB] if args.case == "llama" else [16]
    if model.stage.is_last:  # type: ignore[union-attr]
        forward_only_ok = out.loss is None and list(out.logits.shape) == [args.batch, *width]
    else:
        forward_only_ok = out.loss is None and out.logits is None
    forward_only_ok = acc.gather(torch.tensor([float(forward_only_ok)])).min().item() == 1.0
    # gather_for_metrics: one copy per pipeline, 7 samples back exactly, in order
    eval_data = dataset(args.case, 7)
    seen = [acc.gather_for_metrics(b[0]) for b in acc.prepare_data_loader(DataLoader(eval_data, 2))]
    gathered_exactly = torch.equal(torch.cat(seen), eval_data.tensors[0])
    full_state = acc.get_state_dict(model)  # every stage's weights on the main process
    model.train()
    stage = model.stage  # type: ignore[union-attr]
    kept = acc.gather(torch.tensor([[acc.process_index, *stage.layers]])).tolist()
    kept_params = sum(p.numel() for p in model.parameters())
    opt_params = sum(p.numel() for g in opt.param_groups for p in g["params"])
    stage_ok = torch.tensor([float(kept_params == opt_params)])
    stage_ok = acc.gather(stage_ok).min().item()
    if save or args.resume:
        out = Path(save or args.resume)
        acc.save_model(model, str(out / ("resumed" if args.resume else "pipelined")))

    if acc.is_main_process:
        ref_batches = [] if args.resume else DataLoader(data, batch_size=args.global_batch)
        ref_losses, ref_norms = train_reference(
            ref, ref_opt, ref_batches, lambda m, b: loss_of(args.case, m, b), args.accum, clip=clip
        )
        with torch.no_grad():
            ref_eval = float(loss_of(args.case, ref.eval(), next(iter(loader))))
        # The same run summed in other orders (the pipeline's micro-batches, sample by
        # sample): their spread is the noise the tests measure the pipeline against.
        micro_batches = acc.strategy.pp.micro_batches  # type: ignore[attr-defined]
        noise, others = train_other_orders(
            initial,
            lambda m: optimizer_for(optimizer, m),
            ref_batches,
            lambda m, b: loss_of(args.case, m, b),
            args.accum,
            orders=(micro_batches, args.global_batch),
            clip=clip,
            eval_batch=next(iter(loader)),
        )
        if save:
            save_weights(ref, Path(save) / "reference")
            save_weights(others[micro_batches], Path(save) / "reference_micro")
        row = {
            "rank": acc.process_index,
            "optimizer": optimizer,
            "strategy": acc.strategy.name,
            "schedule": acc.strategy.pp.schedule,  # type: ignore[attr-defined]
            "losses": losses,
            "ref_losses": ref_losses,
            "norms": norms,
            "ref_norms": ref_norms,
            "eval_loss": eval_loss,
            "ref_eval_loss": ref_eval,
            "same_batches": bool(same_batches),
            "stage_layers": kept,
            "optimizer_holds_stage_only": stage_ok == 1.0,
            "forward_only_ok": forward_only_ok,
            "gathered_exactly": gathered_exactly,
            "state_dict_is_whole": sorted(full_state) == sorted(ref.state_dict()),
            "pp_rank": acc.pipeline_parallel_rank,
            # how the chain laid out this process's stage: DTensor mesh dims and placements
            "layouts": sorted(
                {
                    f"{p.device_mesh.mesh_dim_names}:{p.placements}"
                    for p in model.parameters()
                    if hasattr(p, "device_mesh")
                }
            ),
            "probe_calls": len(calls),
            **noise,
        }
        print("RESULT " + json.dumps(row))
    acc.wait_for_everyone()


if __name__ == "__main__":
    main()
