"""fp8: linear layers trained in float8 through torchao (imported only when fp8 is used)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from overdrive.arguments.kwargs_handlers import AutocastKwargs
from overdrive.errors import ConfigError
from overdrive.precision.autocast import AutocastPrecision

RECIPES = ("tensorwise", "rowwise", "rowwise_with_gw_hp")
MIN_CAPABILITY = (8, 9)
_HARDWARE = "a CUDA GPU with compute capability 8.9 or newer (Ada or Hopper and later: L4, L40, RTX 4090, H100, H200, B200)"


@dataclass
class FP8RecipeKwargs:
    """How torchao converts linear layers to float8 (``make_precision(..., fp8_recipe=...)``).

    ``recipe`` names one of torchao's recipes (``tensorwise``, the default, ``rowwise``,
    ``rowwise_with_gw_hp``); ``config`` is a ready ``torchao.float8.Float8LinearConfig`` and
    replaces ``recipe``. ``module_filter_fn(module, fqn)`` picks the linears to convert; the
    default keeps those whose in and out features are multiples of 16 (float8 matmuls need it).
    """

    recipe: str | None = None
    config: Any = None
    module_filter_fn: Callable[[torch.nn.Module, str], bool] | None = None

    def __post_init__(self) -> None:
        if self.recipe is not None and self.recipe not in RECIPES:
            raise ConfigError(
                f"FP8RecipeKwargs(recipe={self.recipe!r}) is not a torchao float8 recipe",
                key="recipe",
                fix=f"use one of {', '.join(RECIPES)}, or pass config=Float8LinearConfig(...)",
            )
        if self.recipe is not None and self.config is not None:
            raise ConfigError(
                "FP8RecipeKwargs got both recipe and config; config would silently win",
                key="recipe",
                fix="pass either recipe=... or config=Float8LinearConfig(...)",
            )

    def filter_for(self, model: torch.nn.Module) -> Callable[[torch.nn.Module, str], bool]:
        """The layer filter for converting ``model`` (a subclass may look at the model)."""
        return self.module_filter_fn or dims_multiple_of_16


def dims_multiple_of_16(module: torch.nn.Module, fqn: str) -> bool:
    """The default filter: linears whose shapes float8 matmuls accept."""
    if isinstance(module, torch.nn.Linear):
        return module.in_features % 16 == 0 and module.out_features % 16 == 0
    return True


def fp8_hardware_problem(device: torch.device) -> str | None:
    """Why float8 training cannot run on ``device``, or None when it can."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return f"this process runs on {device.type}"
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) < MIN_CAPABILITY:
        name = torch.cuda.get_device_name(device)
        return f"{name} has compute capability {major}.{minor}"
    return None


def check_fp8_available(device: torch.device, source: str) -> None:
    """Raise a ConfigError naming the setting, its source and the fix when fp8 cannot run."""
    problem = fp8_hardware_problem(device)
    if problem is not None:
        raise ConfigError(
            f"mixed_precision='fp8' (from {source}) needs {_HARDWARE}; {problem}",
            key="mixed_precision",
            fix="use mixed_precision 'bf16' on this hardware, or run on such a GPU",
        )
    if importlib.util.find_spec("torchao") is None:
        raise ConfigError(
            f"mixed_precision='fp8' (from {source}) needs the torchao package, not installed",
            key="mixed_precision",
            fix="pip install 'overdrive[fp8]'",
        )


class FP8Precision(AutocastPrecision):
    """Linears swapped for torchao's Float8Linear; everything else under bf16 autocast."""

    def __init__(
        self,
        device: torch.device,
        recipe: FP8RecipeKwargs | None = None,
        autocast_kwargs: AutocastKwargs | None = None,
    ) -> None:
        super().__init__("fp8", device, torch.bfloat16, autocast_kwargs)
        self.recipe = recipe or FP8RecipeKwargs()

    def float8_config(self) -> Any:
        """The torchao ``Float8LinearConfig`` the recipe describes."""
        from torchao.float8 import Float8LinearConfig

        if self.recipe.config is not None:
            return self.recipe.config
        if self.recipe.recipe is not None:
            return Float8LinearConfig.from_recipe_name(self.recipe.recipe)
        return Float8LinearConfig()

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        if not getattr(module, "_overdrive_fp8", False):
            from torchao.float8 import convert_to_float8_training

            module = convert_to_float8_training(
                module,
                config=self.float8_config(),
                module_filter_fn=self.recipe.filter_for(module),
            )
            module._overdrive_fp8 = True  # type: ignore[assignment]
        return super().convert_module(module)
