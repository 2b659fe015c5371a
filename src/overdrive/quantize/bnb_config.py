"""``BnbQuantizationConfig``: how ``load_and_quantize_model`` quantizes a model with
bitsandbytes (8-bit or 4-bit), validated as in Hugging Face Accelerate. Torch-free to import;
dtype names become torch dtypes when the object is built."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

from overdrive.bigmodel.custom_dtype import CustomDtype

_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
QUANT_TYPES = ("fp4", "nf4")


def _dtype(value: Any, name: str) -> Any:
    """``value`` as a torch dtype ("fp32", "fp16", "bf16" or a dtype)."""
    import torch

    if isinstance(value, str):
        if value not in _DTYPES:
            raise ValueError(f"{name} must be in ['fp32','fp16','bf16'] but found {value}")
        return getattr(torch, _DTYPES[value])
    return value


@dataclass
class BnbQuantizationConfig:
    """bitsandbytes quantization: ``load_in_8bit`` (outlier threshold ``llm_int8_threshold``)
    or ``load_in_4bit`` (``bnb_4bit_quant_type`` fp4/nf4, nested quantization with
    ``bnb_4bit_use_double_quant``, compute in ``bnb_4bit_compute_dtype``), exactly one of them.

    ``torch_dtype`` is the dtype of the layers left unquantized (default fp16 for 8-bit, the
    compute dtype for 4-bit); ``skip_modules`` are not quantized, ``keep_in_fp32_modules``
    are not quantized and stay in float32. ``target_dtype`` (set here) is what size estimates
    count a quantized weight as: ``torch.int8`` or ``CustomDtype.INT4``.
    """

    load_in_8bit: bool = field(default=False, metadata={"help": "enable 8bit quantization."})
    llm_int8_threshold: float = field(
        default=6.0, metadata={"help": "outlier threshold; only for load_in_8bit=True"}
    )
    load_in_4bit: bool = field(default=False, metadata={"help": "enable 4bit quantization."})
    bnb_4bit_quant_type: str = field(
        default="fp4", metadata={"help": "4-bit data type: 'fp4' or 'nf4'"}
    )
    bnb_4bit_use_double_quant: bool = field(
        default=False, metadata={"help": "quantize the quantization constants again"}
    )
    bnb_4bit_compute_dtype: Any = field(
        default="fp16", metadata={"help": "compute dtype of 4-bit layers: 'fp32','fp16','bf16'"}
    )
    torch_dtype: Any = field(
        default=None, metadata={"help": "dtype of the layers that are not quantized"}
    )
    skip_modules: list[str] | None = field(
        default=None, metadata={"help": "modules left unquantized, in torch_dtype"}
    )
    keep_in_fp32_modules: list[str] | None = field(
        default=None, metadata={"help": "modules left unquantized, in float32"}
    )

    def __post_init__(self) -> None:
        import torch

        for name in ("load_in_8bit", "load_in_4bit"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a boolean")
        if self.load_in_4bit and self.load_in_8bit:
            raise ValueError("load_in_4bit and load_in_8bit can't be both True")
        if not self.load_in_4bit and not self.load_in_8bit:
            raise ValueError("load_in_4bit and load_in_8bit can't be both False")
        if not isinstance(self.llm_int8_threshold, (int, float)):
            raise ValueError("llm_int8_threshold must be a float or an int")
        if not isinstance(self.bnb_4bit_quant_type, str):
            raise ValueError("bnb_4bit_quant_type must be a string")
        if self.bnb_4bit_quant_type not in QUANT_TYPES:
            raise ValueError(
                f"bnb_4bit_quant_type must be in ['fp4','nf4'] but found {self.bnb_4bit_quant_type}"
            )
        if not isinstance(self.bnb_4bit_use_double_quant, bool):
            raise ValueError("bnb_4bit_use_double_quant must be a boolean")
        self.bnb_4bit_compute_dtype = _dtype(self.bnb_4bit_compute_dtype, "bnb_4bit_compute_dtype")
        if not isinstance(self.bnb_4bit_compute_dtype, torch.dtype):
            raise ValueError("bnb_4bit_compute_dtype must be a string or a torch.dtype")
        if self.skip_modules is not None and not isinstance(self.skip_modules, list):
            raise ValueError("skip_modules must be a list of strings")
        if self.keep_in_fp32_modules is not None and not isinstance(
            self.keep_in_fp32_modules, list
        ):
            raise ValueError("keep_in_fp_32_modules must be a list of strings")
        self.target_dtype: Any = CustomDtype.INT4 if self.load_in_4bit else torch.int8
        if self.load_in_4bit and self.llm_int8_threshold != 6.0:
            warnings.warn(
                "llm_int8_threshold can only be used for model loaded in 8bit", stacklevel=2
            )
        self.torch_dtype = _dtype(self.torch_dtype, "torch_dtype")
        if self.torch_dtype is None:
            self.torch_dtype = torch.float16 if self.load_in_8bit else self.bnb_4bit_compute_dtype
        if not isinstance(self.torch_dtype, torch.dtype):
            raise ValueError("torch_dtype must be a torch.dtype")
