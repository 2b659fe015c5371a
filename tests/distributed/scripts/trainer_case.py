"""A plain transformers Trainer script driven by a JSON spec; writes what it saw as JSON.

Usage: trainer_case.py SPEC_JSON

The spec: ``out`` (result file), ``output_dir``, and optional ``batch``, ``accum``,
``max_steps``, ``save_steps``, ``stop_after`` (end training after that step, as an interrupted
run would), ``resume`` (a checkpoint folder), ``evaluate_first`` (``trainer.evaluate()`` before
training), ``bf16``, ``samples``, ``deepspeed`` (a config
dict), ``fsdp`` / ``fsdp_config`` (TrainingArguments' own); or ``from_pretrained`` (a folder of
merged weights: write the model's config beside them, load them, report their sums). Nothing
here knows about overdrive: it is the script a Trainer user writes.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)


class Tokens(torch.utils.data.Dataset):
    """Deterministic random token sequences (labels = inputs)."""

    def __init__(self, n: int, length: int = 16) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 128, (n, length), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class StopAfter(TrainerCallback):
    """End training after a given step, the way a job that ran out of time ends."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if state.global_step >= self.step:
            control.should_training_stop = True
        return control


def main() -> None:
    spec = json.loads(sys.argv[1])
    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        vocab_size=128,
        max_position_embeddings=32,
    )
    if "from_pretrained" in spec:  # load merged weights as a user would, and report them
        config.save_pretrained(spec["from_pretrained"])
        loaded = LlamaForCausalLM.from_pretrained(spec["from_pretrained"])
        sums = {k: v.double().sum().item() for k, v in loaded.state_dict().items()}
        with open(spec["out"], "w") as f:
            json.dump({"weights": sums}, f)
        return
    model = LlamaForCausalLM(config)
    extra: dict[str, Any] = {}
    for key in ("deepspeed", "fsdp", "fsdp_config"):
        if key in spec:
            extra[key] = spec[key]
    save_steps = spec.get("save_steps")
    args = TrainingArguments(
        output_dir=spec["output_dir"],
        max_steps=spec.get("max_steps", 6),
        per_device_train_batch_size=spec.get("batch", 4),
        gradient_accumulation_steps=spec.get("accum", 1),
        learning_rate=1e-3,
        report_to=[],
        save_strategy="steps" if save_steps else "no",
        save_steps=save_steps or 500,
        use_cpu=True,
        bf16=spec.get("bf16", False),
        logging_steps=1,
        seed=0,
        data_seed=0,
        dataloader_drop_last=True,
        **extra,
    )
    callbacks = [StopAfter(spec["stop_after"])] if "stop_after" in spec else []
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=Tokens(spec.get("samples", 64)),
        eval_dataset=Tokens(32),
        callbacks=callbacks,
    )
    first_eval = trainer.evaluate() if spec.get("evaluate_first") else None
    trainer.train(resume_from_checkpoint=spec.get("resume"))
    history = trainer.state.log_history
    result = {
        "world": args.world_size,
        "steps": [h["step"] for h in history if "loss" in h],
        "losses": [h["loss"] for h in history if "loss" in h],
        "global_step": trainer.state.global_step,
        "first_eval": first_eval,
        "wrapped": type(trainer.model_wrapped).__name__,
    }
    if spec.get("save_model"):
        trainer.save_model(spec["save_model"])
    state = trainer.accelerator.get_state_dict(trainer.model)
    if args.process_index == 0:
        result["weights"] = {k: v.double().sum().item() for k, v in state.items()}
        with open(spec["out"], "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
