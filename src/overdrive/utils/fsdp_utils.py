"""``accelerate.utils.fsdp_utils``: Hugging Face Accelerate's FSDP helpers, on overdrive's FSDP
engine (``overdrive.parallel``) and its pickle-free checkpoint files.

Where overdrive differs on purpose, the function says so: model and optimizer files are
safetensors + JSON (never ``torch.save``), and activation checkpointing keeps module paths.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from overdrive.checkpoint.fsdp_files import merge_fsdp_weights, save_fsdp_model
from overdrive.checkpoint.fsdp_state_files import (
    load_fsdp_model,
    load_fsdp_optimizer,
    save_fsdp_optimizer,
)
from overdrive.environment.rank_logging import get_logger
from overdrive.errors import OverdriveError
from overdrive.parallel import fsdp_tools

logger = get_logger(__name__)

__all__ = [
    "disable_fsdp_ram_efficient_loading",
    "enable_fsdp_ram_efficient_loading",
    "ensure_weights_retied",
    "fsdp2_apply_ac",
    "fsdp2_canonicalize_names",
    "fsdp2_load_full_state_dict",
    "fsdp2_prepare_auto_wrap_policy",
    "fsdp2_prepare_model",
    "fsdp2_switch_optimizer_parameters",
    "get_fsdp2_grad_scaler",
    "get_parameters_from_modules",
    "load_fsdp_model",
    "load_fsdp_optimizer",
    "logger",
    "merge_fsdp_weights",
    "save_fsdp_model",
    "save_fsdp_optimizer",
]


def enable_fsdp_ram_efficient_loading() -> None:
    """Ask transformers' ``from_pretrained`` to load FSDP models RAM-efficiently (only the main
    process reads the weights): sets ``FSDP_CPU_RAM_EFFICIENT_LOADING`` (and
    ``ACCELERATE_USE_FSDP`` unless already set) in this process's environment."""
    os.environ.setdefault("ACCELERATE_USE_FSDP", "True")
    os.environ["FSDP_CPU_RAM_EFFICIENT_LOADING"] = "True"


def disable_fsdp_ram_efficient_loading() -> None:
    """Undo ``enable_fsdp_ram_efficient_loading`` for transformers: every process loads."""
    os.environ["FSDP_CPU_RAM_EFFICIENT_LOADING"] = "False"


def _fsdp_plugin(accelerator: Any) -> Any:
    plugin = getattr(getattr(accelerator, "state", None), "fsdp_plugin", None)
    if plugin is None:
        raise OverdriveError(
            "this Accelerator does not run FSDP, so it has no FSDP plugin\n"
            "  fix: turn FSDP on (distributed_type: FSDP, --use_fsdp or "
            "Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin(...)))"
        )
    return plugin


def fsdp2_prepare_auto_wrap_policy(
    fsdp2_plugin: Any, model: nn.Module
) -> Callable[[nn.Module], bool] | None:
    """A ``module -> bool`` telling whether ``model``'s submodule gets its own FSDP2 unit, from
    the plugin's ``auto_wrap_policy``: layer classes (``transformer_cls_names_to_wrap``, else
    the model's ``_no_split_modules``) or size (more than ``min_num_params``); None without a
    policy. A layer class the model lacks is a ValueError. Unlike Hugging Face Accelerate, a
    custom callable policy is asked too (as overdrive's FSDP strategy asks it), not ignored."""
    return fsdp_tools.wrap_predicate(
        getattr(fsdp2_plugin, "auto_wrap_policy", None),
        model,
        getattr(fsdp2_plugin, "transformer_cls_names_to_wrap", None),
        getattr(fsdp2_plugin, "min_num_params", None),
    )


def fsdp2_prepare_model(accelerator: Any, model: nn.Module) -> nn.Module:
    """Shard ``model`` with FSDP2 as ``accelerator.prepare`` would (in place; returns it).

    A model already sharded (or compiled around a sharded one) comes back unchanged. The
    units, mixed precision, offload, RAM-efficient loading and activation checkpointing follow
    the run's FSDP settings, through overdrive's FSDP strategy, which then knows the model for
    state dicts and clipping. An optimizer is not re-pointed here (prepare does that;
    ``fsdp2_switch_optimizer_parameters`` does it by hand).
    """
    from torch.distributed.fsdp import FSDPModule

    inner = getattr(model, "_orig_mod", model)
    if isinstance(model, FSDPModule) or isinstance(inner, FSDPModule):
        return model
    plugin = _fsdp_plugin(accelerator)
    strategy = accelerator.strategy
    version = getattr(getattr(strategy, "policy", None), "version", None)
    if version != 2:
        raise OverdriveError(
            f"fsdp2_prepare_model needs FSDP2, and this run uses fsdp_version {version}\n"
            "  fix: set fsdp_version: 2 (--fsdp_version 2), or call accelerator.prepare(model)"
        )
    if hasattr(plugin, "set_auto_wrap_policy"):
        plugin.set_auto_wrap_policy(model)  # names the layer classes the model lacks, early
    return strategy.setup_model(model, device_placement=True)


def fsdp2_load_full_state_dict(
    accelerator: Any, model: nn.Module, full_sd: dict, cpu_offload: bool = False
) -> nn.Module:
    """Load ``full_sd`` (needed on the main process only; ``{}`` elsewhere) into the FSDP2-
    sharded ``model``, which may be on the meta device: each tensor is broadcast from the main
    process and every process keeps its own shard. Call it on every process. Missing entries
    are a KeyError on every process (never a hang). ``cpu_offload``: shards end on the CPU."""
    device = fsdp_tools.device_of(accelerator)
    return fsdp_tools.load_full_state(
        model,
        full_sd,
        device,
        is_main=bool(accelerator.is_main_process),
        cpu_offload=cpu_offload,
    )


def fsdp2_switch_optimizer_parameters(optimizer: torch.optim.Optimizer, mapping: dict) -> None:
    """Point ``optimizer``'s parameter groups at the sharded parameters: ``mapping`` goes from
    each old parameter's ``data_ptr`` to its new parameter. A parameter missing from it is a
    KeyError (training would otherwise silently update nothing)."""
    fsdp_tools.switch_optimizer_params(optimizer, mapping)


def fsdp2_apply_ac(accelerator: Any, model: nn.Module) -> nn.Module:
    """Recompute, in backward, the activations of the layers the FSDP wrap policy picks (the
    whole model when it picks none); returns ``model``.

    overdrive uses PyTorch's composable ``checkpoint`` (as ``fsdp_activation_checkpointing``
    does), so module paths and state-dict keys stay the user's, where Hugging Face Accelerate
    wraps each layer in a ``CheckpointWrapper``. A plugin's ``activation_checkpointing_offload``
    also moves what the checkpoints keep to host memory.
    """
    plugin = _fsdp_plugin(accelerator)
    chosen = fsdp2_prepare_auto_wrap_policy(plugin, model)
    offload = bool(getattr(plugin, "activation_checkpointing_offload", False))
    fsdp_tools.checkpoint_layers(model, chosen, offload=offload)
    return model


def get_fsdp2_grad_scaler(**kwargs: Any) -> Any:
    """A ``torch.amp.GradScaler(**kwargs)``, which handles FSDP2's DTensor gradients."""
    from torch.amp.grad_scaler import GradScaler

    return GradScaler(**kwargs)


def fsdp2_canonicalize_names(named_params: dict) -> dict:
    """``named_params`` with the names' wrapper parts removed (``_checkpoint_wrapped_module``,
    ``_orig_mod``), so they match the unwrapped model's."""
    return fsdp_tools.canonical_names(named_params)


def get_parameters_from_modules(
    modules: Iterable[nn.Module] | str | None, model: nn.Module, device: Any
) -> set[nn.Parameter]:
    """The set of parameters of ``modules``: modules, or a regular expression matched against
    the whole of each module path in ``model`` (matching modules move to ``device``); None
    gives an empty set."""
    return fsdp_tools.parameters_of(modules, model, device)


def ensure_weights_retied(
    param_init_fn: Callable[[nn.Module], Any], model: nn.Module, device: Any
) -> Callable[[nn.Module], Any]:
    """``param_init_fn`` (FSDP1's per-module initialiser) made to re-tie the weights named in
    ``model._tied_weights_keys`` after it re-allocates them; returned as is without ties.
    ``device`` is accepted for compatibility and unused."""
    return fsdp_tools.retie_after_init(param_init_fn, model)
