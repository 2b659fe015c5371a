"""Which TRL and diffusers scripts run side by side, with which flags.

A case is one script with its own flags (and, for TRL's shipped config files, the file both
launchers get). Placeholders: ``{assets[NAME]}`` is a built asset (``build.build_all``),
``{out}`` the run's output folder. A resume case runs twice: the first run trains
uninterrupted and writes its checkpoints; the second starts from a copy of one of them
alone (``resume_from``) in a fresh output folder, so ``latest`` finds that one.
"""

from __future__ import annotations

from dataclasses import dataclass

TRL = "trl"  # scripts of the installed TRL: trl/scripts/<name>.py
DIFFUSERS = "diffusers"  # fetched scripts: .ecosystem/src/examples/<path>


@dataclass(frozen=True)
class Case:
    """One row of the table (per process count)."""

    name: str
    source: str  # TRL or DIFFUSERS
    script: str  # trl: "sft"; diffusers: a path under examples/
    args: tuple[str, ...] = ()
    config: str | None = None  # a TRL accelerate config file (its name in the wheel)
    resume_from: str | None = None  # the checkpoint the second run resumes from
    resume_args: tuple[str, ...] = ()  # the second run's extra flags ("{checkpoint}": its path)
    checkpoints_kept: int | None = None  # how many checkpoint-* folders must remain
    checkpoint_holds: tuple[str, ...] = ()  # what each checkpoint folder must hold
    processes: tuple[int, ...] = (1, 2)
    seed_torch: bool = False  # the script takes no --seed: seed torch when it loads
    cwd_files: tuple[str, ...] = ()  # assets copied into the run's working folder


TRL_COMMON = (
    "--model_name_or_path", "{assets[llama]}",
    "--output_dir", "{out}",
    "--max_steps", "4",
    "--per_device_train_batch_size", "4",
    "--logging_steps", "1",
    "--save_steps", "2",
    "--report_to", "none",
    "--seed", "42",
    "--learning_rate", "1e-3",
    "--use_cpu",
)  # fmt: skip
SFT = (*TRL_COMMON, "--dataset_name", "{assets[sft_data]}", "--max_length", "32")
DPO = (*TRL_COMMON, "--dataset_name", "{assets[dpo_data]}", "--max_length", "32")
GRPO = (
    *TRL_COMMON,
    "--dataset_name", "{assets[grpo_data]}",
    "--reward_funcs", "rewards.yes_reward",
    "--num_generations", "4",
    "--max_completion_length", "8",
)  # fmt: skip
TRL_RESUME = ("--resume_from_checkpoint", "{checkpoint}")

CHECKPOINTING = ("--checkpointing_steps", "2", "--checkpoints_total_limit", "2")
LATEST = ("--resume_from_checkpoint", "latest")
UNCONDITIONAL = (
    "--train_data_dir", "{assets[images]}",
    "--model_config_name_or_path", "{assets[unet_config]}",
    "--resolution", "16",
    "--output_dir", "{out}",
    "--train_batch_size", "2",
    "--eval_batch_size", "1",
    "--num_epochs", "2",
    "--ddpm_num_inference_steps", "2",
    "--learning_rate", "1e-3",
    "--lr_warmup_steps", "0",
    *CHECKPOINTING,
)  # fmt: skip
SD_COMMON = (
    "--pretrained_model_name_or_path", "{assets[sd]}",
    "--resolution", "16",
    "--output_dir", "{out}",
    "--train_batch_size", "2",
    "--max_train_steps", "6",
    "--learning_rate", "1e-3",
    "--lr_warmup_steps", "0",
    "--seed", "0",
    *CHECKPOINTING,
)  # fmt: skip
TEXT_TO_IMAGE = ("--train_data_dir", "{assets[captioned]}", *SD_COMMON)
DREAMBOOTH = (
    "--instance_data_dir",
    "{assets[images]}",
    "--instance_prompt",
    "a red cat",
    *SD_COMMON,
)
LORA_FILE = "pytorch_lora_weights.safetensors"

TRL_CONFIGS = ("multi_gpu", "fsdp1", "fsdp2", "zero1", "zero2", "zero3")

CASES: tuple[Case, ...] = (
    Case("sft", TRL, "sft", SFT),
    Case("sft --packing", TRL, "sft", (*SFT, "--packing")),
    Case(
        "sft --use_peft (LoRA)",
        TRL,
        "sft",
        (*SFT, "--use_peft", "--lora_r", "4", "--lora_alpha", "8"),
    ),
    Case("dpo", TRL, "dpo", DPO),
    Case("grpo (Python reward)", TRL, "grpo", GRPO, cwd_files=("rewards/rewards.py",)),
    Case(
        "sft resume from checkpoint-2",
        TRL,
        "sft",
        SFT,
        resume_from="checkpoint-2",
        resume_args=TRL_RESUME,
    ),
    *(
        Case(
            f"sft --config_file {name}.yaml", TRL, "sft", SFT, config=f"{name}.yaml", processes=(2,)
        )
        for name in TRL_CONFIGS
    ),
    Case(
        "train_unconditional",
        DIFFUSERS,
        "unconditional_image_generation/train_unconditional.py",
        UNCONDITIONAL,
        resume_from="second-newest",
        resume_args=LATEST,
        checkpoints_kept=2,
        checkpoint_holds=("unet",),
        seed_torch=True,
    ),
    Case(
        "train_unconditional --use_ema",
        DIFFUSERS,
        "unconditional_image_generation/train_unconditional.py",
        (*UNCONDITIONAL, "--use_ema"),
        resume_from="second-newest",
        resume_args=LATEST,
        checkpoints_kept=2,
        checkpoint_holds=("unet", "unet_ema"),
        seed_torch=True,
    ),
    Case(
        "train_text_to_image",
        DIFFUSERS,
        "text_to_image/train_text_to_image.py",
        TEXT_TO_IMAGE,
        resume_from="second-newest",
        resume_args=LATEST,
        checkpoints_kept=2,
        checkpoint_holds=("unet",),
    ),
    Case(
        "train_text_to_image_lora",
        DIFFUSERS,
        "text_to_image/train_text_to_image_lora.py",
        TEXT_TO_IMAGE,
        resume_from="second-newest",
        resume_args=LATEST,
        checkpoints_kept=2,
        checkpoint_holds=(LORA_FILE,),
    ),
    Case(
        "train_dreambooth_lora",
        DIFFUSERS,
        "dreambooth/train_dreambooth_lora.py",
        DREAMBOOTH,
        resume_from="second-newest",
        resume_args=LATEST,
        checkpoints_kept=2,
        checkpoint_holds=(LORA_FILE,),
    ),
)


def select(prefixes: str | None) -> list[Case]:
    """The cases whose names start with one of the comma-separated prefixes (all for None)."""
    if not prefixes:
        return list(CASES)
    wanted = [p.strip() for p in prefixes.split(",") if p.strip()]
    return [c for c in CASES if any(c.name.startswith(p) for p in wanted)]


def fill(args: tuple[str, ...], assets: dict[str, str], **values: str) -> list[str]:
    """The flags with ``{assets[NAME]}`` and ``{NAME}`` placeholders filled in."""
    return [a.format(assets=assets, **values) for a in args]
