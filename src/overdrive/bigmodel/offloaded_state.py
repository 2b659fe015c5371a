"""The real weights of a model whose weights are offloaded (on the meta device between
forwards): what saving such a model writes."""

from __future__ import annotations

import logging

import torch
from torch import nn

from overdrive.bigmodel.align import align_module_device, has_offloaded_params

logger = logging.getLogger("overdrive.bigmodel")


def get_state_dict_offloaded_model(model: nn.Module) -> dict[str, torch.Tensor]:
    """``model``'s state dict on the CPU, each offloaded module's weights read back in turn
    (one module's weights in memory at a time beyond the result)."""
    state: dict[str, torch.Tensor] = {}
    placeholders: set[str] = set()
    for name, module in model.named_modules():
        if not name:
            continue
        try:
            with align_module_device(module, torch.device("cpu")):
                own = module.state_dict()
        except MemoryError:
            raise MemoryError(
                "Offloaded module must fit in CPU memory to call save_model!"
            ) from None
        for key, tensor in own.items():
            full = f"{name}.{key}"
            if tensor.device == torch.device("meta"):
                placeholders.add(full)
            else:
                state[full] = tensor.to("cpu")
    # A module's own parameters at the top level (no submodule holds them).
    for key, tensor in model.state_dict().items():
        if "." not in key and tensor.device != torch.device("meta"):
            state.setdefault(key, tensor.to("cpu"))
    unsaved = placeholders - set(state)
    if unsaved:
        logger.warning(
            f"The following tensors were not saved because they were still on meta device: {unsaved}"
        )
    return state


def get_state_dict_from_offload(
    module: nn.Module,
    module_name: str,
    state_dict: dict[str, object],
    device_to_put_offload: int | str | torch.device = "cpu",
) -> dict[str, object]:
    """Fill the entries of ``state_dict`` that belong to ``module`` (named ``module_name``'s
    parent) with its real tensors, read onto ``device_to_put_offload`` when offloaded."""
    root = module_name[: module_name.rfind(".")]
    device = device_to_put_offload if has_offloaded_params(module) else None
    with align_module_device(module, device):  # type: ignore[arg-type]
        for key, tensor in module.state_dict().items():
            if f"{root}.{key}" in state_dict:
                state_dict[f"{root}.{key}"] = tensor
    return state_dict
