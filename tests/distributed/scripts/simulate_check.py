"""A tiny transformers Llama trained for 3 steps, counting its collectives per step on the
process group it runs on; every process prints ``RESULT {json}`` with them and the bytes of its
parameters, gradients and optimizer state, then, given a folder (argv[1]), calls
``save_state`` into it. Run for real by ``overdrive launch`` and, the same file, by
``overdrive launch --simulate``, which stops it after its steps and measures what its
``save_state`` would write (tests/distributed/test_simulate_matches_real.py).

Run for real with ``REAL_PEAK=1``, it also follows its own memory with the simulation's
tracker over its real tensors, as a simulated rank does over fake ones (from before the model
is built, the step peak from the first forward, the per-module state reset after each
optimizer step); ``RESULT`` then holds ``peak``: its peak in the steps by kind, and
``peak_moment``: where it was reached.

Under context parallelism (``--parallelism_config_cp_size``) each step runs in
``accelerator.maybe_context_parallel`` on (input ids, position ids, labels shifted before the
split), the loss computed from the logits, as Hugging Face Accelerate's guide writes it."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import torch
from tiny_llama import smallest_llama_config
from torch.utils.data import DataLoader, TensorDataset
from transformers import LlamaForCausalLM

from overdrive.accelerator import Accelerator
from overdrive.simulate.comms import CollectiveCounter, difference
from overdrive.simulate.memory import training_state_bytes
from overdrive.simulate.plan_script import context_parallel_step

STEPS, BATCH, SEQ, VOCAB = 3, 4, 16, 64


def _peak_tracker() -> Any:
    if not os.environ.get("REAL_PEAK"):
        return None
    from overdrive.simulate.peak import PeakTracker

    tracker = PeakTracker()
    tracker.__enter__()
    return tracker


def main() -> None:
    tracker = _peak_tracker()
    acc = Accelerator(cpu=True)
    layout = acc.parallelism_config
    context_parallel = layout is not None and layout.cp_enabled
    ids = torch.randint(0, VOCAB, (STEPS * BATCH * acc.num_processes, SEQ + 1))
    loader = DataLoader(TensorDataset(ids), batch_size=BATCH)
    model = LlamaForCausalLM(smallest_llama_config(vocab=VOCAB, seq=SEQ))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    model, opt, loader, sched = acc.prepare(model, opt, loader, sched)
    counter = CollectiveCounter()
    marks = [counter.snapshot()]
    state: dict[str, int] = {}
    with counter:
        for (batch,) in loader:
            if context_parallel:
                context_parallel_step(acc, model, batch, SEQ)
            else:
                tokens = batch[:, :SEQ]
                acc.backward(model(input_ids=tokens, labels=tokens).loss)
            opt.step()
            if tracker is not None:
                tracker.reset_mod_stats()  # where the simulation resets it: after the step
            marks.append(counter.snapshot())
            state = training_state_bytes([opt.optimizer])
            sched.step()
            opt.zero_grad()
    windows = [difference(b, a) for a, b in zip(marks, marks[1:], strict=False)]
    result = {"rank": acc.process_index, "collectives_per_step": windows, "state_bytes": state}
    if tracker is not None:
        tracker.__exit__(None, None, None)
        tracker.close()
        result["peak"] = tracker.step_peak()
        result["peak_moment"] = tracker.peak_moment()
    print("RESULT " + json.dumps(result), flush=True)
    if len(sys.argv) > 1:
        acc.save_state(sys.argv[1])


if __name__ == "__main__":
    main()
