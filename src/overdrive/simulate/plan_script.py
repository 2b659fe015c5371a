"""The training step ``overdrive plan`` simulates: a transformers causal LM built from its
config (no weights), AdamW, ``--batch`` samples of ``--seq_len`` tokens per step, through the
real ``Accelerator``; under context parallelism each step runs in
``accelerator.maybe_context_parallel``, as Hugging Face Accelerate's guide writes it.
``python plan_script.py --model CONFIG --seq_len L --batch B``."""

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
    layout = acc.parallelism_config
    context_parallel = layout is not None and layout.cp_enabled
    # 4 steps a rank; one token more a row under context parallelism: the labels are shifted
    # before the block splits them
    ids = torch.randint(0, vocab, (4 * batch * acc.num_processes, seq_len + context_parallel))
    loader = DataLoader(TensorDataset(ids), batch_size=batch)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model, opt, loader = acc.prepare(model, opt, loader)
    for (tokens,) in loader:
        if context_parallel:
            context_parallel_step(acc, model, tokens, seq_len)
        else:
            acc.backward(model(input_ids=tokens, labels=tokens).loss)
        opt.step()
        opt.zero_grad()


def context_parallel_step(
    acc: Accelerator, model: torch.nn.Module, tokens: torch.Tensor, seq_len: int
) -> torch.Tensor:
    """Forward and backward of one batch (``seq_len`` + 1 tokens a row) in a context-parallel
    block, as Hugging Face Accelerate's guide writes it: each process keeps its chunks of the
    inputs, positions and next-token labels (shifted before the split); the loss."""
    inputs = tokens[:, :seq_len].clone()
    positions = torch.arange(seq_len).expand_as(inputs).clone()
    labels = tokens[:, 1:].clone()
    buffers = [inputs, positions, labels]
    with acc.maybe_context_parallel(buffers, [1, 1, 1], set(buffers)):
        logits = model(input_ids=inputs, position_ids=positions).logits
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
        acc.backward(loss)
    return loss


if __name__ == "__main__":
    main()
