"""``accelerate.utils.bnb``: quantizing models with bitsandbytes (8-bit and 4-bit layers).

The configuration and the checks run without bitsandbytes; the calls that build or inspect
its layers raise ImportError naming it when it is not installed. The engine is
``overdrive.quantize.bnb``.
"""

from __future__ import annotations

from overdrive.quantize.bnb import (
    get_keys_to_not_convert,
    get_parameter_device,
    get_quantized_model_device_map,
    has_4bit_bnb_layers,
    load_and_quantize_model,
    logger,
    quantize_and_offload_8bit,
    replace_with_bnb_layers,
)

__all__ = [
    "get_keys_to_not_convert",
    "get_parameter_device",
    "get_quantized_model_device_map",
    "has_4bit_bnb_layers",
    "load_and_quantize_model",
    "logger",
    "quantize_and_offload_8bit",
    "replace_with_bnb_layers",
]
