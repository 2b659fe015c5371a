"""A tiny transformers Llama trained by a plain loop under the DeepSpeed config an example
file gives (launched with ``--config_file``), for
tests/distributed/test_deepspeed_example_configs.py.

The model is built with ``AutoModelForCausalLM.from_config`` after the Accelerator exists, so
with ``zero3_init_flag`` under ZeRO-3 transformers creates it already partitioned; a plain
``nn.Linear`` built inside ``accelerator.cpu_ram_efficient_init()`` is too. It learns a fixed
next-token rule; ``save_model`` writes the full weights. Prints ``RESULT {json}`` on the main
process: the settings in force, whether the model was born partitioned, first and last loss.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch.utils.data import DataLoader, TensorDataset
from transformers import AutoModelForCausalLM, LlamaConfig

from overdrive.accelerator import Accelerator

CONFIG = LlamaConfig(
    vocab_size=32,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=16,
)


def sequences(n: int) -> torch.Tensor:
    """Token sequences following next = (3 * token + 1) mod vocab, from random starts."""
    g = torch.Generator().manual_seed(0)
    start = torch.randint(0, CONFIG.vocab_size, (n, 1), generator=g)
    rows = [start]
    for _ in range(11):
        rows.append((3 * rows[-1] + 1) % CONFIG.vocab_size)
    return torch.cat(rows, dim=1)


def _partitioned(module: torch.nn.Module) -> bool:
    """Built by ``deepspeed.zero.Init``: every parameter a ZeRO-3 placeholder."""
    params = list(module.parameters())
    return all(hasattr(p, "ds_id") and p.numel() == 0 for p in params)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--max_norm", type=float, default=None)
    parser.add_argument("--epochs", type=int, default=6)
    args = parser.parse_args()
    acc = Accelerator()
    with acc.cpu_ram_efficient_init():  # a plain nn.Module is built partitioned in here
        plain = torch.nn.Linear(64, 64)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(CONFIG)  # transformers partitions by itself
    plain_partitioned = _partitioned(plain)
    partitioned = _partitioned(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    loader = DataLoader(TensorDataset(sequences(32 * acc.num_processes)), batch_size=2)
    model, optimizer, loader = acc.prepare(model, optimizer, loader)
    losses: list[float] = []
    window: list[float] = []
    for _ in range(args.epochs):
        for (ids,) in loader:
            with acc.accumulate(model):
                loss = model(input_ids=ids, labels=ids).loss
                acc.backward(loss)
                if args.max_norm is not None and acc.sync_gradients:
                    acc.clip_grad_norm_(model.parameters(), args.max_norm)
                optimizer.step()
                optimizer.zero_grad()
            window.append(float(acc.reduce(loss.detach().float(), "mean")))
            if acc.sync_gradients:
                losses.append(sum(window) / len(window))
                window = []
    state = acc.get_state_dict(model)
    out = Path(args.out)
    acc.save_model(model, out / "model")
    if acc.is_main_process:
        saved = load_file(str(out / "model" / "model.safetensors"))
        same = sorted(saved) == sorted(state) and all(
            torch.equal(saved[k], state[k]) for k in saved
        )
        row = {
            "rank": 0,
            "type": str(acc.distributed_type),
            "stage": acc.strategy.config.zero_stage,
            "offload_optimizer": acc.strategy.config.offload_optimizer,
            "offload_param": acc.strategy.config.offload_param,
            "mixed_precision": acc.strategy.config.mixed_precision,
            "accumulation": acc.gradient_accumulation_steps,
            "clipping": acc.strategy.config.gradient_clipping,
            "born_partitioned": partitioned,
            "plain_born_partitioned": plain_partitioned,
            "first": losses[0],
            "last": losses[-1],
            "steps": len(losses),
            "saved_equals_state": same,
            "saved_dtype": str(next(iter(saved.values())).dtype),
            "optimizer": type(optimizer.optimizer).__name__,
        }
        print("RESULT " + json.dumps(row), flush=True)
    acc.wait_for_everyone()


if __name__ == "__main__":
    main()
