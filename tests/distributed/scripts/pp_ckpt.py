"""Pipeline checkpoints across layouts; prints a ``RESULT {json}`` row on the main process.

Trains a tiny transformers Llama (4 layers) for 10 steps of a global batch of 4, clipping
the global norm at 1.0, under the layout the launch flags give (pipeline parallelism), or
one set in code: ``--fsdp`` (FSDP2 FULL_SHARD, sharded state dicts) or ``--tp N`` (tensor
parallelism). ``--resume NAME`` continues from the state in ``DIR/NAME`` (saved after
``--start`` steps); ``--save NAME --save_at K`` saves the state after step K into
``DIR/NAME`` (``--async_save``: written while training goes on); at the end ``save_model``
writes the full weights into ``DIR/TAG``. The row holds the losses of the steps run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tiny_llama import tiny_llama  # noqa: E402

from overdrive import (  # noqa: E402
    Accelerator,
    DataLoaderConfiguration,
    FullyShardedDataParallelPlugin,
    ParallelismConfig,
)

STEPS, SEQ, VOCAB, GLOBAL_BATCH = 10, 8, 128, 4


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True)
    parser.add_argument("--tag", required=True, help="save_model's folder under DIR")
    parser.add_argument("--fsdp", action="store_true")
    parser.add_argument("--tp", type=int, default=0, help="tensor-parallel degree (in code)")
    parser.add_argument("--batch", type=int, default=4, help="per data-parallel rank")
    parser.add_argument("--resume", default=None)
    parser.add_argument("--start", type=int, default=0, help="steps the resumed state holds")
    parser.add_argument("--save", default=None)
    parser.add_argument("--save_at", type=int, default=0)
    parser.add_argument("--async_save", action="store_true", help="train on while it is written")
    args = parser.parse_args()

    kwargs: dict = {}
    if args.fsdp:
        kwargs["fsdp_plugin"] = FullyShardedDataParallelPlugin(
            fsdp_version=2, sharding_strategy="FULL_SHARD", state_dict_type="SHARDED_STATE_DICT"
        )
    if args.tp:
        kwargs["parallelism_config"] = ParallelismConfig(tp_size=args.tp)
    acc = Accelerator(
        cpu=True, dataloader_config=DataLoaderConfiguration(exact_resume=True), **kwargs
    )
    g = torch.Generator().manual_seed(5)
    data = TensorDataset(torch.randint(0, VOCAB, (STEPS * GLOBAL_BATCH, SEQ), generator=g))
    model = tiny_llama(layers=4, vocab=VOCAB, seq=SEQ)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, opt, loader = acc.prepare(model, opt, DataLoader(data, batch_size=args.batch))
    assert loader.total_batch_size == GLOBAL_BATCH, loader.total_batch_size

    out = Path(args.dir)
    if args.resume:
        acc.load_state(str(out / args.resume))
    losses = []
    for step, batch in enumerate(loader, start=args.start):
        loss = model(input_ids=batch[0], labels=batch[0]).loss
        acc.backward(loss)
        acc.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        losses.append(acc.reduce(loss.detach(), "mean").item())
        if args.save and step + 1 == args.save_at:
            acc.save_state(str(out / args.save), async_save=args.async_save)
    acc.end_training()  # an asynchronous save is complete
    acc.save_model(model, str(out / args.tag))
    if acc.is_main_process:
        row = {"rank": 0, "strategy": acc.strategy.name, "losses": losses}
        print("RESULT " + json.dumps(row))
    acc.wait_for_everyone()


if __name__ == "__main__":
    main()
