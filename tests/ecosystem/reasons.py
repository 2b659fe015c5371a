"""Why a row of the ecosystem table is what it is, where its numbers do not say it alone.

Keyed by case name; a value is either one text for every process count or a mapping from
process count to text. Each text was checked against the runs' records and logs
(``.ecosystem/runs``).
"""

from __future__ import annotations

_MAIN_ONLY_SAVE = (
    "resume: the script calls save_state on the main process only, so its checkpoint holds no "
    "state of process 1, which keeps its own random streams at load_state under both engines; "
    "the shuffled loader starts a new epoch from the restored streams and the script skips "
    "what it trained on: each resumed run differs from its own uninterrupted run, the same "
    "way under both, and the two resumed runs agree bitwise"
)
_SKIPS_ITSELF = (
    "resume: the script skips the first batches of the resumed epoch itself (it counts and "
    "`continue`s past them) over a loader reshuffled from the random state restored mid-epoch, "
    "so each resumed run differs from its own uninterrupted run, the same way under both "
    "engines, and the two resumed runs agree bitwise"
)

REASONS: dict[str, str | dict[int, str]] = {
    "sft --config_file fsdp1.yaml": (
        "Hugging Face Accelerate cannot run it on a CPU host: its FSDP plugin (the file's "
        "fsdp_sync_module_states: true) asks for an accelerator device (RuntimeError: no "
        "available devices found); overdrive trains it under FSDP1 on the CPU processes"
    ),
    "sft --config_file fsdp2.yaml": (
        "Hugging Face Accelerate starts but reports MULTI_CPU: FSDP is not applied, and its log "
        "says nothing of it (its weights equal overdrive's multi_gpu.yaml run bitwise); "
        "overdrive trains under FSDP2, whose bf16 computes with bf16 parameters where DDP "
        "autocasts, so the weights differ by that (overdrive's FSDP2 run ends bitwise where "
        "its FSDP1 run does)"
    ),
    "train_unconditional": {1: _SKIPS_ITSELF, 2: _MAIN_ONLY_SAVE},
    "train_unconditional --use_ema": {1: _SKIPS_ITSELF, 2: _MAIN_ONLY_SAVE},
    "train_text_to_image": {2: _MAIN_ONLY_SAVE},
    "train_text_to_image_lora": {2: _MAIN_ONLY_SAVE},
    "train_dreambooth_lora": {2: _MAIN_ONLY_SAVE},
}

# Rows whose uninterrupted runs may differ across the engines (the reason above).
KNOWN_DIFFERENT = frozenset({"sft --config_file fsdp2.yaml"})


def reason_for(name: str, processes: int) -> str:
    """The recorded explanation of a row, or an empty string."""
    found = REASONS.get(name, "")
    if isinstance(found, dict):
        return found.get(processes, "")
    return found
