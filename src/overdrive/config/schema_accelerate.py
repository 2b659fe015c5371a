"""Keys Hugging Face Accelerate's ``accelerate config`` writes (and libraries' shipped config
files hold) for what overdrive does not do: every such file loads; a key set to anything but
its default is named as one that cannot take effect, with the reason."""

from __future__ import annotations

from typing import Any

from overdrive.config.kinds import AsWritten, Int, Kind, Names, Str, Strings
from overdrive.config.setting import ON_OFF, Setting, setting

TPU = "TPU pods (torch_xla), which overdrive does not launch"
MPI = "mpirun launching of CPU jobs; overdrive starts CPU processes with its own launcher"
CPU_AFFINITY = "pinning each process to its GPU's NUMA node, which overdrive does not do yet"
TRANSFORMER_ENGINE = "fp8 recipe settings of TransformerEngine / MS-AMP; overdrive's fp8 runs through torchao (docs/precision.md)"
SEQUENCE = (
    "sequence parallelism (DeepSpeed Ulysses), which overdrive does not run yet "
    "(docs/parallelism.md)"
)
MOE = "DeepSpeed's mixture-of-experts leaf modules, which overdrive does not mark"


def _inert(key: str, kind: Kind, default: Any, help: str, why: str) -> Setting:
    return setting(key, kind, default, help, no_effect=why)


ACCELERATE_ONLY_SETTINGS: tuple[Setting, ...] = (
    _inert("enable_cpu_affinity", ON_OFF, False, "pin processes to NUMA nodes", CPU_AFFINITY),
    _inert("tpu_name", Str(), None, "name of the TPU", TPU),
    _inert("tpu_zone", Str(), None, "zone of the TPU", TPU),
    _inert("tpu_env", Strings(), [], "environment of a TPU pod's workers", TPU),
    _inert("tpu_vm", Strings(), [], "TPU VM names", TPU),
    _inert("commands", Strings(), [], "commands run on a TPU pod", TPU),
    _inert("command_file", Str(), None, "file of commands run on a TPU pod", TPU),
    _inert("tpu_use_cluster", ON_OFF, False, "launch on a TPU pod", TPU),
    _inert("tpu_use_sudo", ON_OFF, False, "sudo on a TPU pod", TPU),
    _inert("mpirun_config.mpirun_hostfile", Str(), None, "mpirun's host file", MPI),
    _inert("mpirun_config.mpirun_ccl", Int(minimum=0), 1, "oneCCL workers per host", MPI),
    _inert("fp8_config.backend", Str(), None, "fp8 backend (TE, MSAMP, AO)", TRANSFORMER_ENGINE),
    _inert("fp8_config.fp8_format", Str(), None, "fp8 format (HYBRID, E4M3)", TRANSFORMER_ENGINE),
    _inert(
        "fp8_config.amax_history_length", Int(minimum=0), None, "amax history", TRANSFORMER_ENGINE
    ),
    _inert("fp8_config.amax_compute_algorithm", Str(), None, "amax algorithm", TRANSFORMER_ENGINE),
    _inert("fp8_config.margin", Int(), None, "scaling margin", TRANSFORMER_ENGINE),
    _inert("fp8_config.interval", Int(minimum=0), None, "scaling interval", TRANSFORMER_ENGINE),
    _inert(
        "fp8_config.override_linear_precision",
        AsWritten(),
        None,
        "per-GEMM precision",
        TRANSFORMER_ENGINE,
    ),
    _inert("fp8_config.use_autocast_during_eval", ON_OFF, False, "fp8 in eval", TRANSFORMER_ENGINE),
    _inert("fp8_config.optimization_level", Str(), None, "MS-AMP level", TRANSFORMER_ENGINE),
    _inert("fp8_config.pad_inner_dim", ON_OFF, False, "pad for fp8 GEMMs", TRANSFORMER_ENGINE),
    _inert(
        "fp8_config.enable_fsdp_float8_all_gather",
        ON_OFF,
        False,
        "fp8 all-gather",
        TRANSFORMER_ENGINE,
    ),
    _inert(
        "deepspeed_config.deepspeed_moe_layer_cls_names", Names(), None, "MoE leaf classes", MOE
    ),
    _inert(
        "deepspeed_config.seq_parallel_communication_data_type",
        Str(),
        None,
        "Ulysses dtype",
        SEQUENCE,
    ),
    _inert(
        "parallelism_config.parallelism_config_sp_size",
        Int(minimum=1),
        1,
        "sequence parallel degree",
        SEQUENCE,
    ),
    _inert(
        "parallelism_config.parallelism_config_sp_backend",
        Str(),
        None,
        "sequence parallel backend",
        SEQUENCE,
    ),
    _inert(
        "parallelism_config.parallelism_config_sp_seq_length",
        Int(minimum=1),
        None,
        "sequence length",
        SEQUENCE,
    ),
    _inert(
        "parallelism_config.parallelism_config_sp_seq_length_is_variable",
        ON_OFF,
        False,
        "variable lengths",
        SEQUENCE,
    ),
    _inert(
        "parallelism_config.parallelism_config_sp_attn_implementation",
        Str(),
        None,
        "attention implementation",
        SEQUENCE,
    ),
)
