"""Why a row of the examples table differs or does not run, as measured and explained.

Keyed by case name and process count (None: every count). A row that differs and has no
entry shows the runs' own error lines instead, so an unexplained difference stays visible.
"""

from __future__ import annotations

FSDP = "fsdp_with_peak_mem_tracking --model_name_or_path bert-base-cased --output_dir OUT"
DEEPSPEED = (
    "deepspeed_with_config_support --dataset_name wikitext --dataset_config_name "
    "wikitext-2-raw-v1 --model_name_or_path gpt2 --block_size 16 --num_train_epochs 1 "
    "--per_device_train_batch_size 4 --seed 42 --output_dir OUT"
)

REASONS: dict[tuple[str, int | None], str] = {
    (DEEPSPEED, 2): (
        "Hugging Face Accelerate's DeepSpeed on 2 CPU processes: each process reports "
        "num_processes 1, process index 0 (its state forms no group for DeepSpeed without an "
        "accelerator device; with ACCELERATE_USE_CPU=1 it would train plain MULTI_CPU without "
        "DeepSpeed instead), so it writes train_batch_size 4 into the DeepSpeed config where "
        "DeepSpeed's world of 2 needs 8: AssertionError in deepspeed.initialize; overdrive "
        "trains it under ZeRO-2 (on 1 process both use DeepSpeed and agree bitwise)"
    ),
    (FSDP, None): (
        "not runnable on a CPU host: Hugging Face Accelerate's FSDP needs an accelerator "
        "(RuntimeError: no available devices found); overdrive trains its first epoch under "
        "FSDP on CPU processes, then the example's own TorchTracemalloc fails: it reads "
        "GPU memory counters only and sets no end value on a CPU"
    ),
}


def reason_for(name: str, processes: int) -> str:
    """The recorded explanation for a case on ``processes`` processes ('' when none)."""
    return REASONS.get((name, processes)) or REASONS.get((name, None), "")
