"""Hugging Face Accelerate's per-dimension parallelism settings objects
(``ParallelismConfig(tp_handler=..., cp_handler=..., sp_handler=...)``) and its older
``TorchTensorParallelPlugin``, validated as there. Torch-free to import."""

from __future__ import annotations

import importlib.metadata
import os
import re
import warnings
from dataclasses import dataclass, field
from typing import Any

from overdrive.arguments.beta_floors import (
    BETA_CP_AVAILABLE_PYTORCH_VERSION,
    BETA_TP_AVAILABLE_PYTORCH_VERSION,
    BETA_TP_AVAILABLE_TRANSFORMERS_VERSION,
)

CP_COMM_STRATEGIES = ("allgather", "alltoall")
SP_BUILTIN_ATTENTION = ("flash_attention_2", "flash_attention_3", "sdpa")
SP_REFUSED_ATTENTION = ("eager", "flex_attention")


def _release(version: str) -> tuple[int, ...]:
    """``2.13.0+cpu`` -> (2, 13, 0): the release numbers, padded to three."""
    match = re.match(r"\d+(\.\d+)*", version)
    numbers = tuple(int(n) for n in match.group(0).split(".")) if match else (0,)
    return numbers + (0,) * (3 - len(numbers))


def _installed_at_least(distribution: str, version: str) -> bool:
    """Whether ``distribution`` is installed at ``version`` or later (its release numbers, so
    a nightly or local build compares as its release), read without importing it."""
    try:
        installed = importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return _release(installed) >= _release(version)


def _torch_at_least(version: str) -> bool:
    return _installed_at_least("torch", version)


@dataclass
class TorchTensorParallelPlugin:
    """Tensor parallelism of ``tp_size`` over ``torch_device_mesh`` (Hugging Face Accelerate's
    older way to ask for it; ``ParallelismConfig(tp_size=...)`` is the current one)."""

    tp_size: int = field(
        default=1, metadata={"help": "tensor parallel size used to build the device mesh"}
    )
    torch_device_mesh: Any = field(default=None)


@dataclass
class TorchTensorParallelConfig:
    """Tensor-parallel options; needs torch 2.3 and transformers 4.52 or newer.
    ``enable_async_tp`` is not supported (a warning says it is ignored)."""

    enable_async_tp: bool = False

    def __post_init__(self) -> None:
        if not _torch_at_least(BETA_TP_AVAILABLE_PYTORCH_VERSION):
            raise ValueError(
                "Torch tensor parallelism is only available in PyTorch "
                f"{BETA_TP_AVAILABLE_PYTORCH_VERSION} and later versions. Please upgrade your "
                "PyTorch version."
            )
        if not _installed_at_least("transformers", BETA_TP_AVAILABLE_TRANSFORMERS_VERSION):
            raise ValueError(
                f"TP requires transformers >= {BETA_TP_AVAILABLE_TRANSFORMERS_VERSION}"
            )
        if self.enable_async_tp:
            warnings.warn(
                "Async tensor parallelism is currently not supported, ignoring this option.",
                stacklevel=2,
            )


@dataclass
class TorchContextParallelConfig:
    """Context-parallel options: ``cp_comm_strategy`` "allgather" (default, or
    ``PARALLELISM_CONFIG_CP_COMM_STRATEGY``) or "alltoall"; needs torch 2.6 or newer."""

    cp_comm_strategy: str | None = field(
        default=None,
        metadata={"help": "how context-parallel ranks exchange keys/values: allgather or alltoall"},
    )

    def __post_init__(self) -> None:
        if not _torch_at_least(BETA_CP_AVAILABLE_PYTORCH_VERSION):
            raise ValueError(
                "FSDP2-based Context parallelism is only available in PyTorch "
                f"{BETA_CP_AVAILABLE_PYTORCH_VERSION} and later versions. Please upgrade your "
                "PyTorch version."
            )
        if self.cp_comm_strategy is None:
            self.cp_comm_strategy = os.environ.get(
                "PARALLELISM_CONFIG_CP_COMM_STRATEGY", "allgather"
            )
        if self.cp_comm_strategy not in CP_COMM_STRATEGIES:
            raise ValueError(
                f"Invalid cp_comm_strategy: {self.cp_comm_strategy}. Must be one of 'allgather' "
                "or 'alltoall'."
            )


@dataclass
class DeepSpeedSequenceParallelConfig:
    """DeepSpeed (ALST/Ulysses) sequence-parallel options.

    ``sp_seq_length_is_variable`` (default True, or ``PARALLELISM_CONFIG_SP_SEQ_LENGTH_IS_VARIABLE``)
    lets the sequence length change between batches; when False, ``sp_seq_length`` (or
    ``PARALLELISM_CONFIG_SP_SEQ_LENGTH``) is required. ``sp_attn_implementation`` is one of
    flash_attention_2, flash_attention_3, sdpa, or a hub flash-attention kernel
    ("kernels-community/flash-attn2"); eager and flex_attention are refused.
    """

    sp_seq_length: int | None = field(default=None, metadata={"help": "fixed sequence length"})
    sp_seq_length_is_variable: bool | None = field(
        default=None, metadata={"help": "whether the sequence length varies between batches"}
    )
    sp_attn_implementation: str | None = field(
        default=None, metadata={"help": "attention implementation used under sequence parallelism"}
    )

    def __post_init__(self) -> None:
        env = os.environ
        if self.sp_seq_length_is_variable is None:
            variable = env.get("PARALLELISM_CONFIG_SP_SEQ_LENGTH_IS_VARIABLE", "true")
            self.sp_seq_length_is_variable = variable.lower() == "true"
        if not self.sp_seq_length_is_variable and self.sp_seq_length is None:
            if "PARALLELISM_CONFIG_SP_SEQ_LENGTH" not in env:
                raise ValueError(
                    "when `sp_seq_length_is_variable` is `False` `sp_seq_length` must be provided "
                    "either through the constructor or the environment variable "
                    "PARALLELISM_CONFIG_SP_SEQ_LENGTH"
                )
            length = env["PARALLELISM_CONFIG_SP_SEQ_LENGTH"]
            self.sp_seq_length = None if length == "None" else int(length)
        if self.sp_attn_implementation is None:
            self.sp_attn_implementation = env.get("PARALLELISM_CONFIG_SP_ATTN_IMPLEMENTATION")
        attention = self.sp_attn_implementation
        if attention is None:
            return
        if attention in SP_REFUSED_ATTENTION:
            raise ValueError(
                f"Invalid sp_attn_implementation: {attention}. 'eager' and 'flex_attention' are "
                "not supported with sequence parallelism."
            )
        hub_kernel = "/" in attention and "flash-attn" in attention
        if attention not in SP_BUILTIN_ATTENTION and not hub_kernel:
            raise ValueError(
                f"Invalid sp_attn_implementation: {attention}. Must be one of "
                f"{list(SP_BUILTIN_ATTENTION)} or a hub-hosted flash attention kernel "
                "(e.g. 'kernels-community/flash-attn2')."
            )
