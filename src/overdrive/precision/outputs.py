"""Convert a model's half-precision outputs back to fp32, so the loss is computed in fp32."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from overdrive.processes.nesting import recursively_apply

_HALF = (torch.float16, torch.bfloat16)


def outputs_to_fp32(out: Any) -> Any:
    """``out`` with every fp16/bf16 tensor cast to fp32, through tuples, lists and dicts.

    Dicts (including ``transformers`` ModelOutput) are updated in place so their type and
    attribute access survive; tuples and lists are rebuilt with their own type.
    """
    if isinstance(out, torch.Tensor):
        return out.float() if out.dtype in _HALF else out
    if isinstance(out, dict):
        for key, value in out.items():
            out[key] = outputs_to_fp32(value)
        return out
    if isinstance(out, list):
        return [outputs_to_fp32(v) for v in out]
    if isinstance(out, tuple):
        items = [outputs_to_fp32(v) for v in out]
        if hasattr(out, "_fields"):  # namedtuple
            return type(out)(*items)
        return tuple(items) if type(out) is tuple else type(out)(items)
    return out


def _is_half(data: Any) -> bool:
    return hasattr(data, "dtype") and data.dtype in (torch.float16, torch.bfloat16)


def convert_to_fp32(data: Any) -> Any:
    """``data`` with every fp16/bf16 tensor turned into fp32 (other leaves untouched)."""
    return recursively_apply(lambda t: t.float(), data, test_type=_is_half)


class ConvertOutputsToFp32:
    """A picklable wrapper of a forward whose outputs come back in fp32."""

    def __init__(self, model_forward: Callable[..., Any]) -> None:
        self.model_forward = model_forward
        functools.update_wrapper(self, model_forward)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return convert_to_fp32(self.model_forward(*args, **kwargs))


def convert_outputs_to_fp32(model_forward: Callable[..., Any]) -> Callable[..., Any]:
    """``model_forward`` with fp32 outputs; ``__wrapped__`` leads back to the wrapper so
    unwrapping can take it off."""
    wrapped = ConvertOutputsToFp32(model_forward)

    def forward(*args: Any, **kwargs: Any) -> Any:
        return wrapped(*args, **kwargs)

    forward.__wrapped__ = wrapped  # type: ignore[attr-defined]
    return forward
