"""Settings that are valid but cannot take effect with the resolved backend.

A whole backend section (``fsdp_config``...) is read only by its own backend; under any
other ``distributed_type`` it would be ignored without a word. These are warnings, not
errors: one config file may serve several launches (``--distributed_type`` on the command
line picks the backend), so the section is named, with the setting that made it inert.
"""

from __future__ import annotations

from overdrive.config import schema
from overdrive.config.settings import Settings

SECTION_BACKENDS = {
    "fsdp_config": "FSDP",
    "deepspeed_config": "DEEPSPEED",
    "megatron_lm_config": "MEGATRON_LM",
}
# Section settings the rules copy to top-level settings, so they act under any backend.
ACTS_ANYWAY = frozenset(
    {
        "deepspeed_config.gradient_accumulation_steps",
        "deepspeed_config.bf16",
        "deepspeed_config.fp16",
    }
)
_LISTED = 3  # settings named per warning; the rest are counted


def inert_keys(settings: Settings, section: str) -> list[str]:
    """The set keys of ``section`` that the resolved backend will ignore."""
    if settings["distributed_type"] == SECTION_BACKENDS[section]:
        return []
    prefix = section + "."
    return [
        key
        for key in settings
        if key.startswith(prefix) and key not in ACTS_ANYWAY and settings.is_set(key)
    ]


def inert_sections(settings: Settings, *, from_code_only: bool = False) -> list[str]:
    """One warning per backend section that is set but cannot take effect.

    ``from_code_only``: only sections with a setting from code (the launcher, which cannot
    see the code, has already warned about the rest).
    """
    notes: list[str] = []
    dtype = settings["distributed_type"]
    if dtype is None:
        chosen = "distributed_type is not set (automatic: DDP or one device)"
    else:
        chosen = f"distributed_type is {dtype} ({settings.source('distributed_type')})"
    for section, backend in SECTION_BACKENDS.items():
        keys = inert_keys(settings, section)
        if not keys or (from_code_only and all(settings.source(k).kind != "code" for k in keys)):
            continue
        named = ", ".join(f"{k.split('.', 1)[1]} ({settings.source(k)})" for k in keys[:_LISTED])
        more = f" and {len(keys) - _LISTED} more" if len(keys) > _LISTED else ""
        notes.append(
            f"{section} cannot take effect: {chosen}, and only {backend} reads {named}{more}\n"
            f"  fix: set distributed_type to {backend} to use it, or remove the {section} section"
        )
    return notes


def no_effect_notes(settings: Settings, *, from_code_only: bool = False) -> list[str]:
    """One line per setting Hugging Face Accelerate's files may hold that is set here (not at
    its default) but cannot take effect under overdrive, with its source and the reason."""

    notes: list[str] = []
    for item in schema.iter_settings():
        if item.no_effect is None or not settings.is_set(item.key):
            continue
        source = settings.source(item.key)
        if from_code_only and source.kind != "code":
            continue
        if settings[item.key] == item.default:
            continue
        notes.append(
            f"`{item.key}` = {settings[item.key]!r} ({source}) cannot take effect: it is for "
            f"{item.no_effect}"
        )
    return notes
