"""Every setting overdrive knows: its key, kind, default, environment variables and aliases.

Keys are the config file's keys; nested sections use dotted keys
(``fsdp_config.fsdp_sharding_strategy``). Where Hugging Face Accelerate's docs spell one
setting two ways, the other spelling is an alias and resolves to the canonical key.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from overdrive.config.kinds import Choice, GpuIds, Int, Str, TrackerWords
from overdrive.config.schema_accelerate import ACCELERATE_ONLY_SETTINGS
from overdrive.config.schema_backends import BACKEND_SETTINGS
from overdrive.config.setting import ON_OFF, Setting, setting

SECTIONS = (
    "deepspeed_config",
    "fsdp_config",
    "megatron_lm_config",
    "parallelism_config",
    "dynamo_config",
    "mpirun_config",
    "fp8_config",
)

DISTRIBUTED_TYPES: tuple[str, ...] = (
    "NO",
    "MULTI_CPU",
    "MULTI_GPU",
    "DEEPSPEED",
    "FSDP",
    "MEGATRON_LM",
    "XLA",
)
# Hugging Face Accelerate's other vendors' backends: accepted words, refused by backends.py.
DISTRIBUTED_TYPES += ("MULTI_NPU", "MULTI_MLU", "MULTI_SDAA", "MULTI_MUSA", "MULTI_XPU")
DISTRIBUTED_TYPES += ("MULTI_HPU", "MULTI_NEURON")
MIXED_PRECISIONS = ("no", "fp16", "bf16", "fp8")
TRACKERS = ("tensorboard", "wandb", "mlflow", "jsonl", "all")
DYNAMO_BACKENDS = (
    "no",
    "eager",
    "aot_eager",
    "inductor",
    "aot_ts_nvfuser",
    "nvprims_nvfuser",
    "cudagraphs",
    "ofi",
    "fx2trt",
    "onnxrt",
    "tensorrt",
    "aot_torchxla_trace_once",
    "torchxla_trace_once",
    "ipex",
    "tvm",
)


__all__ = ["SETTINGS", "Setting"]

SETTINGS: tuple[Setting, ...] = (
    # --- Core (HF Accelerate docs, Reference > The Command Line, accelerate launch) ----
    setting(
        "compute_environment",
        Choice(("LOCAL_MACHINE", "AMAZON_SAGEMAKER"), aliases={"AWS": "AMAZON_SAGEMAKER"}),
        "LOCAL_MACHINE",
        "where training runs",
    ),
    setting(
        "distributed_type",
        Choice(DISTRIBUTED_TYPES, aliases={"TPU": "XLA"}),
        None,
        "backend: NO, MULTI_CPU, MULTI_GPU, DEEPSPEED, FSDP, MEGATRON_LM or XLA (auto if unset)",
        flag=True,
    ),
    setting(
        "num_processes",
        Int(minimum=1),
        None,
        "total processes across all machines (auto: one per GPU, else 1)",
        env=("ACCELERATE_NUM_PROCESSES",),
        flag=True,
    ),
    setting(
        "num_machines",
        Int(minimum=1),
        1,
        "number of machines",
        env=("ACCELERATE_NUM_MACHINES",),
        flag=True,
    ),
    setting(
        "machine_rank",
        Int(minimum=0),
        0,
        "rank of this machine (0 is the main one)",
        env=("ACCELERATE_MACHINE_RANK",),
        flag=True,
    ),
    setting(
        "main_process_ip",
        Str(),
        None,
        "IP address of the machine with rank 0",
        env=("ACCELERATE_MAIN_PROCESS_IP",),
        flag=True,
    ),
    setting(
        "main_process_port",
        Int(minimum=1, maximum=65535),
        None,
        "port of the main process (29500 if unset)",
        env=("ACCELERATE_MAIN_PROCESS_PORT",),
        flag=True,
    ),
    setting(
        "rdzv_backend",
        Choice(("static", "c10d")),
        "static",
        "rendezvous backend",
        env=("ACCELERATE_RDZV_BACKEND",),
        flag=True,
    ),
    setting("same_network", ON_OFF, True, "all machines share one local network", flag=True),
    setting(
        "gpu_ids",
        GpuIds(),
        "all",
        "GPUs this machine uses",
        env=("ACCELERATE_GPU_IDS",),
        flag=True,
    ),
    setting(
        "mixed_precision",
        Choice(MIXED_PRECISIONS, false_means="no"),
        "no",
        "no, fp16, bf16 or fp8",
        env=("ACCELERATE_MIXED_PRECISION",),
        flag=True,
    ),
    setting(
        "downcast_bf16",
        ON_OFF,
        False,
        "with bf16 on XLA, store float64 as bf16 as well (accepted elsewhere, no effect)",
        env=("ACCELERATE_DOWNCAST_BF16",),
        flag=True,
    ),
    setting(
        "gradient_accumulation_steps",
        Int(minimum=1),
        1,
        "micro-batches per optimizer step",
        env=("ACCELERATE_GRADIENT_ACCUMULATION_STEPS",),
        flag=True,
    ),
    setting(
        "use_cpu",
        ON_OFF,
        False,
        "train on the CPU even when GPUs are present",
        env=("ACCELERATE_USE_CPU",),
        aliases=("cpu",),
        flag=True,
    ),
    setting(
        "torch_device",
        Str(),
        None,
        "the torch device every process uses (e.g. 'cpu', 'cuda:1'); unset: picked per process",
        env=("ACCELERATE_TORCH_DEVICE",),
    ),
    setting(
        "debug",
        ON_OFF,
        False,
        "check collective shapes across ranks before each collective",
        env=("ACCELERATE_DEBUG_MODE",),
        flag=True,
    ),
    setting(
        "hang_timeout",
        Int(minimum=0),
        300,
        "seconds without progress on any rank before `overdrive launch` prints every rank's "
        "stack and stops the job (0: never)",
        env=("OVERDRIVE_HANG_TIMEOUT",),
        flag=True,
    ),
    setting(
        "as_accelerate",
        ON_OFF,
        False,
        "let `import accelerate` in the workers get overdrive even where Hugging Face "
        "Accelerate's package is installed (transformers' Trainer imports it by that name)",
        env=("OVERDRIVE_AS_ACCELERATE",),
        flag=True,
    ),
    setting(
        "verbose",
        ON_OFF,
        False,
        "also say what a run that works does: the launcher's banner, the effective settings, "
        "and notes (each note once per output folder); `--verbose` sets it",
        env=("OVERDRIVE_VERBOSE",),
    ),
    setting(
        "main_training_function",
        Str(),
        "main",
        "function a notebook launcher calls",
    ),
    setting(
        "use_deepspeed",
        ON_OFF,
        False,
        "use the DeepSpeed backend (same as distributed_type: DEEPSPEED)",
        env=("ACCELERATE_USE_DEEPSPEED",),
        flag=True,
    ),
    setting(
        "use_fsdp",
        ON_OFF,
        False,
        "use the FSDP backend (same as distributed_type: FSDP)",
        env=("ACCELERATE_USE_FSDP",),
        flag=True,
    ),
    setting(
        "use_megatron_lm",
        ON_OFF,
        False,
        "use the Megatron-LM backend (same as distributed_type: MEGATRON_LM)",
        env=("ACCELERATE_USE_MEGATRON_LM",),
        flag=True,
    ),
    # --- torch.compile (dynamo_backend, also nested as dynamo_config) -------------------
    setting(
        "dynamo_config.dynamo_backend",
        Choice(DYNAMO_BACKENDS, false_means="no"),
        "no",
        "torch.compile backend, or no",
        env=("ACCELERATE_DYNAMO_BACKEND",),
        aliases=("dynamo_backend",),
        flag=True,
    ),
    setting(
        "dynamo_config.dynamo_mode",
        Choice(("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")),
        "default",
        "torch.compile mode",
        env=("ACCELERATE_DYNAMO_MODE",),
        aliases=("dynamo_mode",),
        flag=True,
    ),
    setting(
        "dynamo_config.dynamo_use_fullgraph",
        ON_OFF,
        False,
        "torch.compile(fullgraph=...)",
        env=("ACCELERATE_DYNAMO_USE_FULLGRAPH",),
        aliases=("dynamo_use_fullgraph",),
        flag=True,
    ),
    setting(
        "dynamo_config.dynamo_use_dynamic",
        ON_OFF,
        False,
        "torch.compile(dynamic=...)",
        env=("ACCELERATE_DYNAMO_USE_DYNAMIC",),
        aliases=("dynamo_use_dynamic",),
        flag=True,
    ),
    setting(
        "dynamo_config.dynamo_use_regional_compilation",
        ON_OFF,
        False,
        "compile each repeated block in place before wrapping, not the whole model",
        env=("ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION",),
        aliases=("dynamo_use_regional_compilation",),
        flag=True,
    ),
    # --- Data loading (HF Accelerate docs, Reference > Utilities, DataLoaderConfiguration)
    setting("split_batches", ON_OFF, False, "split each batch across processes"),
    setting(
        "dispatch_batches",
        ON_OFF,
        None,
        "main process loads and sends batches (auto: on for iterable datasets)",
    ),
    setting("even_batches", ON_OFF, True, "every process gets the same number of batches"),
    setting("use_seedable_sampler", ON_OFF, False, "reproducible shuffling from one seed"),
    setting("non_blocking", ON_OFF, False, "asynchronous host-to-device copies"),
    # --- overdrive's exact semantics, each off by default (Hugging Face Accelerate's) ------
    setting(
        "exact_resume",
        ON_OFF,
        False,
        "load_state continues each prepared dataloader where the checkpoint stopped, in the "
        "saved order, and restores an open accumulation window's gradients (off: as Hugging "
        "Face Accelerate, the loaders start a new epoch and the script skips what it trained "
        "on; use_stateful_dataloader=True continues mid-epoch there too)",
        env=("OVERDRIVE_EXACT_RESUME",),
        flag=True,
    ),
    setting(
        "exact_accumulation",
        ON_OFF,
        False,
        "a window that the end of a dataloader closes after m < k micro-batches steps on "
        "the mean of its m losses (off: as Hugging Face Accelerate, on their sum divided by "
        "k = gradient_accumulation_steps)",
        env=("OVERDRIVE_EXACT_ACCUMULATION",),
        flag=True,
    ),
    setting(
        "fp16_on_cpu",
        ON_OFF,
        False,
        "mixed_precision fp16 on a CPU runs float16 autocast with a GradScaler, as on a GPU, "
        "so a CPU rehearsal meets fp16's overflows (off: as Hugging Face Accelerate, a CPU "
        "trains in fp32, with a warning)",
        env=("OVERDRIVE_FP16_ON_CPU",),
        flag=True,
    ),
    # --- Project and tracking (HF Accelerate docs, Reference > Utilities, ProjectConfiguration)
    setting(
        "project_dir",
        Str(),
        None,
        "root for checkpoints and logs",
        env=("ACCELERATE_PROJECT_DIR",),
    ),
    setting(
        "logging_dir",
        Str(),
        None,
        "tracker output (default: {project_dir}/logs)",
        env=("ACCELERATE_LOGGING_DIR",),
    ),
    setting("automatic_checkpoint_naming", ON_OFF, False, "name checkpoints checkpoint_<n>"),
    setting("total_limit", Int(minimum=1), None, "keep at most this many checkpoints"),
    setting(
        "checkpoint_format",
        Choice(("overdrive", "accelerate")),
        "overdrive",
        "what save_state writes: overdrive's checkpoint (safetensors and JSON, a manifest "
        "with checksums, loader positions) or Hugging Face Accelerate's layout (model "
        "safetensors, torch.save'd optimizer, scheduler and random states), which its "
        "load_state reads; load_state reads both",
        env=("OVERDRIVE_CHECKPOINT_FORMAT",),
    ),
    setting(
        "log_with",
        TrackerWords(TRACKERS),
        None,
        "experiment trackers",
        env=("ACCELERATE_LOG_WITH",),
    ),
    *BACKEND_SETTINGS,
    *ACCELERATE_ONLY_SETTINGS,
)


_BY_KEY: dict[str, Setting] = {s.key: s for s in SETTINGS}
_ALIASES: dict[str, str] = {a: s.key for s in SETTINGS for a in s.aliases}
_BY_ENV: dict[str, Setting] = {e: s for s in SETTINGS for e in s.env}


def get(key: str) -> Setting:
    """The setting with this canonical key."""
    return _BY_KEY[key]


def canonical_key(key: str) -> str | None:
    """The canonical key for a key or one of its aliases, or None if unknown."""
    if key in _BY_KEY:
        return key
    return _ALIASES.get(key)


def all_keys() -> list[str]:
    """Every canonical key and alias (for did-you-mean suggestions)."""
    return [*list(_BY_KEY), *list(_ALIASES)]


def by_env() -> Mapping[str, Setting]:
    """Environment variable name -> setting."""
    return _BY_ENV


def iter_settings(section: str | None = None) -> Iterator[Setting]:
    """All settings, or those of one section (``""`` for top-level ones)."""
    for s in SETTINGS:
        if section is None or (s.section or "") == section:
            yield s
