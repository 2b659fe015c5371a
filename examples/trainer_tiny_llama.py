"""transformers' Trainer, unchanged, on overdrive: a tiny Llama built from a config, trained on
generated tokens (nothing is downloaded).

    python -m overdrive.run examples/trainer_tiny_llama.py                 # one process
    overdrive launch --num_processes 2 examples/trainer_tiny_llama.py      # two processes

The model goes to ``--output_dir`` (default ``outputs/trainer_tiny_llama``, which git ignores)
as ``model.safetensors`` and ``config.json``, under every backend: with an FSDP config whose
``fsdp_state_dict_type`` is ``SHARDED_STATE_DICT``, Trainer's ``save_model`` writes no weights,
so the accelerator gathers the full ones instead.

Plain ``python examples/trainer_tiny_llama.py`` cannot work: Trainer imports ``accelerate`` by
name, and the two commands above are what make that name answer with overdrive.
Needs transformers: ``pip install -e ".[transformers]"`` in this repository.
"""

from __future__ import annotations

import argparse
import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments


class Tokens(torch.utils.data.Dataset):
    """Random token sequences; each is its own label (causal language modelling)."""

    def __init__(self, count: int, length: int = 16) -> None:
        self.ids = torch.randint(
            0, 128, (count, length), generator=torch.Generator().manual_seed(0)
        )

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[index], "labels": self.ids[index]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", default=os.path.join("outputs", "trainer_tiny_llama"))
    parser.add_argument("--max_steps", type=int, default=8)
    args = parser.parse_args()

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
    training_args = TrainingArguments(
        output_dir=args.output_dir,
        max_steps=args.max_steps,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        logging_steps=4,
        save_strategy="no",
        report_to=[],
        use_cpu=not torch.cuda.is_available(),
        disable_tqdm=True,
    )
    trainer = Trainer(model=LlamaForCausalLM(config), args=training_args, train_dataset=Tokens(64))
    result = trainer.train()
    plugin = getattr(trainer.accelerator.state, "fsdp_plugin", None)
    if trainer.is_fsdp_enabled and "SHARDED" in str(plugin.state_dict_type):
        # Trainer.save_model writes no weights under a sharded state dict: gather the full
        # ones on every process (a collective), and write the config beside them.
        trainer.accelerator.save_model(trainer.model, args.output_dir)
        if trainer.is_world_process_zero():
            trainer.accelerator.unwrap_model(trainer.model).config.save_pretrained(args.output_dir)
    else:
        trainer.save_model()
    trainer.accelerator.wait_for_everyone()
    if trainer.is_world_process_zero():
        saved = ", ".join(sorted(os.listdir(args.output_dir)))
        print(
            f"trained {result.global_step} steps on {training_args.world_size} process(es), "
            f"final loss {result.training_loss:.3f}; model saved to {args.output_dir} ({saved})"
        )


if __name__ == "__main__":
    main()
