"""The workload every variant trains: a small decoder-only transformer and its token batches.

A transformers ``LlamaForCausalLM`` built from a ``LlamaConfig`` (no download) when
transformers imports, else a plain torch decoder of the same shape. Same seed, same weights,
same batches for every variant.
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F


@dataclass(frozen=True)
class Sizes:
    """Shape of the model and of one batch."""

    vocab: int
    hidden: int
    intermediate: int
    layers: int
    heads: int
    seq: int
    batch: int

    @property
    def tokens(self) -> int:
        return self.batch * self.seq


# About 170M parameters, 8k tokens a step: tens of ms a step on an H100, fits twice over.
GPU_SIZES = Sizes(
    vocab=32000, hidden=1024, intermediate=2816, layers=8, heads=16, seq=1024, batch=8
)
# A few ms a step on a CPU core: the smoke run only proves the harness.
SMOKE_SIZES = Sizes(vocab=256, hidden=64, intermediate=128, layers=2, heads=4, seq=32, batch=2)


class DecoderBlock(nn.Module):
    """Pre-norm causal self-attention and a gated MLP, as in Llama."""

    def __init__(self, s: Sizes) -> None:
        super().__init__()
        self.heads = s.heads
        self.attn_norm = nn.RMSNorm(s.hidden)
        self.qkv = nn.Linear(s.hidden, 3 * s.hidden, bias=False)
        self.out = nn.Linear(s.hidden, s.hidden, bias=False)
        self.mlp_norm = nn.RMSNorm(s.hidden)
        self.gate_up = nn.Linear(s.hidden, 2 * s.intermediate, bias=False)
        self.down = nn.Linear(s.intermediate, s.hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).view(b, t, 3, self.heads, -1).unbind(2)
        a = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        x = x + self.out(a.transpose(1, 2).reshape(b, t, d))
        gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class TinyDecoder(nn.Module):
    """Embedding, decoder blocks, norm and head; ``forward(ids)`` returns the LM loss."""

    _no_split_modules = ["DecoderBlock"]  # FSDP units, as transformers models declare them

    def __init__(self, s: Sizes) -> None:
        super().__init__()
        self.embed = nn.Embedding(s.vocab, s.hidden)
        self.layers = nn.ModuleList(DecoderBlock(s) for _ in range(s.layers))
        self.norm = nn.RMSNorm(s.hidden)
        self.head = nn.Linear(s.hidden, s.vocab, bias=False)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=1 / math.sqrt(s.hidden))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten())


@dataclass(frozen=True)
class Workload:
    """What is trained: ``build()`` gives a fresh model (same seed each time); ``loss(model,
    ids)`` is the one line of the loop that differs between the two model kinds."""

    kind: str  # "llama" or "torch"
    sizes: Sizes
    layer_class: str

    def build(self) -> nn.Module:
        torch.manual_seed(0)
        if self.kind == "torch":
            return TinyDecoder(self.sizes)
        from transformers import LlamaConfig, LlamaForCausalLM

        s = self.sizes
        config = LlamaConfig(
            vocab_size=s.vocab,
            hidden_size=s.hidden,
            intermediate_size=s.intermediate,
            num_hidden_layers=s.layers,
            num_attention_heads=s.heads,
            num_key_value_heads=s.heads,
            max_position_embeddings=s.seq,
            use_cache=False,
            attn_implementation="sdpa",
        )
        return LlamaForCausalLM(config)

    def loss(self, model: Any, ids: torch.Tensor) -> torch.Tensor:
        if self.kind == "torch":
            return model(ids)
        return model(input_ids=ids, labels=ids).loss

    def batches(self, device: torch.device, count: int = 4) -> list[torch.Tensor]:
        """``count`` batches of token ids, made up front on ``device``."""
        g = torch.Generator().manual_seed(1)
        s = self.sizes
        return [
            torch.randint(0, s.vocab, (s.batch, s.seq), generator=g).to(device)
            for _ in range(count)
        ]


def workload(kind: str, smoke: bool) -> Workload:
    """``kind`` "auto" picks llama when transformers imports, else the plain torch decoder."""
    if kind == "auto":
        kind = "llama" if importlib.util.find_spec("transformers") else "torch"
    layer = "LlamaDecoderLayer" if kind == "llama" else "DecoderBlock"
    return Workload(kind, SMOKE_SIZES if smoke else GPU_SIZES, layer)
