"""`overdrive config`: the question flow of Hugging Face Accelerate's `accelerate config`, producing a config-file mapping."""

from __future__ import annotations

from typing import Any

from overdrive.config.kinds import Float
from overdrive.config.prompts import Prompter
from overdrive.config.schema import DYNAMO_BACKENDS, MIXED_PRECISIONS
from overdrive.errors import ConfigError

Answers = dict[str, Any]

_MACHINE_TYPES = [
    ("No distributed training", "NO"),
    ("multi-CPU", "MULTI_CPU"),
    ("multi-GPU", "MULTI_GPU"),
    ("TPU", "XLA"),
]


def run_wizard(ask: Prompter, *, gpu_count: int, gpu_questions: bool = False) -> Answers:
    """Ask the questions and return the config file's contents (nested, file-shaped).

    With no GPU here, a multi-CPU run is not asked about DeepSpeed, FSDP or Megatron-LM and
    fp8 is not offered, unless ``gpu_questions``; choosing multi-GPU or TPU configures
    another machine, so those questions are asked then.
    """
    out: Answers = {}
    out["compute_environment"] = ask.choice(
        "In which compute environment are you running?",
        [("This machine", "LOCAL_MACHINE"), ("AWS (Amazon SageMaker)", "AMAZON_SAGEMAKER")],
        "LOCAL_MACHINE",
    )
    default_type = "MULTI_GPU" if gpu_count > 1 else "NO"
    machine = ask.choice("Which type of machine are you using?", _MACHINE_TYPES, default_type)
    out["distributed_type"] = machine
    multi = machine in ("MULTI_CPU", "MULTI_GPU")
    if multi:
        _ask_machines(ask, out)
        out["debug"] = ask.confirm(
            "Should distributed operations be checked while running for errors? "
            "This avoids hangs on mismatched shapes",
            False,
        )
        if machine == "MULTI_GPU" or gpu_count or gpu_questions:
            _ask_backend(ask, out)
        per_machine_default = gpu_count if machine == "MULTI_GPU" and gpu_count > 1 else 2
        out["num_processes"] = ask.integer(
            "How many processes in total will you use (over all machines)?",
            per_machine_default * out["num_machines"],
            minimum=1,
        )
    else:
        out["num_machines"] = 1
        out["num_processes"] = 1
    if machine in ("NO", "MULTI_CPU") and not gpu_count:
        out["use_cpu"] = True
    elif machine == "NO":
        out["use_cpu"] = ask.confirm("Do you want to run your training on CPU only?", False)
    if machine == "MULTI_GPU":
        out["gpu_ids"] = ask.text("What GPU(s) (by id) should be used, comma-separated?", "all")
    _ask_compile(ask, out)
    if "mixed_precision" not in out:
        on_cpu = out.get("use_cpu") and not gpu_questions
        modes = [m for m in MIXED_PRECISIONS if not (on_cpu and m == "fp8")]  # fp8 needs a GPU
        out["mixed_precision"] = ask.choice(
            "Do you wish to use mixed precision?", [(mode, mode) for mode in modes], "no"
        )
    return out


def _ask_machines(ask: Prompter, out: Answers) -> None:
    machines = ask.integer("How many different machines will you use?", 1, minimum=1)
    out["num_machines"] = machines
    if machines == 1:
        return
    out["machine_rank"] = ask.integer("What is the rank of this machine?", 0, minimum=0)
    out["main_process_ip"] = ask.text("What is the IP address of the machine of rank 0?", None)
    out["main_process_port"] = ask.integer("What is the port of the machine of rank 0?", 29500, 1)
    out["rdzv_backend"] = ask.choice(
        "What rendezvous backend will you use?",
        [("static", "static"), ("c10d", "c10d")],
        "static",
    )
    out["same_network"] = ask.confirm("Are all the machines on the same local network?", True)


def _ask_backend(ask: Prompter, out: Answers) -> None:
    if ask.confirm("Do you want to use DeepSpeed?", False):
        out["distributed_type"] = "DEEPSPEED"
        out["deepspeed_config"] = _ask_deepspeed(ask)
    elif ask.confirm("Do you want to use FullyShardedDataParallel (FSDP)?", False):
        out["distributed_type"] = "FSDP"
        out["fsdp_config"] = _ask_fsdp(ask)
    elif ask.confirm("Do you want to use Megatron-LM style tensor/pipeline parallelism?", False):
        out["distributed_type"] = "MEGATRON_LM"
        out["megatron_lm_config"] = {
            "tp_degree": ask.integer("What is the tensor parallelism degree?", 1, minimum=1),
            "pp_degree": ask.integer("What is the pipeline parallelism degree?", 1, minimum=1),
            "num_micro_batches": ask.integer("How many micro-batches per step?", 1, minimum=1),
        }


def _ask_deepspeed(ask: Prompter) -> Answers:
    devices = [("none", "none"), ("cpu", "cpu"), ("nvme", "nvme")]
    ds: Answers = {}
    ds["zero_stage"] = ask.choice(
        "What should be your DeepSpeed ZeRO stage?", [(str(i), i) for i in range(4)], 2
    )
    ds["offload_optimizer_device"] = ask.choice(
        "Where to offload optimizer states?", devices, "none"
    )
    ds["offload_param_device"] = "none"
    if ds["zero_stage"] == 3:
        ds["offload_param_device"] = ask.choice("Where to offload parameters?", devices, "none")
        ds["zero3_init_flag"] = ask.confirm(
            "Do you want to build models already partitioned (zero3_init_flag)?", False
        )
        ds["zero3_save_16bit_model"] = ask.confirm(
            "Do you want to save 16-bit model weights under ZeRO-3?", False
        )
    ds["gradient_accumulation_steps"] = ask.integer(
        "How many gradient accumulation steps are you passing in your script?", 1, minimum=1
    )
    clipping = ask.text("Max gradient norm for clipping (empty for none)?", None)
    if clipping is not None:
        try:
            ds["gradient_clipping"] = Float(minimum=0.0).coerce(clipping)
        except ValueError as exc:
            raise ConfigError(
                f"{clipping!r} is not a gradient clipping norm: {exc}",
                key="deepspeed_config.gradient_clipping",
                fix="answer with a number such as 1.0, or leave it empty",
            ) from None
    return ds


def _ask_fsdp(ask: Prompter) -> Answers:
    fsdp: Answers = {}
    version = ask.choice("What FSDP version?", [("2 (fully_shard)", 2), ("1", 1)], 2)
    fsdp["fsdp_version"] = version
    if version == 2:
        fsdp["fsdp_reshard_after_forward"] = ask.confirm(
            "Reshard parameters after forward (FULL_SHARD; no = SHARD_GRAD_OP)?", True
        )
    else:
        fsdp["fsdp_sharding_strategy"] = ask.choice(
            "What should be your sharding strategy?",
            [(s, s) for s in ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD")],
            "FULL_SHARD",
        )
    fsdp["fsdp_offload_params"] = ask.confirm("Offload parameters to the CPU?", False)
    policy = ask.choice(
        "What should be your auto wrap policy?",
        [(p, p) for p in ("TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP")],
        "TRANSFORMER_BASED_WRAP",
    )
    fsdp["fsdp_auto_wrap_policy"] = policy
    if policy == "TRANSFORMER_BASED_WRAP":
        layers = ask.text(
            "Which layer class(es) to wrap, comma-separated (empty: the model's _no_split_modules)?",
            None,
        )
        if layers:
            fsdp["fsdp_transformer_layer_cls_to_wrap"] = layers
    elif policy == "SIZE_BASED_WRAP":
        fsdp["fsdp_min_num_params"] = ask.integer(
            "Minimum parameters per wrapped unit?", 100_000_000, minimum=0
        )
    if version == 1:
        fsdp["fsdp_backward_prefetch"] = ask.choice(
            "What should be your backward prefetch?",
            [(p, p) for p in ("BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH")],
            "BACKWARD_PRE",
        )
        fsdp["fsdp_forward_prefetch"] = ask.confirm("Prefetch in forward?", False)
        fsdp["fsdp_use_orig_params"] = ask.confirm("Use original parameters?", True)
    fsdp["fsdp_state_dict_type"] = ask.choice(
        "How should checkpoints store the model?",
        [(t, t) for t in ("SHARDED_STATE_DICT", "FULL_STATE_DICT")],
        "SHARDED_STATE_DICT",
    )
    fsdp["fsdp_cpu_ram_efficient_loading"] = ask.confirm(
        "Load weights on rank 0 only (CPU-RAM efficient loading)?", True
    )
    fsdp["fsdp_activation_checkpointing"] = ask.confirm("Use activation checkpointing?", False)
    return fsdp


def _ask_compile(ask: Prompter, out: Answers) -> None:
    if not ask.confirm("Do you want to use torch.compile (dynamo)?", False):
        return
    backends = [(b, b) for b in DYNAMO_BACKENDS if b != "no"]
    dynamo: Answers = {"dynamo_backend": ask.choice("Which dynamo backend?", backends, "inductor")}
    if ask.confirm("Do you want to customise the torch.compile options?", False):
        modes = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
        dynamo["dynamo_mode"] = ask.choice("Which mode?", [(m, m) for m in modes], "default")
        dynamo["dynamo_use_fullgraph"] = ask.confirm("Compile the whole model as one graph?", False)
        dynamo["dynamo_use_dynamic"] = ask.confirm("Use dynamic shape tracing?", False)
    out["dynamo_config"] = dynamo
