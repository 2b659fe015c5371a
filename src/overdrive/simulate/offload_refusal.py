"""What a simulation refuses before any rank runs: DeepSpeed's ZeRO-Offload.

Its optimizer is DeepSpeed's CPU Adam, a C++ kernel that steps the optimizer state in the
tensors' own memory (and ZeRO-Offload checks the alignment of that memory), which a simulated
rank's tensors do not have; the process would crash in it. Said with the setting and where it
came from, with the fix, before anything starts.
"""

from __future__ import annotations

import json
from pathlib import Path

from overdrive.config import Settings
from overdrive.config.types import DistributedType
from overdrive.errors import LaunchError

OFFLOAD_KEYS = (
    ("deepspeed_config.offload_optimizer_device", "zero_optimization.offload_optimizer.device"),
    ("deepspeed_config.offload_param_device", "zero_optimization.offload_param.device"),
)
FILE_KEY = "deepspeed_config.deepspeed_config_file"


def _from_file(path: str, dotted: str) -> object:
    try:
        tree: object = json.loads(Path(path).expanduser().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # the real launch's own check words what is wrong with the file
    for part in dotted.split("."):
        tree = tree.get(part) if isinstance(tree, dict) else None
    return tree


def zero_offload(settings: Settings) -> tuple[str, str, str] | None:
    """(setting, device, where it came from) of the first ZeRO offload the settings or their
    DeepSpeed config file ask for; None without one."""
    for key, dotted in OFFLOAD_KEYS:
        device = settings[key]
        if device not in (None, "none"):
            return key, str(device), str(settings.source(key))
        path = settings[FILE_KEY]
        if path is not None:
            found = _from_file(str(path), dotted)
            if found not in (None, "none"):
                return dotted, str(found), f"{FILE_KEY} {path}"
    return None


def refuse_zero_offload(settings: Settings, backend: DistributedType) -> None:
    """Raise ``LaunchError`` when a DeepSpeed world offloads its optimizer or parameters."""
    if backend is not DistributedType.DEEPSPEED:
        return
    found = zero_offload(settings)
    if found is None:
        return
    key, device, source = found
    raise LaunchError(
        f"--simulate does not run DeepSpeed's ZeRO-Offload ({key} = {device}, from {source}): "
        "its CPU Adam steps the optimizer in the tensors' memory, which a simulated rank's "
        "tensors do not have\n"
        "  fix: simulate the same layout without offload (leave out --offload_optimizer_device "
        "and --offload_param_device, or set them to none); `overdrive estimate-memory` gives "
        "offload's arithmetic"
    )
