"""Which of Hugging Face Accelerate's examples run side by side, with which flags.

A case is one example with one set of its own flags (and launch flags, for a backend). A
resume case runs twice: the first run saves a checkpoint each epoch into its own folder, the
second resumes from the first epoch's one; its weights are the second run's.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    """One row of the table (per process count)."""

    name: str  # the row's id: example name and flags
    script: str  # relative to the fetched examples/ folder
    args: tuple[str, ...] = ()  # the example's own flags; "{out}" is the run's folder
    launch: tuple[str, ...] = ()  # launch flags both engines get (a backend's)
    resume: tuple[str, ...] = ()  # a second run's flags; "{first}" is the first run's folder
    processes: tuple[int, ...] = (1, 2)


def _by(name: str, *args: str, **kw: object) -> Case:
    label = " ".join([name, *args]).replace("{out}", "OUT")
    return Case(label, f"by_feature/{name}.py", tuple(args), **kw)  # type: ignore[arg-type]


CHECKPOINT = ("--checkpointing_steps", "epoch", "--output_dir", "{out}")
RESUME = ("--resume_from_checkpoint", "{first}/epoch_0", "--output_dir", "{out}")

CASES: tuple[Case, ...] = (
    Case("nlp_example", "nlp_example.py"),
    Case("nlp_example --mixed_precision fp16", "nlp_example.py", ("--mixed_precision", "fp16")),
    Case("nlp_example --mixed_precision bf16", "nlp_example.py", ("--mixed_precision", "bf16")),
    Case("complete_nlp_example", "complete_nlp_example.py", ("--output_dir", "{out}")),
    Case(
        "complete_nlp_example --with_tracking",
        "complete_nlp_example.py",
        ("--with_tracking", "--project_dir", "{out}", "--output_dir", "{out}"),
    ),
    Case(
        "complete_nlp_example resume from epoch_0",
        "complete_nlp_example.py",
        CHECKPOINT,
        resume=RESUME,
    ),
    _by("checkpointing", *CHECKPOINT),
    _by("checkpointing", "--checkpointing_steps", "2", "--output_dir", "{out}"),
    Case(
        "checkpointing resume from epoch_0",
        "by_feature/checkpointing.py",
        CHECKPOINT,
        resume=RESUME,
    ),
    _by("gradient_accumulation", "--gradient_accumulation_steps", "2"),
    _by("local_sgd", "--local_sgd_steps", "2"),
    _by("tracking", "--with_tracking", "--project_dir", "{out}"),
    _by("memory"),
    _by("early_stopping"),
    _by("cross_validation", "--num_folds", "2"),
    _by("multi_process_metrics"),
    _by("automatic_gradient_accumulation"),
    _by("schedule_free"),
    _by("profiler", "--output_trace_dir", "{out}"),
    _by("ddp_comm_hook", "--ddp_comm_hook", "fp16"),
    _by("ddp_comm_hook", "--ddp_comm_hook", "power_sgd"),
    _by(
        "fsdp_with_peak_mem_tracking",
        *("--model_name_or_path", "bert-base-cased", "--output_dir", "{out}"),
        launch=("--use_fsdp",),
    ),
    _by(
        "gradient_accumulation_for_autoregressive_models",
        *("--gradient_accumulation_steps", "2", "--per_device_batch_size", "8"),
    ),
    _by(
        "deepspeed_with_config_support",
        *("--dataset_name", "wikitext", "--dataset_config_name", "wikitext-2-raw-v1"),
        *("--model_name_or_path", "gpt2", "--block_size", "16", "--num_train_epochs", "1"),
        *("--per_device_train_batch_size", "4", "--seed", "42", "--output_dir", "{out}"),
        launch=("--use_deepspeed", "--zero_stage", "2"),
    ),
    _by(
        "megatron_lm_gpt_pretraining",
        *("--dataset_name", "wikitext", "--dataset_config_name", "wikitext-2-raw-v1"),
        *("--model_name_or_path", "gpt2", "--block_size", "16", "--num_train_epochs", "1"),
        *("--per_device_train_batch_size", "4", "--seed", "42", "--output_dir", "{out}"),
    ),
)


def select(names: str | None) -> list[Case]:
    """The cases whose name starts with one of the comma-separated ``names`` (all if None)."""
    if not names:
        return list(CASES)
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    chosen = [c for c in CASES if any(c.name.startswith(w) for w in wanted)]
    if not chosen:
        raise SystemExit(f"error: no example case starts with any of {wanted}")
    return chosen
