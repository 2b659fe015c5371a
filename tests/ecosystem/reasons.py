"""Why a row of the ecosystem table is what it is, where its numbers do not say it alone.

Keyed by case name; a value is either one text for every process count or a mapping from
process count to text. Each text was checked against the runs' records and logs
(``.ecosystem/runs``).
"""

from __future__ import annotations

_ITS_RESUME = (
    "Hugging Face Accelerate's resumed run is not its own uninterrupted one: on more than one "
    "process its loader shuffles with a generator seeded at prepare that its checkpoint does "
    "not hold (the cause docs/migrating.md's examples table shows); overdrive's resumed run "
    "ends bitwise where its uninterrupted one does, so the two resumed runs differ"
)
_SKIPS_ITSELF = (
    "resume: the script skips the first batches of the resumed epoch itself (it counts and "
    "`continue`s past them); overdrive's load_state leaves the loader as Hugging Face "
    "Accelerate's does, so the resumed run is Accelerate's (it shuffles the resumed epoch "
    "from the random state restored mid-epoch), not the uninterrupted one"
)

_MAIN_ONLY_SAVE = (
    "resume: the script calls save_state on the main process only, so its checkpoint holds no "
    "state of process 1, and overdrive resumes process 1 from process 0's random state "
    "(load_state warns so); the EMA save hook draws from process 0's generator "
    "(EMAModel.save_pretrained builds a model from its config), so that state is not process "
    "1's and overdrive's resumed run differs from its uninterrupted one (without --use_ema "
    "both processes' streams are equal and the resume is exact); Hugging Face Accelerate's "
    "resumed run differs from its own uninterrupted one too"
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
    "train_unconditional": {1: _SKIPS_ITSELF, 2: _ITS_RESUME},
    "train_unconditional --use_ema": {1: _SKIPS_ITSELF, 2: _MAIN_ONLY_SAVE},
    "train_text_to_image": {2: _ITS_RESUME},
    "train_text_to_image_lora": {2: _ITS_RESUME},
    "train_dreambooth_lora": {2: _ITS_RESUME},
}

# Rows whose uninterrupted runs may differ across the engines (the reason above).
KNOWN_DIFFERENT = frozenset({"sft --config_file fsdp2.yaml"})
# Rows whose overdrive resume is known not to end where its uninterrupted run does: a
# checkpoint the main process wrote alone (the reason above).
RESUME_NOT_EXACT = frozenset({("train_unconditional --use_ema", 2)})


def reason_for(name: str, processes: int) -> str:
    """The recorded explanation of a row, or an empty string."""
    found = REASONS.get(name, "")
    if isinstance(found, dict):
        return found.get(processes, "")
    return found
