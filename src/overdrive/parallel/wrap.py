"""Which submodules become their own FSDP unit: by layer class, by size, by a callable, or none.

The answer is a plain list of modules, so FSDP1 and FSDP2 wrap exactly the same units and a
test can inspect the choice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from torch import nn

from overdrive.errors import ConfigError

LAYER_KEY = "fsdp_config.fsdp_transformer_layer_cls_to_wrap"
POLICY_KEY = "fsdp_config.fsdp_auto_wrap_policy"

if TYPE_CHECKING:
    from overdrive.parallel.fsdp_policy import FSDPPolicy


def class_names(model: nn.Module) -> list[str]:
    """Every module class name in ``model``, in first-seen order."""
    seen: dict[str, None] = {}
    for module in model.modules():
        seen.setdefault(type(module).__name__, None)
    return list(seen)


def layer_classes(model: nn.Module, names: list[str] | None, source: str) -> set[str]:
    """The layer class names to wrap: the setting, else the model's ``_no_split_modules``."""
    if not names:
        names = list(getattr(model, "_no_split_modules", None) or [])
        source = f"{type(model).__name__}._no_split_modules"
        if not names:
            raise ConfigError(
                f"{POLICY_KEY} TRANSFORMER_BASED_WRAP needs the layer classes to wrap, and "
                f"{type(model).__name__} declares no _no_split_modules",
                key=LAYER_KEY,
                fix=f"set {LAYER_KEY} to one of the model's classes: "
                + ", ".join(class_names(model)),
            )
    present = set(class_names(model))
    missing = [n for n in names if n not in present]
    if missing:
        raise ConfigError(
            f"{LAYER_KEY} = {','.join(names)} ({source}) names "
            f"{', '.join(missing)}, which the model does not contain",
            key=LAYER_KEY,
            fix="use class names from the model: " + ", ".join(sorted(present)),
        )
    return set(names)


def _by_size(model: nn.Module, min_num_params: int) -> list[nn.Module]:
    """Bottom-up: a module whose parameters not yet in a unit reach ``min_num_params``."""
    units: list[nn.Module] = []
    covered: set[int] = set()

    def visit(module: nn.Module) -> None:
        for child in module.children():
            visit(child)
        if module is model:
            return
        own = sum(p.numel() for p in module.parameters() if id(p) not in covered)
        if own >= min_num_params and own > 0:
            units.append(module)
            covered.update(id(p) for p in module.parameters())

    visit(model)
    return units


def wrap_units(
    model: nn.Module,
    policy: str | Callable[..., object] | None,
    *,
    layer_names: list[str] | None = None,
    min_num_params: int = 100_000_000,
    source: str = "default",
) -> list[nn.Module]:
    """Submodules that become FSDP units, innermost first; the root is always a unit too."""
    if policy is None or policy == "NO_WRAP":
        return []
    if callable(policy):
        units = []
        for module in model.modules():
            if module is model:
                continue
            numel = sum(p.numel() for p in module.parameters())
            if policy(module=module, recurse=False, nonwrapped_numel=numel):
                units.append(module)
        return units
    if policy == "TRANSFORMER_BASED_WRAP":
        wanted = layer_classes(model, layer_names, source)
        return [m for m in model.modules() if m is not model and type(m).__name__ in wanted]
    if policy == "SIZE_BASED_WRAP":
        return _by_size(model, min_num_params)
    raise ConfigError(f"{POLICY_KEY} {policy!r} is not a wrap policy", key=POLICY_KEY)


def policy_units(model: nn.Module, policy: FSDPPolicy) -> list[nn.Module]:
    """The submodules an FSDP ``policy`` makes units of (sharded, checkpointed if asked)."""
    return wrap_units(
        model,
        policy.auto_wrap_policy,
        layer_names=list(policy.layer_names),
        min_num_params=policy.min_num_params,
        source=policy.layer_source,
    )
