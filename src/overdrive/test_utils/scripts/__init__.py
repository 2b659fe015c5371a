"""Self-checks of overdrive's public API, for one process or each of N launched ones.

``test_script``, ``test_ops`` and ``test_sync`` each have a ``main()`` that raises
``AssertionError`` naming what went wrong; ``test_cli`` prints what a launch started.
This package holds the small assertion helpers they share.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import torch
from torch.utils.data import DataLoader, Dataset


def check(condition: bool, message: str) -> None:
    """Raise ``AssertionError(message)`` unless ``condition`` (works under ``python -O``)."""
    if not condition:
        raise AssertionError(message)


def check_close(
    actual: torch.Tensor, expected: torch.Tensor, what: str, atol: float = 1e-5
) -> None:
    """``actual`` equals ``expected`` within ``atol`` (both moved to the CPU first)."""
    got, want = actual.detach().float().cpu(), expected.detach().float().cpu()
    ok = got.shape == want.shape and torch.allclose(got, want, atol=atol, rtol=0)
    check(ok, f"{what}: expected {want.tolist()}, got {got.tolist()}")


def check_equal(actual: Any, expected: Any, what: str) -> None:
    """``actual == expected`` for plain values; tensors compare their exact contents."""
    if isinstance(actual, torch.Tensor) or isinstance(expected, torch.Tensor):
        a, e = torch.as_tensor(actual).cpu(), torch.as_tensor(expected).cpu()
        ok = a.shape == e.shape and a.dtype == e.dtype and torch.equal(a, e)
        check(ok, f"{what}: expected {e.tolist()} ({e.dtype}), got {a.tolist()} ({a.dtype})")
    else:
        check(actual == expected, f"{what}: expected {expected!r}, got {actual!r}")


def params_of(model: torch.nn.Module) -> Sequence[torch.Tensor]:
    """The model's parameters as detached CPU copies, in registration order."""
    return [p.detach().cpu().clone() for p in model.parameters()]


def grads_of(model: torch.nn.Module) -> list[torch.Tensor]:
    """The model's gradients as CPU copies (zeros where a parameter has none)."""
    return [
        torch.zeros_like(p).cpu() if p.grad is None else p.grad.detach().cpu().clone()
        for p in model.parameters()
    ]


def make_loader(
    data: Any, batch_size: int, shuffle: bool = False, generator: torch.Generator | None = None
) -> DataLoader[Any]:
    """A plain DataLoader over ``data`` (a list or any map-style dataset)."""
    dataset = cast(Dataset[Any], data)
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, generator=generator)
