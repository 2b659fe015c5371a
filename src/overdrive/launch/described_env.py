"""The variables Hugging Face Accelerate's launcher sets in its workers and that scripts read
back (transformers' ``TrainingArguments`` takes its mixed precision from
``ACCELERATE_MIXED_PRECISION``, for one). overdrive's own workers read only the handed-over
settings; these are exported beside them so such code sees the launch's settings."""

from __future__ import annotations

from overdrive.config import Settings
from overdrive.config.settings import display_value

# setting key -> the variable Hugging Face Accelerate's launcher sets from it
EXPORTED = {
    "mixed_precision": "ACCELERATE_MIXED_PRECISION",
    "use_cpu": "ACCELERATE_USE_CPU",
    "use_fsdp": "ACCELERATE_USE_FSDP",
    "fsdp_config.fsdp_cpu_ram_efficient_loading": "FSDP_CPU_RAM_EFFICIENT_LOADING",
}


def described_variables(settings: Settings) -> dict[str, str]:
    """The variables above for every setting this launch sets (defaults are not exported)."""
    return {
        variable: display_value(settings[key])
        for key, variable in EXPORTED.items()
        if settings.is_set(key)
    }
