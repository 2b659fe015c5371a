"""Each layout x precision as two step functions: the loop by hand and the loop on overdrive.

``build(layout, precision, work, device)`` returns a :class:`Pair`, or raises :class:`Skip`
with the reason the variant cannot run here (the table prints it). Both sides get the same
model (same seed), the same optimizer and the same batches.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from workload import Workload

LAYOUTS = ("DDP", "FSDP2", "ZeRO-2", "TP")
PRECISIONS = ("bf16", "fp8")
LR = 1e-4

Step = Callable[[torch.Tensor], None]


class Skip(Exception):
    """The variant cannot run on this machine; the message says why."""


@dataclass
class Pair:
    raw: Step
    overdrive: Step
    note: str = ""


def precision_problem(precision: str, device: torch.device) -> str | None:
    """Why ``precision`` cannot run on ``device``, or None."""
    cuda = device.type == "cuda"
    if precision == "bf16" and cuda and not torch.cuda.is_bf16_supported(including_emulation=False):
        return f"{torch.cuda.get_device_name(device)} has no native bf16"
    if precision != "fp8":
        return None
    if device.type != "cuda":
        return f"fp8 needs a CUDA GPU of compute capability 8.9+; this run is on {device.type}"
    cap = torch.cuda.get_device_capability(device)
    if cap < (8, 9):
        return f"fp8 needs compute capability 8.9+; {torch.cuda.get_device_name(device)} has {cap[0]}.{cap[1]}"
    if importlib.util.find_spec("torchao") is None:
        return "fp8 needs torchao, not installed here (carry its wheel: bench/README.md, ## gpu)"
    return None


def _fp8_filter(module: nn.Module, fqn: str) -> bool:
    """float8 matmuls need both dimensions divisible by 16."""
    if isinstance(module, nn.Linear):
        return module.in_features % 16 == 0 and module.out_features % 16 == 0
    return True


def _by_hand_precision(model: nn.Module, precision: str) -> nn.Module:
    if precision == "fp8":
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training

        model = convert_to_float8_training(
            model, config=Float8LinearConfig(), module_filter_fn=_fp8_filter
        )
    return model


def _autocast(device: torch.device) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    # bf16, and fp8's non-linear layers: the forward under bf16 autocast.
    return lambda: torch.autocast(device.type, dtype=torch.bfloat16)


def _plain_step(work: Workload, model: nn.Module, device: torch.device) -> Step:
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    autocast = _autocast(device)

    def step(ids: torch.Tensor) -> None:
        with autocast():
            loss = work.loss(model, ids)
        loss.backward()
        opt.step()
        opt.zero_grad()

    return step


def _overdrive_step(
    work: Workload, precision: str, device: torch.device, **plugins: Any
) -> tuple[Step, nn.Module]:
    """The loop on overdrive, and the model ``prepare`` returned (to see what it wrapped)."""
    from overdrive import Accelerator

    acc = Accelerator(mixed_precision=precision, cpu=device.type == "cpu", **plugins)
    model = work.build()
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    if "deepspeed_plugin" in plugins:  # DeepSpeed reads its micro-batch size off a loader
        from torch.utils.data import DataLoader, TensorDataset

        ids = torch.zeros(work.sizes.batch, work.sizes.seq, dtype=torch.long)
        loader = DataLoader(TensorDataset(ids), batch_size=work.sizes.batch)
        model, opt, _ = acc.prepare(model, opt, loader)
    else:
        model, opt = acc.prepare(model, opt)

    def step(ids: torch.Tensor) -> None:
        loss = work.loss(model, ids)
        acc.backward(loss)
        opt.step()
        opt.zero_grad()

    return step, model


def _ddp(work: Workload, precision: str, device: torch.device) -> Pair:
    """World 1: overdrive picks its one-device strategy (no DDP wrapper), so the hand-written
    side is the plain loop; should overdrive ever wrap DDP here, so does the raw side."""
    from torch.nn.parallel import DistributedDataParallel

    ours, prepared = _overdrive_step(work, precision, device)
    model = _by_hand_precision(work.build().to(device), precision)
    if isinstance(prepared, DistributedDataParallel):
        ids = [device.index] if device.type == "cuda" else None
        model = DistributedDataParallel(model, device_ids=ids)
        note = "world 1: overdrive wraps DDP, so does raw"
    else:
        note = "world 1: overdrive wraps no DDP on one process, so raw is the plain loop, not DDP"
    return Pair(_plain_step(work, model, device), ours, note)


def _fsdp2(work: Workload, precision: str, device: torch.device) -> Pair:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from overdrive import FullyShardedDataParallelPlugin

    model = _by_hand_precision(work.build().to(device), precision)
    mesh = init_device_mesh(device.type, (1,), mesh_dim_names=("dp_shard",))
    kw: dict[str, Any] = {"mesh": mesh}
    if precision == "bf16":  # fp8 keeps fp32 parameters: float8 casts happen in the linears
        kw["mp_policy"] = MixedPrecisionPolicy(
            param_dtype=torch.bfloat16, reduce_dtype=torch.float32
        )
    for layer in [m for m in model.modules() if type(m).__name__ == work.layer_class]:
        fully_shard(layer, reshard_after_forward=True, **kw)
    fully_shard(model, reshard_after_forward=False, **kw)
    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2,
        auto_wrap_policy="TRANSFORMER_BASED_WRAP",
        transformer_cls_names_to_wrap=[work.layer_class],
    )
    ours, _ = _overdrive_step(work, precision, device, fsdp_plugin=plugin)
    return Pair(
        _plain_step(work, model, device),
        ours,
        "fully_shard per decoder layer + root, 1-process mesh",
    )


def _zero2(work: Workload, precision: str, device: torch.device) -> Pair:
    from overdrive import ConfigError, DeepSpeedPlugin

    if precision == "fp8":  # the row carries overdrive's own refusal
        try:
            _overdrive_step(work, precision, device, deepspeed_plugin=DeepSpeedPlugin(zero_stage=2))
        except ConfigError as err:
            raise Skip(f"overdrive refuses it: {str(err).splitlines()[0]}") from None
        raise Skip("DeepSpeed has no fp8 of its own to compare with")
    try:
        import deepspeed
    except Exception as exc:  # missing, or its import fails building/loading ops
        raise Skip(f"deepspeed cannot be imported here ({type(exc).__name__}: {exc})") from None

    model = work.build()
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    config = {
        "train_micro_batch_size_per_gpu": work.sizes.batch,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": 2},
        "zero_allow_untested_optimizer": True,
        "bf16": {"enabled": True},
    }
    try:
        engine, *_ = deepspeed.initialize(model=model, optimizer=opt, config=config)
    except Exception as exc:
        raise Skip(f"raw deepspeed.initialize failed here ({type(exc).__name__}: {exc})") from None

    def raw(ids: torch.Tensor) -> None:
        loss = work.loss(engine, ids)
        engine.backward(loss)
        engine.step()

    ours, _ = _overdrive_step(
        work, precision, device, deepspeed_plugin=DeepSpeedPlugin(zero_stage=2)
    )
    return Pair(raw, ours, "torch AdamW under DeepSpeed's bf16 ZeRO-2 optimizer, both sides")


def build(layout: str, precision: str, work: Workload, device: torch.device) -> Pair:
    """The two step functions of one variant, or :class:`Skip` with the reason."""
    if layout == "TP":
        raise Skip(
            "tensor parallelism at degree 1 splits nothing: it needs 2+ GPUs "
            "(bench/parallel/run.py); this machine has one"
        )
    problem = precision_problem(precision, device)
    if problem is not None:
        raise Skip(problem)
    builders = {"DDP": _ddp, "FSDP2": _fsdp2, "ZeRO-2": _zero2}
    return builders[layout](work, precision, device)
