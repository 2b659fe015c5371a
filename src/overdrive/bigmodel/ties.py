"""Tied weights: one parameter reachable under several names (a language model's input and
output embeddings). Placing a model keeps a tie on one device; hooks that swap parameters
re-tie them afterwards."""

from __future__ import annotations

import inspect
import logging
from typing import cast

import torch
from torch import nn

from overdrive.bigmodel.device_map import Device, DeviceMap

logger = logging.getLogger("overdrive.bigmodel")


def resolve(root: nn.Module, dotted: str) -> nn.Module | torch.Tensor:
    """``root.a.b.c`` for ``dotted`` = ``"a.b.c"``."""
    for part in dotted.split("."):
        root = getattr(root, part)
    return root


def owner_and_name(model: nn.Module, dotted: str) -> tuple[nn.Module, str]:
    """The module holding the tensor ``dotted`` and the tensor's own name in it."""
    path, _, name = dotted.rpartition(".")
    return (cast(nn.Module, resolve(model, path)) if path else model), name


def find_tied_parameters(model: nn.Module, **_recursion: object) -> list[list[str]]:
    """Groups of parameter names that are one parameter, each group sorted (the extra keyword
    arguments Hugging Face Accelerate's signature takes are ignored)."""
    every = dict(model.named_parameters(remove_duplicate=False))
    first_names = dict(model.named_parameters())
    by_identity = {id(p): name for name, p in first_names.items()}
    groups: dict[str, set[str]] = {}
    for name, param in every.items():
        if name in first_names:
            continue
        groups.setdefault(by_identity[id(param)], set()).add(name)
    return [sorted([first, *others]) for first, others in groups.items()]


def retie_parameters(model: nn.Module, tied_params: list[list[str]]) -> None:
    """Make every name of each group point at one parameter again: the group's first one that
    is not on the meta device (a group all on meta is left alone)."""
    for group in tied_params:
        keep = next(
            (
                p
                for p in (cast(torch.Tensor, resolve(model, n)) for n in group)
                if p.device != torch.device("meta")
            ),
            None,
        )
        if keep is None:
            continue
        for name in group:
            owner, leaf = owner_and_name(model, name)
            setattr(owner, leaf, keep)


def check_tied_parameters_in_config(model: nn.Module) -> bool:
    """Whether a transformers model's config or modules ask for tied weights."""
    classes = [c.__name__ for c in inspect.getmro(type(model))]
    if "PreTrainedModel" not in classes:
        return False
    config = getattr(model, "config", None)
    decoder = config
    if config is not None and hasattr(config, "get_text_config"):
        decoder = config.get_text_config(decoder=True)
    word_embeddings = bool(
        decoder is not None
        and getattr(decoder, "tie_word_embeddings", False)
        and model.get_output_embeddings()  # type: ignore[operator]
    )
    encoder_decoder = bool(
        getattr(config, "is_encoder_decoder", False)
        and getattr(config, "tie_encoder_decoder", False)
    )
    tied_module = any(hasattr(m, "_tie_weights") for m in model.modules())
    return word_embeddings or encoder_decoder or tied_module


def warn_if_untied(model: nn.Module, tied: list[list[str]]) -> None:
    """The model says its weights are tied but none are: placing it would copy them apart."""
    if not tied and check_tied_parameters_in_config(model):
        logger.warning(
            "The model's config ties weights but none are tied: call model.tie_weights() "
            "before placing it with a device map."
        )


def device_of(name: str, device_map: DeviceMap) -> Device:
    """The device ``device_map`` gives the tensor or module ``name`` (its longest prefix)."""
    probe = name
    while probe not in device_map:
        if not probe:
            raise ValueError(f"The `device_map` does not contain the module {name}.")
        probe = probe.rpartition(".")[0]
    return device_map[probe]


def check_tied_parameters_on_same_device(
    tied_params: list[list[str]], device_map: DeviceMap
) -> None:
    """Warn for each tied group a device map splits over several devices."""
    for group in tied_params:
        devices = {name: device_of(name, device_map) for name in group}
        if len(set(devices.values())) > 1:
            logger.warning(
                f"Tied parameters are on different devices: {devices}. Change the device map "
                "so each tied group sits on one device, or use device_map='auto'."
            )
