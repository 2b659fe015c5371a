"""A planned candidate as a Hugging Face Accelerate config file (torch-free)."""

from __future__ import annotations

from overdrive.simulate.plan_candidates import Candidate


def _head(gpus: int, per_machine: int, ip: str | None, kind: str) -> list[str]:
    machines = max(1, gpus // per_machine)
    return [
        "compute_environment: LOCAL_MACHINE",
        f"distributed_type: {kind}",
        f"num_machines: {machines}",
        f"num_processes: {gpus}",
        "machine_rank: 0",
        *([f"main_process_ip: {ip}"] if ip else []),
        "mixed_precision: 'no'",
    ]


def _deepspeed(candidate: Candidate) -> list[str]:
    return [
        "deepspeed_config:",
        f"  zero_stage: {candidate.zero}",
        "  gradient_accumulation_steps: 1",
        "  offload_optimizer_device: none",
        "  offload_param_device: none",
        *(["  zero3_init_flag: false"] if candidate.zero == 3 else []),
    ]


def _fsdp2(candidate: Candidate, layer: str) -> list[str]:
    lines = [
        "fsdp_config:",
        "  fsdp_version: 2",
        "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP",
        f"  fsdp_transformer_layer_cls_to_wrap: {layer}",
        "  fsdp_reshard_after_forward: true",
        "  fsdp_state_dict_type: SHARDED_STATE_DICT",
    ]
    if candidate.checkpointing:
        lines.append("  fsdp_activation_checkpointing: true")
    if candidate.offload:
        lines.append("  fsdp_offload_params: true")
    sizes = (
        ("dp_replicate", candidate.dp_replicate),
        ("cp", candidate.cp),
        ("tp", candidate.tp),
        ("pp", candidate.pp),
    )
    if any(degree > 1 for _, degree in sizes):
        lines.append("parallelism_config:")
        if candidate.dp_replicate > 1:
            lines.append(f"  parallelism_config_dp_replicate_size: {candidate.dp_replicate}")
        lines.append(f"  parallelism_config_dp_shard_size: {candidate.dp_shard}")
        lines += [f"  parallelism_config_{n}_size: {d}" for n, d in sizes[1:] if d > 1]
    return lines


def config_text(
    candidate: Candidate, gpus: int, per_machine: int, layer: str, ip: str | None
) -> str:
    """The candidate as a Hugging Face Accelerate config file: FSDP2 (with its
    parallelism_config section for HSDP replicas, cp, tp and pp; activation checkpointing
    and parameter offload in fsdp_config) or DeepSpeed ZeRO."""
    if candidate.zero:
        lines = _head(gpus, per_machine, ip, "DEEPSPEED") + _deepspeed(candidate)
    else:
        lines = _head(gpus, per_machine, ip, "FSDP") + _fsdp2(candidate, layer)
    return "\n".join(lines) + "\n"
