"""A tiny transformers Llama trained for 3 steps, counting its collectives per step on the
process group it runs on; every process prints ``RESULT {json}`` with them and the bytes of its
parameters, gradients and optimizer state. Run for real by ``overdrive launch`` and, the same
file, by ``overdrive launch --simulate`` (tests/distributed/test_simulate_matches_real.py)."""

from __future__ import annotations

import json

import torch
from tiny_llama import smallest_llama_config
from torch.utils.data import DataLoader, TensorDataset
from transformers import LlamaForCausalLM

from overdrive.accelerator import Accelerator
from overdrive.simulate.comms import CollectiveCounter, difference
from overdrive.simulate.memory import training_state_bytes

STEPS, BATCH, SEQ, VOCAB = 3, 4, 16, 64


def main() -> None:
    acc = Accelerator(cpu=True)
    ids = torch.randint(0, VOCAB, (STEPS * BATCH * acc.num_processes, SEQ))
    loader = DataLoader(TensorDataset(ids), batch_size=BATCH)
    config = smallest_llama_config(vocab=VOCAB, seq=SEQ)
    model = LlamaForCausalLM(config)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, opt, loader = acc.prepare(model, opt, loader)
    counter = CollectiveCounter()
    marks = [counter.snapshot()]
    state: dict[str, int] = {}
    with counter:
        for (batch,) in loader:
            loss = model(input_ids=batch, labels=batch).loss
            acc.backward(loss)
            opt.step()
            marks.append(counter.snapshot())
            state = training_state_bytes([opt.optimizer])
            opt.zero_grad()
    windows = [difference(b, a) for a, b in zip(marks, marks[1:], strict=False)]
    result = {"rank": acc.process_index, "collectives_per_step": windows, "state_bytes": state}
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
