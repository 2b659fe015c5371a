"""Sequence parallelism (Ulysses) shards the sequence before attention and gathers it back;
layers that carry a state along the sequence (linear attention) would restart it on every
process and train wrong without an error. Such models are refused."""

from __future__ import annotations


def refuse_recurrent_layers_under_sequence_parallelism(model: object) -> None:
    """Raise when ``model``'s config names linear-attention layers."""
    config: object = getattr(model, "config", None)
    if hasattr(config, "get_text_config"):
        config = config.get_text_config()
    kinds = getattr(config, "layer_types", None) or []
    recurrent = sorted({kind for kind in kinds if "linear_attention" in kind})
    if recurrent:
        raise ValueError(
            f"Sequence parallelism does not support attention layers of type {recurrent} (model "
            f"{type(model).__name__}): they carry a state along the sequence outside the "
            "attention that sequence parallelism wraps, so every process would restart it and "
            "the gradients would be wrong without an error. Use a full-attention model, or turn "
            "sequence parallelism off."
        )
