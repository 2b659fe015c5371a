"""Context parallelism written as Hugging Face Accelerate's loop; prints ``RESULT {json}`` rows.

A tiny transformers Llama (SDPA attention, built from a config) trains under FSDP2 with each
step in ``accelerator.maybe_context_parallel(buffers=[input_ids, position_ids, labels])``:
the ``cp`` processes of a data-parallel rank read the same batch and each keeps two chunks
of its sequence. Every process also trains an unsplit copy on the whole global batch (the
one-process reference), and again in other orders of summation (the measured noise). The
labels are the next tokens, shifted before the split, so every chunk holds as many tokens.

The layout comes from ``--cp N`` (``ParallelismConfig(cp_size=N)`` and FSDP2 in code; leave
it out to take both from the launch flags) and the number of processes. ``--save DIR``:
save the state halfway and the full model at the end; ``--resume DIR``: resume from that
state (any layout with the same global batch) and save the full model at the end.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent))

from reference import train_other_orders, train_reference  # noqa: E402
from tiny_llama import tiny_llama  # noqa: E402

from overdrive import (  # noqa: E402
    Accelerator,
    DataLoaderConfiguration,
    FullyShardedDataParallelPlugin,
    ParallelismConfig,
)

STEPS, SEQ, VOCAB = 8, 16, 128


def loss_of(model: nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
    """Next-token cross entropy of (input ids, position ids, labels), labels already shifted."""
    input_ids, position_ids, labels = batch
    logits = model(input_ids=input_ids, position_ids=position_ids).logits
    return nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())


def split(tokens: torch.Tensor) -> list[torch.Tensor]:
    """(input ids, position ids, labels), each its own tensor (the block resizes them)."""
    input_ids = tokens[:, :-1].clone()
    positions = torch.arange(SEQ).expand_as(input_ids).clone()
    return [input_ids, positions, tokens[:, 1:].clone()]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cp", type=int, default=0)
    parser.add_argument("--batch", type=int, default=2, help="per data-parallel rank")
    parser.add_argument("--global_batch", type=int, default=2)
    parser.add_argument("--comm", default=None, help="cp_comm_strategy")
    parser.add_argument("--save", default=None)
    parser.add_argument("--resume", default=None)
    args = parser.parse_args()

    kwargs: dict = {}
    if args.cp:
        from overdrive.utils import TorchContextParallelConfig

        handler = TorchContextParallelConfig(cp_comm_strategy=args.comm) if args.comm else None
        kwargs["parallelism_config"] = ParallelismConfig(cp_size=args.cp, cp_handler=handler)
        kwargs["fsdp_plugin"] = FullyShardedDataParallelPlugin(
            fsdp_version=2, state_dict_type="SHARDED_STATE_DICT"
        )
    acc = Accelerator(
        cpu=True, dataloader_config=DataLoaderConfiguration(exact_resume=True), **kwargs
    )
    g = torch.Generator().manual_seed(5)
    data = TensorDataset(torch.randint(0, VOCAB, (STEPS * args.global_batch, SEQ + 1), generator=g))

    model = tiny_llama(layers=2, vocab=VOCAB, seq=SEQ)
    initial = copy.deepcopy(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loader = DataLoader(data, batch_size=args.batch)
    model, opt, loader = acc.prepare(model, opt, loader)
    assert loader.total_batch_size == args.global_batch, loader.total_batch_size

    start = 0
    if args.resume:
        acc.load_state(str(Path(args.resume) / "half"))
        start = STEPS // 2
    losses, norms, local_lengths, same_batches = [], [], [], True
    for step, (tokens,) in enumerate(loader, start=start):
        batch = split(tokens)
        firsts = acc.gather(tokens[:, :1].float().reshape(1, -1))
        with acc.maybe_context_parallel(
            buffers=batch, buffer_seq_dims=[1, 1, 1], no_restore_buffers=set(batch)
        ):
            local_lengths.append(int(batch[0].shape[1]))
            loss = loss_of(model, batch)
            acc.backward(loss)
            norms.append(float(acc.clip_grad_norm_(model.parameters(), 1.0)))
            opt.step()
            opt.zero_grad()
        losses.append(acc.reduce(loss.detach(), "mean").item())
        layout = acc.strategy.topology.layout
        same_batches &= all(
            torch.equal(firsts[r], firsts[r - r % layout.cp]) for r in range(acc.num_processes)
        )
        if args.save and step + 1 == STEPS // 2:
            acc.save_state(str(Path(args.save) / "half"))

    row: dict = {}
    if not args.resume:
        batches = [split(t) for (t,) in DataLoader(data, batch_size=args.global_batch)]
        ref = copy.deepcopy(initial)
        ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
        row["ref_losses"], row["ref_norms"] = train_reference(ref, ref_opt, batches, loss_of)
        traces, _ = train_other_orders(
            initial,
            lambda m: torch.optim.AdamW(m.parameters(), lr=1e-2),
            batches,
            loss_of,
            orders=[n for n in (2, 4) if n <= args.global_batch],
        )
        # attention summed in another order too: the math kernel instead of the flash one
        with sdpa_kernel([SDPBackend.MATH]):
            math_ref = copy.deepcopy(initial)
            math_opt = torch.optim.AdamW(math_ref.parameters(), lr=1e-2)
            math_losses, math_norms = train_reference(math_ref, math_opt, batches, loss_of)
        traces["noise_losses"].append(math_losses)
        traces["noise_norms"].append(math_norms)
        row.update(traces)
    out = args.save or args.resume
    if out:
        acc.save_model(model, str(Path(out) / ("resumed" if args.resume else "final")))
    acc.wait_for_everyone()
    if acc.is_main_process:
        names, sizes = acc.strategy.topology.layout.mesh_dims()
        row |= {
            "rank": acc.process_index,
            "strategy": acc.strategy.name,
            "layout": acc.strategy.topology.layout.degrees(),
            "mesh": dict(zip(names, sizes, strict=True)),
            "losses": losses,
            "norms": norms,
            "local_lengths": local_lengths,
            "same_batches": bool(same_batches),
            "fsdp_applied": any(type(m).__name__.startswith("FSDP") for m in model.modules()),
        }
        print("RESULT " + json.dumps(row))


if __name__ == "__main__":
    main()
