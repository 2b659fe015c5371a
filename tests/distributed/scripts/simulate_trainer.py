"""transformers' Trainer trains a tiny Llama for 3 steps, counting its collectives per step on
the process group it runs on (a callback); every process prints ``RESULT {json}`` with them and
the bytes of its parameters, gradients and optimizer state. Run for real by ``overdrive
launch`` and, the same file, by ``overdrive launch --simulate``
(tests/distributed/test_simulate_trainer.py)."""

from __future__ import annotations

import json
import sys

import torch
from tiny_llama import smallest_llama_config
from transformers import LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments

from overdrive.simulate.comms import CollectiveCounter, difference
from overdrive.simulate.memory import training_state_bytes

STEPS, BATCH, SEQ, VOCAB = 3, 4, 16, 64


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        self.ids = torch.randint(0, VOCAB, (n, SEQ), generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class Counted(TrainerCallback):
    """The collectives of each optimizer step, from the training's start."""

    def __init__(self) -> None:
        self.counter = CollectiveCounter()
        self.marks: list = []
        self.state: dict[str, int] = {}

    def on_train_begin(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        self.counter.__enter__()
        self.marks.append(self.counter.snapshot())

    def on_step_end(self, args, state, control, optimizer=None, **kwargs):  # type: ignore[no-untyped-def]
        self.marks.append(self.counter.snapshot())
        self.state = training_state_bytes([optimizer])

    def on_train_end(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        self.counter.__exit__(None, None, None)


def main() -> None:
    torch.manual_seed(0)
    config = smallest_llama_config(vocab=VOCAB, seq=SEQ)
    counted = Counted()
    training = TrainingArguments(
        output_dir=sys.argv[1],
        per_device_train_batch_size=BATCH,
        max_steps=STEPS,
        learning_rate=1e-3,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    trainer = Trainer(
        model=LlamaForCausalLM(config),
        args=training,
        train_dataset=Tokens(BATCH * STEPS * 4),
        callbacks=[counted],
    )
    trainer.train()
    marks = counted.marks
    windows = [difference(b, a) for a, b in zip(marks, marks[1:], strict=False)]
    result = {
        "rank": trainer.args.process_index,
        "collectives_per_step": windows,
        "state_bytes": counted.state,
    }
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
