"""Hugging Face Accelerate's fp8 recipe handlers, on overdrive's torchao fp8.

``AORecipeKwargs`` is torchao's recipe and runs as Hugging Face Accelerate runs it: its
``Float8LinearConfig`` defaults to padded inner dimensions and fp8 all-gathers under FSDP2,
and without a ``module_filter_func`` the model's first and last linear layers stay in high
precision. ``FP8RecipeKwargs`` here takes Hugging Face Accelerate's arguments; overdrive's fp8
runs through torchao only, so the TransformerEngine / MS-AMP fields it shares with
``TERecipeKwargs`` and ``MSAMPRecipeKwargs`` are refused by name when given (they could not
take effect), and those two classes validate as Hugging Face Accelerate's do but are refused
by ``Accelerator(kwargs_handlers=...)``.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, get_args

import torch

from overdrive.errors import ConfigError
from overdrive.precision.fp8 import FP8RecipeKwargs as EngineRecipe
from overdrive.precision.fp8_layers import filter_linear_layers, find_first_last_linear_layers
from overdrive.utils.dataclasses import AmaxComputeAlgorithm, FP8Format, OptLevel
from overdrive.utils.environment import clear_environment, parse_flag_from_env
from overdrive.utils.imports import is_torchao_available, is_transformer_engine_available

_PREFIX = "ACCELERATE_FP8_"


def _first_and_last_linear(model: torch.nn.Module) -> list[str | None]:
    return list(find_first_last_linear_layers(model))


class AORecipeKwargs(EngineRecipe):
    """torchao fp8 training: ``config`` (a ``torchao.float8.Float8LinearConfig``; built from
    ``pad_inner_dim`` and ``enable_fsdp_float8_all_gather``, each True unless
    ``ACCELERATE_FP8_PAD_INNER_DIM`` / ``ACCELERATE_FP8_ENABLE_FSDP_FLOAT8_ALL_GATHER`` say
    otherwise, when not given) and ``module_filter_func(module, fqn)`` choosing the layers to
    convert (default: linears with dimensions divisible by 16, except the model's first and
    last)."""

    def __init__(
        self,
        config: Any = None,
        module_filter_func: Callable[[torch.nn.Module, str], bool] | None = None,
        pad_inner_dim: bool | None = None,
        enable_fsdp_float8_all_gather: bool | None = None,
    ) -> None:
        if not is_torchao_available():
            raise ImportError(
                "TorchAO is not available. Please install it or use a different backend."
            )
        if config is None:
            from torchao.float8 import Float8LinearConfig

            if pad_inner_dim is None:
                pad_inner_dim = parse_flag_from_env(_PREFIX + "PAD_INNER_DIM", default=True)
            if enable_fsdp_float8_all_gather is None:
                enable_fsdp_float8_all_gather = parse_flag_from_env(
                    _PREFIX + "ENABLE_FSDP_FLOAT8_ALL_GATHER", default=True
                )
            config = Float8LinearConfig(
                pad_inner_dim=pad_inner_dim,
                enable_fsdp_float8_all_gather=enable_fsdp_float8_all_gather,
            )
        self.pad_inner_dim = pad_inner_dim
        self.enable_fsdp_float8_all_gather = enable_fsdp_float8_all_gather
        super().__init__(recipe=None, config=config, module_filter_fn=module_filter_func)

    @property
    def module_filter_func(self) -> Callable[[torch.nn.Module, str], bool] | None:
        """The filter given (None: the default described above)."""
        return self.module_filter_fn

    @module_filter_func.setter
    def module_filter_func(self, value: Callable[[torch.nn.Module, str], bool] | None) -> None:
        self.module_filter_fn = value

    def filter_for(self, model: torch.nn.Module) -> Callable[[torch.nn.Module, str], bool]:
        if self.module_filter_fn is not None:
            return self.module_filter_fn

        return partial(filter_linear_layers, layers_to_filter=_first_and_last_linear(model))

    def to_dict(self) -> dict[str, Any]:
        return copy.deepcopy(self.__dict__)


# Hugging Face Accelerate's FP8RecipeKwargs arguments that only TransformerEngine / MS-AMP use.
_FOREIGN = (
    "opt_level",
    "use_autocast_during_eval",
    "margin",
    "interval",
    "fp8_format",
    "amax_history_len",
    "amax_compute_algo",
    "override_linear_precision",
    "use_mxfp8_block_scaling",
    "backend",
)


class FP8RecipeKwargs(EngineRecipe):
    """Hugging Face Accelerate's (deprecated) fp8 recipe, on overdrive's torchao fp8.

    The positional arguments are Hugging Face Accelerate's, for its TransformerEngine and
    MS-AMP backends; overdrive has neither, so giving any of them raises ``ConfigError``
    naming it (use ``AORecipeKwargs``). ``recipe``, ``config`` and ``module_filter_fn`` (by
    keyword) are overdrive's torchao recipe, as ``overdrive.FP8RecipeKwargs`` takes them.
    """

    def __init__(
        self,
        opt_level: str | None = None,
        use_autocast_during_eval: bool | None = None,
        margin: int | None = None,
        interval: int | None = None,
        fp8_format: str | None = None,
        amax_history_len: int | None = None,
        amax_compute_algo: str | None = None,
        override_linear_precision: tuple[bool, bool, bool] | None = None,
        use_mxfp8_block_scaling: bool | None = None,
        backend: str | None = None,
        *,
        recipe: str | None = None,
        config: Any = None,
        module_filter_fn: Callable[[torch.nn.Module, str], bool] | None = None,
    ) -> None:
        given = dict(
            zip(
                _FOREIGN,
                (
                    opt_level,
                    use_autocast_during_eval,
                    margin,
                    interval,
                    fp8_format,
                    amax_history_len,
                    amax_compute_algo,
                    override_linear_precision,
                    use_mxfp8_block_scaling,
                    backend,
                ),
            )
        )
        foreign = [name for name, value in given.items() if value is not None]
        if foreign:
            raise ConfigError(
                f"FP8RecipeKwargs({', '.join(f'{n}=...' for n in foreign)}) configures the "
                "TransformerEngine / MS-AMP fp8 backends; overdrive trains fp8 through torchao "
                "only, so these could not take effect",
                key=foreign[0],
                fix="use AORecipeKwargs(config=..., module_filter_func=...) or "
                "FP8RecipeKwargs(recipe='tensorwise'|'rowwise'|'rowwise_with_gw_hp')",
            )
        super().__init__(recipe=recipe, config=config, module_filter_fn=module_filter_fn)


class _ForeignBackendRecipe:
    """``to_dict``/``to_kwargs`` like Hugging Face Accelerate's kwargs handlers; not an
    overdrive kwargs handler, so ``Accelerator(kwargs_handlers=[...])`` refuses it."""

    def to_dict(self) -> dict[str, Any]:
        return copy.deepcopy(self.__dict__)

    def to_kwargs(self) -> dict[str, Any]:
        with clear_environment():
            default = type(self)().to_dict()
        return {k: v for k, v in self.to_dict().items() if default.get(k) != v}


@dataclass
class TERecipeKwargs(_ForeignBackendRecipe):
    """Hugging Face Accelerate's TransformerEngine fp8 recipe: validated as there (unset fields
    read ``ACCELERATE_FP8_*``), and ImportError without TransformerEngine. overdrive does not
    train with TransformerEngine; its fp8 is torchao's (``AORecipeKwargs``)."""

    use_autocast_during_eval: bool | None = None
    margin: int | None = None
    interval: int | None = None
    fp8_format: str | None = None
    amax_history_len: int | None = None
    amax_compute_algo: str | None = None
    override_linear_precision: tuple[bool, bool, bool] | None = None
    use_mxfp8_block_scaling: bool | None = None

    def __post_init__(self) -> None:
        if not is_transformer_engine_available():
            raise ImportError(
                "TransformerEngine is not available. Please install it or use a different "
                "backend (overdrive's fp8 backend is torchao: AORecipeKwargs)."
            )
        env = os.environ
        if self.use_autocast_during_eval is None:
            self.use_autocast_during_eval = parse_flag_from_env(
                _PREFIX + "USE_AUTOCAST_DURING_EVAL"
            )
        if self.margin is None:
            self.margin = int(env.get(_PREFIX + "MARGIN", 0))
        if self.interval is None:
            self.interval = int(env.get(_PREFIX + "INTERVAL", 1))
        self.fp8_format = (self.fp8_format or env.get(_PREFIX + "FORMAT", "HYBRID")).upper()
        if self.fp8_format not in get_args(FP8Format):
            raise ValueError(f"`fp8_format` must be one of {' or '.join(get_args(FP8Format))}.")
        algo = self.amax_compute_algo or env.get(_PREFIX + "AMAX_COMPUTE_ALGO", "most_recent")
        self.amax_compute_algo = algo.lower()
        if self.amax_compute_algo not in get_args(AmaxComputeAlgorithm):
            choices = " or ".join(get_args(AmaxComputeAlgorithm))
            raise ValueError(f"`amax_compute_algo` must be one of {choices}")
        if self.amax_history_len is None:
            self.amax_history_len = int(env.get(_PREFIX + "AMAX_HISTORY_LEN", 1024))
        if self.override_linear_precision is None:
            self.override_linear_precision = tuple(  # type: ignore[assignment]
                parse_flag_from_env(_PREFIX + f"OVERRIDE_{gemm}")
                for gemm in ("FPROP", "DGRAD", "WGRAD")
            )
        if self.use_mxfp8_block_scaling is None:
            self.use_mxfp8_block_scaling = parse_flag_from_env(_PREFIX + "USE_MXFP8_BLOCK_SCALING")


@dataclass
class MSAMPRecipeKwargs(_ForeignBackendRecipe):
    """Hugging Face Accelerate's MS-AMP fp8 recipe: ``opt_level`` "O1" or "O2" (unset:
    ``ACCELERATE_FP8_OPT_LEVEL``, else "O2"). overdrive does not train with MS-AMP; its fp8 is
    torchao's (``AORecipeKwargs``)."""

    opt_level: str | None = None

    def __post_init__(self) -> None:
        if self.opt_level is None:
            self.opt_level = os.environ.get(_PREFIX + "OPT_LEVEL", "O2")
        if self.opt_level not in get_args(OptLevel):
            raise ValueError(f"`opt_level` must be one of {' or '.join(get_args(OptLevel))}")


__all__ = [
    "AORecipeKwargs",
    "FP8RecipeKwargs",
    "MSAMPRecipeKwargs",
    "TERecipeKwargs",
]
