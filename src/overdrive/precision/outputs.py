"""Convert a model's half-precision outputs back to fp32, so the loss is computed in fp32."""

from __future__ import annotations

from typing import Any

import torch

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
