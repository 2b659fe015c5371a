"""Every setting overdrive knows: its key, kind, default, environment variables and aliases.

Keys are the config file's keys; nested sections use dotted keys
(``fsdp_config.fsdp_sharding_strategy``). Where the seeds spell one setting two ways, the
other spelling is an alias and resolves to the canonical key.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from overdrive.config.kinds import (
    Bool,
    Choice,
    Float,
    GpuIds,
    Int,
    Kind,
    Names,
    Str,
    Table,
    Words,
)

SECTIONS = ("deepspeed_config", "fsdp_config", "megatron_lm_config", "dynamo_config")

DISTRIBUTED_TYPES = ("NO", "MULTI_CPU", "MULTI_GPU", "DEEPSPEED", "FSDP", "MEGATRON_LM", "XLA")
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


@dataclass(frozen=True)
class Setting:
    """One setting: canonical key, value kind, default and where else it may come from."""

    key: str
    kind: Kind
    default: Any
    help: str
    env: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    flag: bool = False  # settable by an `overdrive launch` flag
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def section(self) -> str | None:
        return self.key.split(".", 1)[0] if "." in self.key else None

    @property
    def name(self) -> str:
        return self.key.rsplit(".", 1)[-1]


def _s(key: str, kind: Kind, default: Any, help: str, **kw: Any) -> Setting:
    return Setting(key=key, kind=kind, default=default, help=help, **kw)


_ON_OFF = Bool()

SETTINGS: tuple[Setting, ...] = (
    # --- Core (seed 000 table 1 and the YAML example) --------------------------------
    _s(
        "compute_environment",
        Choice(("LOCAL_MACHINE", "AMAZON_SAGEMAKER"), aliases={"AWS": "AMAZON_SAGEMAKER"}),
        "LOCAL_MACHINE",
        "where training runs",
    ),
    _s(
        "distributed_type",
        Choice(DISTRIBUTED_TYPES, aliases={"TPU": "XLA"}),
        None,
        "backend: NO, MULTI_CPU, MULTI_GPU, DEEPSPEED, FSDP, MEGATRON_LM or XLA (auto if unset)",
        flag=True,
    ),
    _s(
        "num_processes",
        Int(minimum=1),
        None,
        "total processes across all machines (auto: one per GPU, else 1)",
        env=("ACCELERATE_NUM_PROCESSES",),
        flag=True,
    ),
    _s(
        "num_machines",
        Int(minimum=1),
        1,
        "number of machines",
        env=("ACCELERATE_NUM_MACHINES",),
        flag=True,
    ),
    _s(
        "machine_rank",
        Int(minimum=0),
        0,
        "rank of this machine (0 is the main one)",
        env=("ACCELERATE_MACHINE_RANK",),
        flag=True,
    ),
    _s(
        "main_process_ip",
        Str(),
        None,
        "IP address of the machine with rank 0",
        env=("ACCELERATE_MAIN_PROCESS_IP",),
        flag=True,
    ),
    _s(
        "main_process_port",
        Int(minimum=1, maximum=65535),
        None,
        "port of the main process (29500 if unset)",
        env=("ACCELERATE_MAIN_PROCESS_PORT",),
        flag=True,
    ),
    _s(
        "rdzv_backend",
        Choice(("static", "c10d")),
        "static",
        "rendezvous backend",
        env=("ACCELERATE_RDZV_BACKEND",),
        flag=True,
    ),
    _s("same_network", _ON_OFF, True, "all machines share one local network", flag=True),
    _s(
        "gpu_ids",
        GpuIds(),
        "all",
        "GPUs this machine uses",
        env=("ACCELERATE_GPU_IDS",),
        flag=True,
    ),
    _s(
        "mixed_precision",
        Choice(MIXED_PRECISIONS, false_means="no"),
        "no",
        "no, fp16, bf16 or fp8",
        env=("ACCELERATE_MIXED_PRECISION",),
        flag=True,
    ),
    _s(
        "downcast_bf16",
        _ON_OFF,
        False,
        "with bf16 on XLA, store float64 as bf16 as well (accepted elsewhere, no effect)",
        env=("ACCELERATE_DOWNCAST_BF16",),
        flag=True,
    ),
    _s(
        "gradient_accumulation_steps",
        Int(minimum=1),
        1,
        "micro-batches per optimizer step",
        env=("ACCELERATE_GRADIENT_ACCUMULATION_STEPS",),
        flag=True,
    ),
    _s(
        "use_cpu",
        _ON_OFF,
        False,
        "train on the CPU even when GPUs are present",
        env=("ACCELERATE_USE_CPU",),
        aliases=("cpu",),
        flag=True,
    ),
    _s(
        "debug",
        _ON_OFF,
        False,
        "check collective shapes across ranks before each collective",
        env=("ACCELERATE_DEBUG_MODE",),
        flag=True,
    ),
    _s(
        "main_training_function",
        Str(),
        "main",
        "function a notebook launcher calls",
    ),
    _s("tpu_name", Str(), None, "name of the TPU (XLA only)"),
    _s("tpu_zone", Str(), None, "zone of the TPU (XLA only)"),
    _s(
        "use_deepspeed",
        _ON_OFF,
        False,
        "use the DeepSpeed backend (same as distributed_type: DEEPSPEED)",
        env=("ACCELERATE_USE_DEEPSPEED",),
        flag=True,
    ),
    _s(
        "use_fsdp",
        _ON_OFF,
        False,
        "use the FSDP backend (same as distributed_type: FSDP)",
        env=("ACCELERATE_USE_FSDP",),
        flag=True,
    ),
    _s(
        "use_megatron_lm",
        _ON_OFF,
        False,
        "use the Megatron-LM backend (same as distributed_type: MEGATRON_LM)",
        env=("ACCELERATE_USE_MEGATRON_LM",),
        flag=True,
    ),
    # --- torch.compile (seed 001: dynamo_backend, also nested as dynamo_config) ---------
    _s(
        "dynamo_config.dynamo_backend",
        Choice(DYNAMO_BACKENDS, false_means="no"),
        "no",
        "torch.compile backend, or no",
        env=("ACCELERATE_DYNAMO_BACKEND",),
        aliases=("dynamo_backend",),
        flag=True,
    ),
    _s(
        "dynamo_config.dynamo_mode",
        Choice(("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")),
        "default",
        "torch.compile mode",
        env=("ACCELERATE_DYNAMO_MODE",),
        aliases=("dynamo_mode",),
        flag=True,
    ),
    _s(
        "dynamo_config.dynamo_use_fullgraph",
        _ON_OFF,
        False,
        "torch.compile(fullgraph=...)",
        env=("ACCELERATE_DYNAMO_USE_FULLGRAPH",),
        aliases=("dynamo_use_fullgraph",),
        flag=True,
    ),
    _s(
        "dynamo_config.dynamo_use_dynamic",
        _ON_OFF,
        False,
        "torch.compile(dynamic=...)",
        env=("ACCELERATE_DYNAMO_USE_DYNAMIC",),
        aliases=("dynamo_use_dynamic",),
        flag=True,
    ),
    # --- DeepSpeed (seed 000 table 2, seed 001) -----------------------------------------
    _s(
        "deepspeed_config.zero_stage",
        Int(minimum=0, maximum=3),
        0,
        "ZeRO stage 0-3",
        env=("ACCELERATE_DEEPSPEED_ZERO_STAGE",),
        flag=True,
    ),
    _s(
        "deepspeed_config.offload_optimizer_device",
        Choice(("none", "cpu", "nvme"), false_means="none"),
        "none",
        "where optimizer states live",
        env=("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE",),
        flag=True,
    ),
    _s(
        "deepspeed_config.offload_param_device",
        Choice(("none", "cpu", "nvme"), false_means="none"),
        "none",
        "where parameters live (ZeRO-3 only)",
        env=("ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE",),
        flag=True,
    ),
    _s("deepspeed_config.offload_optimizer_nvme_path", Str(), None, "NVMe path for optimizer"),
    _s("deepspeed_config.offload_param_nvme_path", Str(), None, "NVMe path for parameters"),
    _s(
        "deepspeed_config.gradient_clipping",
        Float(minimum=0.0),
        None,
        "max gradient norm (applied by DeepSpeed)",
        env=("ACCELERATE_GRADIENT_CLIPPING",),
        flag=True,
    ),
    _s(
        "deepspeed_config.gradient_accumulation_steps",
        Int(minimum=1),
        None,
        "DeepSpeed's accumulation steps (must agree with the top-level value)",
    ),
    _s(
        "deepspeed_config.zero3_init_flag",
        _ON_OFF,
        False,
        "build ZeRO-3 models already partitioned",
        env=("ACCELERATE_DEEPSPEED_ZERO3_INIT",),
        flag=True,
    ),
    _s(
        "deepspeed_config.zero3_save_16bit_model",
        _ON_OFF,
        False,
        "gather a 16-bit model when saving under ZeRO-3",
        env=("ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL",),
    ),
    _s(
        "deepspeed_config.deepspeed_config_file",
        Str(),
        None,
        "a DeepSpeed JSON config file",
        env=("ACCELERATE_DEEPSPEED_CONFIG_FILE",),
        flag=True,
    ),
    _s(
        "deepspeed_config.deepspeed_multinode_launcher",
        Choice(("standard", "pdsh", "openmpi", "mvapich", "mpich", "nossh")),
        "standard",
        "how DeepSpeed starts processes on several machines",
        flag=True,
    ),
    _s("deepspeed_config.deepspeed_hostfile", Str(), None, "DeepSpeed hostfile", flag=True),
    _s("deepspeed_config.deepspeed_inclusion_filter", Str(), None, "DeepSpeed host filter"),
    _s("deepspeed_config.deepspeed_exclusion_filter", Str(), None, "DeepSpeed host filter"),
    _s("deepspeed_config.bf16", Table(), None, "DeepSpeed's own bf16 section"),
    _s("deepspeed_config.fp16", Table(), None, "DeepSpeed's own fp16 section"),
    # --- FSDP (seed 000 table 2, seeds 001 and 002) -------------------------------------
    _s(
        "fsdp_config.fsdp_version",
        Int(minimum=1, maximum=2),
        1,
        "1 (FullyShardedDataParallel) or 2 (fully_shard)",
        env=("ACCELERATE_FSDP_VERSION",),
        aliases=("fsdp_config.version",),
        flag=True,
    ),
    _s(
        "fsdp_config.fsdp_sharding_strategy",
        Choice(
            ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"),
            numbered=True,
        ),
        "FULL_SHARD",
        "what FSDP shards",
        env=("ACCELERATE_FSDP_SHARDING_STRATEGY",),
        aliases=("fsdp_config.sharding_strategy",),
        flag=True,
    ),
    _s(
        "fsdp_config.fsdp_reshard_after_forward",
        _ON_OFF,
        True,
        "FSDP2: free gathered parameters after forward",
        env=("ACCELERATE_FSDP_RESHARD_AFTER_FORWARD",),
        aliases=("fsdp_config.reshard_after_forward",),
        flag=True,
    ),
    _s(
        "fsdp_config.fsdp_offload_params",
        _ON_OFF,
        False,
        "keep parameters on the CPU",
        env=("ACCELERATE_FSDP_OFFLOAD_PARAMS",),
        aliases=("fsdp_config.fsdp_cpu_offload", "fsdp_config.cpu_offload"),
        flag=True,
    ),
    _s(
        "fsdp_config.fsdp_auto_wrap_policy",
        Choice(
            ("TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP"),
            aliases={
                "TRANSFORMER_LAYER": "TRANSFORMER_BASED_WRAP",
                "SIZE_BASED": "SIZE_BASED_WRAP",
            },
        ),
        None,
        "how submodules become FSDP units",
        env=("ACCELERATE_FSDP_AUTO_WRAP_POLICY",),
        aliases=("fsdp_config.auto_wrap_policy",),
        flag=True,
    ),
    _s(
        "fsdp_config.fsdp_transformer_layer_cls_to_wrap",
        Names(),
        None,
        "layer classes wrapped one by one",
        env=("ACCELERATE_FSDP_TRANSFORMER_CLS_TO_WRAP",),
        aliases=(
            "fsdp_config.transformer_layer_cls_to_wrap",
            "fsdp_config.transformer_cls_names_to_wrap",
        ),
        flag=True,
    ),
    _s(
        "fsdp_config.fsdp_min_num_params",
        Int(minimum=0),
        100_000_000,
        "SIZE_BASED_WRAP: parameters per unit",
        env=("ACCELERATE_FSDP_MIN_NUM_PARAMS",),
        aliases=("fsdp_config.min_num_params",),
        flag=True,
    ),
    _s(
        "fsdp_config.fsdp_backward_prefetch",
        Choice(("BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"), numbered=True),
        "BACKWARD_PRE",
        "FSDP1 backward prefetch",
        env=("ACCELERATE_FSDP_BACKWARD_PREFETCH",),
        aliases=("fsdp_config.backward_prefetch",),
        flag=True,
    ),
    _s(
        "fsdp_config.fsdp_forward_prefetch",
        _ON_OFF,
        False,
        "FSDP1 forward prefetch",
        env=("ACCELERATE_FSDP_FORWARD_PREFETCH",),
        aliases=("fsdp_config.forward_prefetch",),
        flag=True,
    ),
    _s(
        "fsdp_config.fsdp_state_dict_type",
        Choice(("FULL_STATE_DICT", "SHARDED_STATE_DICT", "LOCAL_STATE_DICT"), numbered=True),
        "FULL_STATE_DICT",
        "how checkpoints store the model",
        env=("ACCELERATE_FSDP_STATE_DICT_TYPE",),
        aliases=("fsdp_config.state_dict_type",),
        flag=True,
    ),
    _s(
        "fsdp_config.fsdp_cpu_ram_efficient_loading",
        _ON_OFF,
        False,
        "load weights on rank 0 only and broadcast",
        env=("ACCELERATE_FSDP_CPU_RAM_EFFICIENT_LOADING",),
        aliases=("fsdp_config.cpu_ram_efficient_loading",),
        flag=True,
    ),
    _s(
        "fsdp_config.fsdp_sync_module_states",
        _ON_OFF,
        True,
        "broadcast rank 0's weights at wrap time",
        env=("ACCELERATE_FSDP_SYNC_MODULE_STATES",),
        aliases=("fsdp_config.sync_module_states",),
        flag=True,
    ),
    _s(
        "fsdp_config.fsdp_activation_checkpointing",
        _ON_OFF,
        False,
        "recompute activations of wrapped layers in backward",
        env=("ACCELERATE_FSDP_ACTIVATION_CHECKPOINTING",),
        aliases=("fsdp_config.activation_checkpointing",),
        flag=True,
    ),
    _s(
        "fsdp_config.fsdp_use_orig_params",
        _ON_OFF,
        True,
        "FSDP1 use_orig_params",
        env=("ACCELERATE_FSDP_USE_ORIG_PARAMS",),
        aliases=("fsdp_config.use_orig_params",),
        flag=True,
    ),
    # --- Megatron-LM style tensor / pipeline parallel (seed 000 table 2) ----------------
    _s(
        "megatron_lm_config.tp_degree",
        Int(minimum=1),
        1,
        "tensor-parallel degree",
        env=("ACCELERATE_MEGATRON_LM_TP_DEGREE",),
        aliases=("megatron_lm_config.megatron_lm_tp_degree",),
        flag=True,
    ),
    _s(
        "megatron_lm_config.pp_degree",
        Int(minimum=1),
        1,
        "pipeline-parallel degree",
        env=("ACCELERATE_MEGATRON_LM_PP_DEGREE",),
        aliases=("megatron_lm_config.megatron_lm_pp_degree",),
        flag=True,
    ),
    _s(
        "megatron_lm_config.num_micro_batches",
        Int(minimum=1),
        1,
        "pipeline micro-batches",
        env=("ACCELERATE_MEGATRON_LM_NUM_MICRO_BATCHES",),
        aliases=("megatron_lm_config.megatron_lm_num_micro_batches",),
        flag=True,
    ),
    _s(
        "megatron_lm_config.sequence_parallelism",
        _ON_OFF,
        False,
        "shard activations along the sequence in tensor-parallel regions",
        env=("ACCELERATE_MEGATRON_LM_SEQUENCE_PARALLELISM",),
        aliases=("megatron_lm_config.megatron_lm_sequence_parallelism",),
    ),
    _s(
        "megatron_lm_config.recompute_activations",
        _ON_OFF,
        False,
        "recompute activations in backward",
        env=("ACCELERATE_MEGATRON_LM_RECOMPUTE_ACTIVATIONS",),
        aliases=("megatron_lm_config.megatron_lm_recompute_activations",),
    ),
    _s(
        "megatron_lm_config.use_distributed_optimizer",
        _ON_OFF,
        False,
        "shard optimizer state across data-parallel ranks",
        env=("ACCELERATE_MEGATRON_LM_USE_DISTRIBUTED_OPTIMIZER",),
        aliases=("megatron_lm_config.megatron_lm_use_distributed_optimizer",),
    ),
    _s(
        "megatron_lm_config.gradient_clipping",
        Float(minimum=0.0),
        None,
        "max gradient norm",
        aliases=("megatron_lm_config.megatron_lm_gradient_clipping",),
    ),
    # --- Data loading (seed 000 table 5) -------------------------------------------------
    _s("split_batches", _ON_OFF, False, "split each batch across processes"),
    _s(
        "dispatch_batches",
        _ON_OFF,
        None,
        "main process loads and sends batches (auto: on for iterable datasets)",
    ),
    _s("even_batches", _ON_OFF, True, "every process gets the same number of batches"),
    _s("use_seedable_sampler", _ON_OFF, False, "reproducible shuffling from one seed"),
    _s("non_blocking", _ON_OFF, False, "asynchronous host-to-device copies"),
    # --- Project and tracking (seed 000 table 6) ----------------------------------------
    _s(
        "project_dir",
        Str(),
        None,
        "root for checkpoints and logs",
        env=("ACCELERATE_PROJECT_DIR",),
    ),
    _s(
        "logging_dir",
        Str(),
        None,
        "tracker output (default: {project_dir}/logs)",
        env=("ACCELERATE_LOGGING_DIR",),
    ),
    _s("automatic_checkpoint_naming", _ON_OFF, False, "name checkpoints checkpoint_<n>"),
    _s("total_limit", Int(minimum=1), None, "keep at most this many checkpoints"),
    _s(
        "log_with",
        Words(TRACKERS),
        None,
        "experiment trackers",
        env=("ACCELERATE_LOG_WITH",),
    ),
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
