"""What a simulation refuses before any rank runs: DeepSpeed's ZeRO-Offload.

Its optimizer is DeepSpeed's CPU Adam, a C++ kernel that steps the optimizer state in the
tensors' own memory (and ZeRO-Offload checks the alignment of that memory), which a simulated
rank's tensors do not have; the process would crash in it. Said with the setting and where it
came from, with the fix, before anything starts.
"""

from __future__ import annotations

from overdrive.config import Settings
from overdrive.config.types import DistributedType
from overdrive.ds.config import KNOBS, build
from overdrive.errors import LaunchError

OFFLOAD_PATHS = (
    "zero_optimization.offload_optimizer.device",
    "zero_optimization.offload_param.device",
)


def zero_offload(settings: Settings) -> tuple[str, str, str] | None:
    """(what asks for it, device, where it came from) of the first ZeRO offload in the
    DeepSpeed config the settings make (with their DeepSpeed JSON file, if any); None without
    one. What asks is the setting, or the JSON's path when the file gives it."""
    config = build(settings)
    setting_of = {path: key for key, path in KNOBS}
    for path in OFFLOAD_PATHS:
        device = config.get(path)
        if device not in (None, "none"):
            source = config.sources.get(path, config.origin)
            name = path if source == config.origin else setting_of[path]
            return name, str(device), source
    return None


def refuse_zero_offload(settings: Settings, backend: DistributedType) -> None:
    """Raise ``LaunchError`` when a DeepSpeed world offloads its optimizer or parameters."""
    if backend is not DistributedType.DEEPSPEED:
        return
    found = zero_offload(settings)
    if found is None:
        return
    name, device, source = found
    raise LaunchError(
        f"--simulate does not run DeepSpeed's ZeRO-Offload ({name} = {device}, from {source}): "
        "its CPU Adam steps the optimizer in the tensors' memory, which a simulated rank's "
        "tensors do not have\n"
        "  fix: simulate the same layout without offload (leave out --offload_optimizer_device "
        "and --offload_param_device, or set them to none); `overdrive estimate-memory` gives "
        "offload's arithmetic"
    )
