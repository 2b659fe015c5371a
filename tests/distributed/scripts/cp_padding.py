"""Context parallelism given a padding mask: each process prints ``RESULT {json}`` with the
loss of a batch whose mask is all ones (accepted: causal attention needs no mask) and what
happened to a batch whose second row is padded at the end (refused on every process, not
computed as if unpadded). cp=2 on 2 processes, a tiny Llama under FSDP2."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tiny_llama import tiny_llama  # noqa: E402

from overdrive import Accelerator, FullyShardedDataParallelPlugin, ParallelismConfig  # noqa: E402

SEQ, VOCAB = 16, 128


def step(acc: Accelerator, model: nn.Module, mask: torch.Tensor) -> float:
    """The loss of one forward in the block, the mask split with the ids."""
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, VOCAB, (2, SEQ + 1), generator=g)
    ids, labels = tokens[:, :-1].clone(), tokens[:, 1:].clone()
    positions = torch.arange(SEQ).expand_as(ids).clone()
    buffers = [ids, positions, mask.clone(), labels]
    with acc.maybe_context_parallel(
        buffers=buffers, buffer_seq_dims=[1, 1, 1, 1], no_restore_buffers=set(buffers)
    ):
        logits = model(input_ids=buffers[0], position_ids=buffers[1], attention_mask=buffers[2])
        loss = nn.functional.cross_entropy(logits.logits.flatten(0, 1), buffers[3].flatten())
    return acc.reduce(loss.detach(), "mean").item()


def main() -> None:
    acc = Accelerator(
        cpu=True,
        parallelism_config=ParallelismConfig(cp_size=2),
        fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2),
    )
    model = acc.prepare(tiny_llama(layers=2, vocab=VOCAB, seq=SEQ))
    row: dict = {"rank": acc.process_index}
    row["all_ones_loss"] = step(acc, model, torch.ones(2, SEQ, dtype=torch.long))
    padded = torch.ones(2, SEQ, dtype=torch.long)
    padded[1, -3:] = 0  # in the last chunk only, which process 0 keeps
    try:
        row["padded_loss"] = step(acc, model, padded)
    except Exception as error:  # noqa: BLE001 - reported to the test
        row["padded_error"] = f"{type(error).__name__}: {error}"
    print("RESULT " + json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
