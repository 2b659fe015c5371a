"""One global gradient norm over parameters that live on different meshes.

Under tensor parallelism some parameters are DTensors on the ``(dp, tp)`` mesh and others
(norms, after FSDP: on the ``dp`` mesh only) on a sub-mesh; ``torch.nn.utils.clip_grad_norm_``
cannot stack norms from different meshes. Norms are taken per mesh (each a full, agreed
value), then combined, so every process clips by the same global norm.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


def _group_key(grad: torch.Tensor) -> object:
    mesh = getattr(grad, "device_mesh", None)
    return ("plain", grad.device) if mesh is None else ("mesh", id(mesh))


def total_norm(grads: list[torch.Tensor], norm_type: float) -> torch.Tensor:
    """The norm of all ``grads`` together (a plain tensor, the same on every process)."""
    groups: dict[object, list[torch.Tensor]] = {}
    for g in grads:
        groups.setdefault(_group_key(g), []).append(g)
    parts = []
    for group in groups.values():
        norm = torch.nn.utils.get_total_norm(group, norm_type=norm_type)
        full = getattr(norm, "full_tensor", None)
        parts.append((full() if callable(full) else norm).float().cpu())
    if not parts:
        return torch.tensor(0.0)
    stacked = torch.stack(parts)
    if norm_type == float("inf"):
        return stacked.max()
    return stacked.pow(norm_type).sum().pow(1.0 / norm_type)


def clip_grad_norm(
    parameters: Iterable[torch.Tensor], max_norm: float, norm_type: float = 2.0
) -> torch.Tensor:
    """Scale the gradients so their global norm is at most ``max_norm``; return that norm."""
    grads = [p.grad for p in parameters if p.grad is not None]
    norm = total_norm(grads, float(norm_type))
    coef = float(max_norm) / (float(norm) + 1e-6)
    if coef < 1.0:
        with torch.no_grad():
            for g in grads:
                g.mul_(coef)
    return norm
