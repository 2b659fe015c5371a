"""Split a model into pipeline stages: each process keeps its stage's modules, drops the rest.

The repeated layers are split evenly over the stages (earlier stages take one more when
they do not divide), as torchtitan does for Llama: the first stage keeps the embedding, the
last the final norm and the head, and every other stage's modules are deleted so their
memory is freed. Two kinds of model are understood:

- a transformers causal LM with ``model.layers`` (Llama, Mistral, Qwen2, ...): the layers
  are ``model.model.layers``;
- an ``nn.Sequential``: its children.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeAlias, cast

import torch
from torch import nn

from overdrive.errors import ConfigError
from overdrive.parallel.layout import PP_KEY

LossFn: TypeAlias = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""A loss of the last stage's output against the labels."""


class _DecoderStack(Protocol):
    """What a transformers causal LM's ``model.model`` holds that a stage keeps or drops."""

    layers: nn.ModuleList
    embed_tokens: nn.Module | None
    norm: nn.Module


class _DecoderOutput(Protocol):
    last_hidden_state: torch.Tensor


class _LMConfig(Protocol):
    vocab_size: int


class _CausalLM(Protocol):
    """A transformers causal LM as a stage calls it."""

    config: _LMConfig

    def model(self, **kwargs: object) -> _DecoderOutput: ...

    def lm_head(self, hidden: torch.Tensor, /) -> torch.Tensor: ...

    def loss_function(
        self, *, logits: torch.Tensor, labels: torch.Tensor, vocab_size: int
    ) -> torch.Tensor: ...


def stage_bounds(
    num_layers: int, stages: int, split_points: Sequence[int] | None = None, *, key: str = PP_KEY
) -> list[tuple[int, int]]:
    """``[start, end)`` of the layers each stage runs.

    Without ``split_points`` the layers are spread evenly, earlier stages taking one more
    when ``stages`` does not divide ``num_layers``; ``split_points`` are the indices of the
    layers that start stages 1..stages-1 (strictly increasing, inside the layers). ``key``
    is the setting of the pipeline degree, named by the refusals.
    """
    if split_points is not None:
        points = list(split_points)
        edges = [0, *points, num_layers]
        if len(points) != stages - 1 or not all(a < b for a, b in zip(edges, edges[1:])):
            raise ConfigError(
                f"pipeline split points {points} do not split {num_layers} layers into "
                f"{stages} stages",
                key=key,
                fix=f"give {stages - 1} strictly increasing layer indices between 1 and "
                f"{num_layers - 1}",
            )
        return list(zip(edges[:-1], edges[1:]))
    base, extra = divmod(num_layers, stages)
    bounds, start = [], 0
    for stage in range(stages):
        end = start + base + (1 if stage < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds


@dataclass
class Stage:
    """One process's part of a split model."""

    module: nn.Module  # what the pipeline stage runs: input of the stage -> its output
    index: int
    num_stages: int
    layers: tuple[int, int]  # [start, end) of the repeated layers it holds
    names: dict[str, str]  # the stage module's parameter and buffer names -> the whole model's
    loss_fn: LossFn | None  # the model's own loss, if it has one

    @property
    def is_first(self) -> bool:
        return self.index == 0

    @property
    def is_last(self) -> bool:
        return self.index == self.num_stages - 1


def split_model(
    model: nn.Module,
    index: int,
    num_stages: int,
    split_points: Sequence[int] | None = None,
    *,
    key: str = PP_KEY,
) -> Stage:
    """Keep stage ``index`` of ``num_stages`` in ``model`` (modified in place); ``key`` is
    the setting of the pipeline degree (``megatron_lm_config.pp_degree`` or
    ``parallelism_config.parallelism_config_pp_size``), named by the refusals."""
    before = {id(t): name for name, t in _named_tensors(model)}
    layers = _repeated_layers(model)
    if layers is None:
        raise ConfigError(
            f"pipeline parallelism cannot split a {type(model).__name__}: it splits a "
            "transformers causal LM with model.layers (Llama, Mistral, Qwen2, ...) or an "
            "nn.Sequential",
            key=key,
            fix="wrap the model's stages in an nn.Sequential, or remove "
            f"{key} to train without a pipeline",
        )
    if num_stages > len(layers):
        raise ConfigError(
            f"pipeline-parallel degree {num_stages} is larger than the {len(layers)} "
            f"repeated layers of {type(model).__name__}: every stage needs at least one",
            key=key,
            fix=f"set {key} to at most {len(layers)}",
        )
    bounds = stage_bounds(len(layers), num_stages, split_points, key=key)
    start, end = bounds[index]
    first, last = index == 0, index == num_stages - 1
    if isinstance(model, nn.Sequential):
        kept = list(model._modules.items())[start:end]
        module: nn.Module = nn.Sequential(OrderedDict(kept))
        loss_fn = None
    else:
        module = _split_causal_lm(model, start, end, first=first, last=last, key=key)
        loss_fn = _causal_lm_loss(model) if last else None
    names = {name: before[id(t)] for name, t in _named_tensors(module) if id(t) in before}
    return Stage(module, index, num_stages, (start, end), names, loss_fn)


@dataclass(frozen=True)
class PipelineSplit:
    """The parallelize chain's split step: keep stage ``index`` of ``degree`` (at
    ``split_points`` when given; ``key`` names the degree's setting). The last stage needs a
    loss: the model's own, or one given in code (``loss_given``; ``loss_key`` and
    ``loss_in_code`` say where it is given)."""

    index: int
    degree: int
    split_points: Sequence[int] | None = None
    key: str = PP_KEY
    loss_given: bool = False
    loss_key: str = "pp_loss_fn"
    loss_in_code: str = "ParallelismConfig(pp_loss_fn=...)"

    def apply(self, model: nn.Module) -> Stage:
        """This process's stage of ``model`` (modified in place, see ``split_model``)."""
        stage = split_model(model, self.index, self.degree, self.split_points, key=self.key)
        if stage.is_last and stage.loss_fn is None and not self.loss_given:
            raise ConfigError(
                f"the last pipeline stage of a {type(model).__name__} needs a loss function: "
                "a transformers causal LM computes its own from labels=, other models take "
                "one in code",
                key=self.loss_key,
                fix=f"pass {self.loss_in_code} to the Accelerator",
            )
        return stage


def _named_tensors(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    return [
        *module.named_parameters(remove_duplicate=False),
        *module.named_buffers(remove_duplicate=False),
    ]


def _repeated_layers(model: nn.Module) -> Sequence[nn.Module] | None:
    if isinstance(model, nn.Sequential):
        return list(model)
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if isinstance(layers, nn.ModuleList) and hasattr(model, "lm_head"):
        return list(layers)
    return None


def _split_causal_lm(
    model: nn.Module, start: int, end: int, *, first: bool, last: bool, key: str
) -> nn.Module:
    inner = cast(_DecoderStack, model.model)
    config = getattr(model, "config", None)
    if getattr(config, "tie_word_embeddings", False) and not (first and last):
        raise ConfigError(
            f"{type(model).__name__} ties its embedding to its head "
            "(tie_word_embeddings: true), but under pipeline parallelism the embedding "
            "lives on the first stage and the head on the last; tied weights across stages "
            "are not available yet",
            key=key,
            fix="build the model with tie_word_embeddings=False, or remove " + key,
        )
    inner.layers = nn.ModuleList(list(inner.layers)[start:end])
    if not first:
        inner.embed_tokens = None
    if not last:
        inner.norm = nn.Identity()
        model.lm_head = None  # type: ignore[assignment]
    return _CausalLMStage(model, first=first, last=last)


class _CausalLMStage(nn.Module):
    """A causal LM's stage: token ids or hidden states in, hidden states or logits out."""

    def __init__(self, model: nn.Module, *, first: bool, last: bool) -> None:
        super().__init__()
        self.model = model
        self.first, self.last = first, last

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lm = cast(_CausalLM, self.model)
        if self.first:
            out = lm.model(input_ids=x, use_cache=False)
        else:
            out = lm.model(inputs_embeds=x, use_cache=False)
        hidden = out.last_hidden_state
        return lm.lm_head(hidden) if self.last else hidden


def _causal_lm_loss(model: nn.Module) -> LossFn:
    """The model's own loss of logits against ``labels`` (transformers shifts them)."""
    lm = cast(_CausalLM, model)
    vocab = lm.config.vocab_size

    def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return lm.loss_function(logits=logits, labels=labels, vocab_size=vocab)

    return loss_fn
