"""Pipeline stages under simulation: what a stage receives from its neighbours while the
schedule infers its shapes.

In its first step a ``torch.distributed.pipelining`` stage learns the shape of what it
receives from the stages next to it, as pickled metadata (``recv_object_list``), which a
fake process group cannot deliver. A simulated stage is given that metadata here:

- from the next stage, the gradients of this stage's outputs: the outputs' own shapes, as
  the next stage computes them;
- from the previous stage, its output: for a transformers causal LM split by overdrive
  (every stage boundary carries the hidden states) a tensor of (micro-batch, sequence,
  ``hidden_size``) in the dtype the stage's layers compute in. Other models' stages after
  the first are refused: their input could only be known by running the stages before.

The receives are issued on the fake group with the sizes the real messages have, so they
are counted as the real run's are.
"""

from __future__ import annotations

import contextlib
import pickle
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist

from overdrive.simulate.patching import patched

_BATCH: dict[str, Any] = {}
"""The batch the pipelined model was last called with: its shape and the micro-batch count."""


class PipelineNotSimulated(RuntimeError):
    """A stage's input cannot be known without running the stages before it."""


def _remember_batch(original: Any) -> Any:
    def run(self: Any, model: Any, inputs: torch.Tensor, labels: Any) -> Any:
        _BATCH.update(shape=tuple(inputs.shape), micro_batches=self.pp.micro_batches)
        return original(self, model, inputs, labels)

    return run


def _compute_dtype(module: torch.nn.Module) -> torch.dtype:
    """The dtype the stage's layers compute in: FSDP2's ``param_dtype`` when it sets one,
    else the dtype of its first floating-point parameter."""
    from torch.distributed.fsdp import FSDPModule

    for sub in module.modules():
        if isinstance(sub, FSDPModule):
            wanted = sub._get_fsdp_state()._mp_policy.param_dtype
            if wanted is not None:
                return wanted
            break
    for param in module.parameters():
        if param.dtype.is_floating_point:
            return param.dtype
    return torch.get_default_dtype()


def _contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def forward_meta(stage: Any) -> Any:
    """The metadata stage ``stage.stage_index - 1`` sends: its hidden states."""
    from torch.distributed.pipelining._utils import _TensorMeta
    from torch.distributed.pipelining.stage import _StageForwardMeta

    module = stage.submod
    config = getattr(getattr(module, "model", None), "config", None)
    hidden = getattr(config, "hidden_size", None)
    if not isinstance(hidden, int) or "shape" not in _BATCH:
        raise PipelineNotSimulated(
            f"stage {stage.stage_index} of the pipeline ({type(module).__name__}): a simulation "
            "knows what a later stage receives only for a transformers causal LM (hidden "
            "states); simulate the first stage's ranks (--simulate_ranks 0) instead"
        )
    batch, sequence = _BATCH["shape"][:2]
    shape = (batch // _BATCH["micro_batches"], sequence, hidden)
    meta = _TensorMeta(
        shape=torch.Size(shape),
        stride=_contiguous(shape),
        dtype=_compute_dtype(module),
        requires_grad=stage.has_backward,
    )
    return _StageForwardMeta(forward_metas=(meta,))


def backward_meta(stage: Any) -> Any:
    """The metadata stage ``stage.stage_index + 1`` sends: the gradients of this stage's
    outputs, shaped as the outputs."""
    from torch.distributed.pipelining._utils import _derive_grad_metas
    from torch.distributed.pipelining.stage import _StageBackwardMeta

    return _StageBackwardMeta(backward_metas=_derive_grad_metas(stage._stage_meta.outputs))


def _receive_meta(self: Any, src_stage: int) -> Any:
    meta = forward_meta(self) if src_stage < self.stage_index else backward_meta(self)
    # the real receive: one int64 size, then the pickled bytes (recv_object_list)
    src = self._resolve_peer_global_rank(src_stage)
    size = len(pickle.dumps(meta))
    for buffer in (
        torch.empty(1, dtype=torch.long, device=self.device),
        torch.empty(size, dtype=torch.uint8, device=self.device),
    ):
        dist.recv(buffer, src=src, group=self.group)
    return meta


def _refuse_without_receive_meta(*_: Any) -> Any:
    raise PipelineNotSimulated(
        "pipeline parallelism is simulated by answering PipelineStage._recv_meta, which "
        f"torch {torch.__version__} does not have; fix: simulate this layout where torch "
        "2.13 is installed (what overdrive's tests run), or without "
        "--parallelism_config_pp_size"
    )


@contextlib.contextmanager
def simulated_pipeline_stages() -> Iterator[None]:
    """Inside: pipeline stages receive their neighbours' metadata from ``_receive_meta``."""
    from torch.distributed.pipelining.stage import PipelineStage

    # deferred: the pipeline strategy loads only where a simulated script pipelines
    from overdrive.strategies.pipeline import PipelineParallelStrategy

    if not hasattr(PipelineStage, "_recv_meta"):
        # torch 2.11 has none (2.13 has): its stages could not learn their neighbours' shapes
        with patched(PipelineParallelStrategy, "run", _refuse_without_receive_meta):
            yield
        return
    run = _remember_batch(PipelineParallelStrategy.run)
    try:
        with (
            patched(PipelineStage, "_recv_meta", _receive_meta),
            patched(PipelineParallelStrategy, "run", run),
        ):
            yield
    finally:
        _BATCH.clear()
