"""A tiny transformers Llama trained for 2 steps, then ``save_state`` into argv[1]. Run for
real by ``overdrive launch`` and, the same file, by ``overdrive launch --simulate``, which
stops it after the steps and measures what its ``save_state`` would write
(tests/distributed/test_simulate_checkpoint.py).

Run for real (``REAL_PEAK=1``), it follows its own memory with the simulation's tracker over
its real tensors, as a simulated rank does over fake ones (from before the model is built,
the step peak from the first forward, the per-module state reset after each optimizer step),
and prints ``PEAK {json}``: its peak in the steps by kind."""

from __future__ import annotations

import json
import os
import sys

import torch
from tiny_llama import smallest_llama_config
from torch.utils.data import DataLoader, TensorDataset
from transformers import LlamaForCausalLM

from overdrive.accelerator import Accelerator

STEPS, BATCH, SEQ, VOCAB = 2, 4, 16, 64


def main() -> None:
    tracker = None
    if os.environ.get("REAL_PEAK"):
        from overdrive.simulate.peak import PeakTracker

        tracker = PeakTracker()
        tracker.__enter__()
    acc = Accelerator(cpu=True)
    ids = torch.randint(0, VOCAB, (STEPS * BATCH * acc.num_processes, SEQ))
    loader = DataLoader(TensorDataset(ids), batch_size=BATCH)
    config = smallest_llama_config(vocab=VOCAB, seq=SEQ)
    model = LlamaForCausalLM(config)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    model, opt, loader, sched = acc.prepare(model, opt, loader, sched)
    for (batch,) in loader:
        acc.backward(model(input_ids=batch, labels=batch).loss)
        opt.step()
        if tracker is not None:
            tracker.reset_mod_stats()  # where the simulation resets it: after the step
        sched.step()
        opt.zero_grad()
    if tracker is not None:
        tracker.__exit__(None, None, None)
        tracker.close()
        print("PEAK " + json.dumps({"rank": acc.process_index, **tracker.step_peak()}), flush=True)
    acc.save_state(sys.argv[1])


if __name__ == "__main__":
    main()
