"""The training step ``overdrive plan`` simulates: a transformers causal LM built from its
config (no weights), AdamW, ``--batch`` samples of ``--seq_len`` tokens per step, through the
real ``Accelerator``. ``python plan_script.py --model CONFIG --seq_len L --batch B``."""

from __future__ import annotations

import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset

from overdrive.accelerator import Accelerator


def main() -> None:
    from transformers import AutoConfig, AutoModelForCausalLM

    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--seq_len", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True)
    args = parser.parse_args()
    config = AutoConfig.from_pretrained(args.model)
    acc = Accelerator()
    model = AutoModelForCausalLM.from_config(config)
    train_steps(acc, model, config.vocab_size, args.seq_len, args.batch)


def train_steps(
    acc: Accelerator, model: torch.nn.Module, vocab: int, seq_len: int, batch: int
) -> None:
    """AdamW steps of ``model`` (a causal LM) on random tokens, ``batch`` sequences of
    ``seq_len`` a step, through ``acc``: what a simulation of a layout runs."""
    ids = torch.randint(0, vocab, (4 * batch * acc.num_processes, seq_len))  # 4 steps a rank
    loader = DataLoader(TensorDataset(ids), batch_size=batch)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model, opt, loader = acc.prepare(model, opt, loader)
    for (tokens,) in loader:
        acc.backward(model(input_ids=tokens, labels=tokens).loss)
        opt.step()
        opt.zero_grad()


if __name__ == "__main__":
    main()
