"""One engine's run of the Trainer bench: transformers' Trainer trains a tiny Llama (a causal
LM on generated token sequences) and reports every optimizer step's wall time.

    worker.py --out DIR [--steps 24] [--batch 8] [--seq 64]

Started by ``accelerate launch`` (Hugging Face Accelerate) or ``overdrive launch`` (the
alias): the same script, unchanged, under either engine.
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


class StepTimes(TrainerCallback):
    """Wall time of each optimizer step (forward, backward, all-reduce, step) and the minor
    page faults it took (memory the allocator had given back to the system and asked for
    again)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.faults: list[int] = []
        self._start = 0.0
        self._faults = 0

    def on_step_begin(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        self._faults = _minor_faults()
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        self.times.append(time.perf_counter() - self._start)
        self.faults.append(_minor_faults() - self._faults)


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int, seq: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 512, (n, seq), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=64)
    args = p.parse_args()
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=344,
                         num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4)  # fmt: skip
    model = LlamaForCausalLM(config)
    timer = StepTimes()
    training = TrainingArguments(
        output_dir=args.out,
        per_device_train_batch_size=args.batch,
        max_steps=args.steps,
        learning_rate=1e-3,
        logging_steps=1000,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        dataloader_num_workers=0,
        seed=0,
    )
    data = Tokens(args.batch * args.steps * 4, args.seq)
    trainer = Trainer(model=model, args=training, train_dataset=data, callbacks=[timer])
    result = trainer.train()
    if trainer.is_world_process_zero():
        import accelerate

        print("RESULT " + json.dumps({
            "engine": accelerate.__file__,
            "times": timer.times,
            "faults": timer.faults,
            "loss": result.training_loss,
        }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
