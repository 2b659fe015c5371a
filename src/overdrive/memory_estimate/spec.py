"""A model as plain data: its tensors' shapes and where tp and pp put them (no torch)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class TensorSpec:
    """One parameter: its shape, which repeated layer holds it, the dim tp splits."""

    name: str
    shape: tuple[int, ...]
    key: str
    """Identity: tied parameters (embedding and LM head) share it and are counted once."""
    layer: int | None = None
    """Index in the model's repeated layers; None outside them."""
    before_layers: bool = False
    """Outside the layers and registered before them: the first pipeline stage holds it
    (the embedding); outside and after them: the last stage (final norm, LM head)."""
    tp_dim: int | None = None
    """Dimension tensor parallelism splits; None when every tp rank holds all of it."""

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class ModelSpec:
    """What the estimate needs to know about a model."""

    source: str
    class_name: str
    tensors: tuple[TensorSpec, ...]
    num_layers: int = 0
    """Count of the repeated blocks (the largest ModuleList/Sequential of one class)."""
    layers_name: str | None = None
    hidden_size: int | None = None
    num_heads: int | None = None
    num_kv_heads: int | None = None
    vocab_size: int | None = None
    max_positions: int | None = None
    """The longest sequence the model's config allows (max_position_embeddings), if it says."""
    tp_plan: str = "none"
    """Where the tp split came from, in words (the model's own plan, or the default)."""
    notes: tuple[str, ...] = field(default=())

    @property
    def num_parameters(self) -> int:
        """Parameters, tied ones counted once."""
        return sum({t.key: t.numel for t in self.tensors}.values())

    @property
    def has_transformer_dims(self) -> bool:
        """Whether the activation formula's inputs (hidden, heads, layers) are known."""
        return bool(self.hidden_size and self.num_heads and self.num_layers)
