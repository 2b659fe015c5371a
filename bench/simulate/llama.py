"""A Llama-3-shaped causal LM built from a config (no weights) and stepped once on short
sequences: the script ``run.py`` simulates. ``--shape 8b|70b|405b|tiny``, ``--batch N``,
``--seq L`` (tokens per sequence, default 128), ``--sequence_parallel`` (under tensor
parallelism, the norms and the residual stream split over the sequence, as TorchTitan's
Llama plan does)."""

from __future__ import annotations

import argparse

from transformers import LlamaConfig, LlamaForCausalLM

from overdrive.accelerator import Accelerator
from overdrive.arguments.plugins import ParallelismConfig
from overdrive.simulate.plan_script import train_steps

SHAPES = {
    # hidden, layers, heads, kv heads, intermediate, vocabulary (Llama 3 / 3.1 model cards)
    "tiny": (32, 2, 4, 2, 64, 64),
    "8b": (4096, 32, 32, 8, 14336, 128256),
    "70b": (8192, 80, 64, 8, 28672, 128256),
    "405b": (16384, 126, 128, 8, 53248, 128256),
}
SEQ = 128


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", choices=sorted(SHAPES), default="8b")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=SEQ)
    parser.add_argument("--sequence_parallel", action="store_true")
    args = parser.parse_args()
    hidden, layers, heads, kv_heads, intermediate, vocab = SHAPES[args.shape]
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=8192,
        use_cache=False,  # training keeps no key/value cache (TorchTitan's model has none)
    )
    # the sizes come from the launch (PARALLELISM_CONFIG_*); only the plan's style is set here
    layout = ParallelismConfig(sequence_parallel=True) if args.sequence_parallel else None
    acc = Accelerator(parallelism_config=layout)
    train_steps(acc, LlamaForCausalLM(config), vocab, args.seq, args.batch)


if __name__ == "__main__":
    main()
