"""Where an 8-bit or 4-bit (bitsandbytes) model may train: checked when it is prepared, as
Hugging Face Accelerate checks it, before a step runs on weights that cannot train there."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from overdrive.errors import ConfigError


def check_quantized_placement(
    model: Any,
    device: torch.device,
    distributed: bool,
    multi_backend: Callable[[], bool],
    on_xpu: Callable[[], bool],
) -> None:
    """Refuse a quantized model (``is_loaded_in_8bit`` / ``is_loaded_in_4bit`` with an
    ``hf_device_map``) spread over several devices in a distributed run, placed on another
    device than this process's, or offloaded to disk, or to the CPU where bitsandbytes cannot
    run there (it can with its ``multi_backend()`` build, not on XPU)."""
    quantized = getattr(model, "is_loaded_in_8bit", False) or getattr(
        model, "is_loaded_in_4bit", False
    )
    device_map = getattr(model, "hf_device_map", None)
    if not quantized or not device_map:
        return
    devices = set(device_map.values())

    def cpu_supported() -> bool:
        return multi_backend() and not on_xpu()

    if len(devices) > 1 and distributed:
        raise ConfigError(
            "an 8-bit or 4-bit model spread over several devices cannot train in a distributed "
            f"run (its device_map places it on {sorted(map(str, devices))})",
            key="device_map",
            fix="load it on one device per process (device_map={'': <this process's device>}), "
            "or run one process (naive pipeline parallelism)",
        )
    cpu_ok = "cpu" in devices and device.type == "cpu" and cpu_supported()
    if len(devices) == 1 and not cpu_ok:
        where = next(iter(devices))
        index = where if isinstance(where, int) else torch.device(where).index
        if torch.device(device.type, index) != device and (device.index is not None or index != 0):
            raise ConfigError(
                f"an 8-bit or 4-bit model loaded on {where} cannot train on {device}, this "
                "process's device",
                key="device_map",
                fix="load it on this process's device, e.g. device_map={'': "
                "torch.cuda.current_device()}",
            )
    if ("cpu" in devices and not cpu_supported()) or "disk" in devices:
        raise ConfigError(
            "an 8-bit or 4-bit model cannot train with CPU or disk offload (its device_map "
            f"places parts on {sorted(map(str, devices))})",
            key="device_map",
            fix="load it whole on the accelerator, or, to train it on the CPU, install "
            "bitsandbytes with its multi-backend support",
        )
