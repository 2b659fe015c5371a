"""Completing a DeepSpeed config at ``prepare``: batch sizes from the prepared dataloader and the
number of processes, ZeRO's bucket sizes from the model's hidden size, optimizer and scheduler
values from ``DummyOptim``/``DummyScheduler``.

A value the config fixes that the prepared objects contradict is an error naming both; an
``"auto"`` nothing can fill is an error naming its key and the config's origin.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from typing import cast

from overdrive.ds.config import (
    AUTO,
    BATCH,
    GAS,
    MICRO_BATCH,
    DeepSpeedConfig,
    JsonNumber,
    auto_paths,
)
from overdrive.ds.dummies import DummyOptim, DummyScheduler
from overdrive.errors import ConfigError


def _batch_sizes(
    cfg: DeepSpeedConfig, out: dict[str, object], micro: int | None, micro_source: str, world: int
) -> None:
    fixed_micro = out.get(MICRO_BATCH)
    if fixed_micro == AUTO:
        if micro is None:
            raise ConfigError(
                f'{MICRO_BATCH} is "auto" in {cfg.origin}, and no prepared dataloader gives a '
                "batch size",
                key=MICRO_BATCH,
                fix="pass the training dataloader to the same accelerator.prepare() call as the "
                f"model, or set {MICRO_BATCH} in the DeepSpeed config",
            )
        out[MICRO_BATCH] = micro
        cfg.sources[MICRO_BATCH] = micro_source
    elif micro is not None and fixed_micro != micro:
        raise ConfigError(
            f"{cfg.origin} sets {MICRO_BATCH} = {json.dumps(fixed_micro)}, but {micro_source} "
            f"is {micro}",
            key=MICRO_BATCH,
            fix=f'write "{MICRO_BATCH}": "auto" to take the dataloader\'s batch size, or build '
            "the dataloader with that batch size",
        )
    total = int(cast(JsonNumber, out[MICRO_BATCH])) * int(cast(JsonNumber, out[GAS])) * world
    if out.get(BATCH) == AUTO:
        out[BATCH] = total
        cfg.sources[BATCH] = f"{MICRO_BATCH} x {GAS} x {world} process(es)"
    elif out.get(BATCH) != total:
        raise ConfigError(
            f"{cfg.origin} sets {BATCH} = {json.dumps(out.get(BATCH))}, but {MICRO_BATCH} "
            f"{out[MICRO_BATCH]} x {GAS} {out[GAS]} x {world} process(es) = {total}",
            key=BATCH,
            fix=f'write "{BATCH}": "auto", or make it equal to that product',
        )


def _fill_section(
    cfg: DeepSpeedConfig,
    out: dict[str, object],
    name: str,
    values: Mapping[str, object],
    label: str,
) -> None:
    section = cast("dict[str, object]", out[name])  # _section checked it is a JSON object
    params = cast("dict[str, object]", section.setdefault("params", {}))
    for key, value in list(params.items()):
        if value == AUTO and key in values:
            params[key] = values[key]
            cfg.sources[f"{name}.params.{key}"] = f'{label}, for "auto"'


def _section(
    cfg: DeepSpeedConfig,
    out: dict[str, object],
    name: str,
    given: object,
    dummy: type[DummyOptim] | type[DummyScheduler],
    example: str,
) -> None:
    """The optimizer or scheduler section against the object passed to prepare()."""
    section = out.get(name)
    has_section = isinstance(section, dict)
    kind = section.get("type") if isinstance(section, dict) else None  # for messages
    is_dummy = isinstance(given, dummy)
    if is_dummy and getattr(given, "lr_scheduler_callable", None) is not None:
        if has_section:
            raise ConfigError(
                f"{cfg.origin} defines the {name} ({kind}), and the "
                f"{dummy.__name__} passed to prepare() has lr_scheduler_callable; DeepSpeed "
                "would build the callable's scheduler and ignore the section",
                key=name,
                fix=f"remove the {name} section, or pass {dummy.__name__} without "
                "lr_scheduler_callable",
            )
        return  # DeepSpeed builds the scheduler from the callable
    if has_section and given is not None and not is_dummy:
        raise ConfigError(
            f"{cfg.origin} defines the {name} ({kind}), and prepare() also got "
            f"a {type(given).__name__}",
            key=f"{name}",
            fix=f"pass {example} to prepare() to use the JSON's {name}, or remove the {name} "
            "section to use your own",
        )
    if is_dummy and not has_section:
        raise ConfigError(
            f"prepare() got {dummy.__name__}, a stand-in for the {name} of a DeepSpeed config, "
            f"but {cfg.origin} defines no {name}",
            key=f"{name}",
            fix=f"pass your own torch {name}, or add a {name} section to the DeepSpeed JSON",
        )
    if has_section and given is None:
        raise ConfigError(
            f"{cfg.origin} defines the {name} ({kind}), but prepare() got no "
            f"{name} to stand for it, so it would be neither stepped by the loop nor saved",
            key=f"{name}",
            fix=f"pass {example} to the same accelerator.prepare() call",
        )
    if isinstance(given, dummy):  # is_dummy
        _fill_section(cfg, out, name, given.hyperparameters(), f"{dummy.__name__}(...)")


# ZeRO's bucket sizes written "auto", from the model's hidden size h (Hugging Face Accelerate's
# and transformers' rule): (path, size for h).
BUCKETS: tuple[tuple[str, Callable[[int], int]], ...] = (
    ("zero_optimization.reduce_bucket_size", lambda h: h * h),
    ("zero_optimization.stage3_prefetch_bucket_size", lambda h: int(0.9 * h * h)),
    ("zero_optimization.stage3_param_persistence_threshold", lambda h: 10 * h),
)


def _bucket_sizes(cfg: DeepSpeedConfig, out: dict[str, object], model: object) -> None:
    config = getattr(model, "config", None)
    sizes = getattr(config, "hidden_sizes", None) or [getattr(config, "hidden_size", None)]
    known = [s for s in sizes if isinstance(s, int)]
    section = out.get("zero_optimization")
    if not known or not isinstance(section, dict):
        return
    hidden = max(known)
    for path, size in BUCKETS:
        key = path.split(".", 1)[1]
        if section.get(key) == AUTO:
            section[key] = size(hidden)
            cfg.sources[path] = f'the model\'s hidden size {hidden}, for "auto"'


def _clipping(cfg: DeepSpeedConfig, out: dict[str, object], caller: object) -> None:
    """``gradient_clipping: "auto"``: the caller's number, else 1.0 (Hugging Face Accelerate's
    fill); the engine clips every step by it."""
    if out.get("gradient_clipping") != AUTO:
        return
    number = caller if isinstance(caller, int | float) and not isinstance(caller, bool) else None
    given = number is not None
    out["gradient_clipping"] = float(number) if number is not None else 1.0
    cfg.config["gradient_clipping"] = out["gradient_clipping"]
    cfg.sources["gradient_clipping"] = (
        'transformers\' Trainer (max_grad_norm), for "auto"'
        if given
        else 'Hugging Face Accelerate\'s fill for "auto" (no caller gave a value)'
    )


def finish(
    cfg: DeepSpeedConfig,
    *,
    micro_batch: int | None,
    micro_source: str,
    world_size: int,
    optimizer: object,
    scheduler: object,
    on_cpu: bool,
    model: object = None,
    caller_clipping: object = None,
) -> dict[str, object]:
    """The config for ``deepspeed.initialize``; raises on contradictions and unfilled autos.
    ``caller_clipping``: what a library filled in for ``gradient_clipping`` (Trainer's
    ``max_grad_norm`` in the plugin's config), used where this config says "auto"."""
    out = copy.deepcopy(cfg.config)
    _clipping(cfg, out, caller_clipping)
    _batch_sizes(cfg, out, micro_batch, micro_source, world_size)
    _bucket_sizes(cfg, out, model)
    _section(cfg, out, "optimizer", optimizer, DummyOptim, "DummyOptim(model.parameters(), lr=...)")
    if optimizer is not None and "optimizer" not in out and "scheduler" in out:
        raise ConfigError(
            f"{cfg.origin} defines a scheduler but no optimizer; DeepSpeed builds its scheduler "
            "only around an optimizer it builds itself",
            key="scheduler",
            fix="remove the scheduler section and pass your own torch scheduler, or define the "
            "optimizer in the JSON too (and pass DummyOptim)",
        )
    _section(cfg, out, "scheduler", scheduler, DummyScheduler, "DummyScheduler(optimizer, ...)")
    section = out.get("optimizer")
    if on_cpu and isinstance(section, dict) and cfg.offload_optimizer == "none":
        kind = str(section.get("type", "")).lower()
        if kind in ("adam", "adamw") and "torch_adam" not in section.get("params", {}):
            # DeepSpeed's fused Adam needs CUDA; on CPU processes torch's Adam runs instead.
            section["params"]["torch_adam"] = True
            cfg.sources["optimizer.params.torch_adam"] = "overdrive (CPU processes: torch's Adam)"
    left = auto_paths(out)
    if left:
        raise ConfigError(
            f'{cfg.origin} leaves "auto" at {", ".join(left)}, and nothing overdrive knows '
            "fills it",
            key=left[0],
            fix="write a value there (or pass it to DummyOptim/DummyScheduler for the optimizer "
            "and scheduler sections)",
        )
    return out


def describe(cfg: DeepSpeedConfig) -> list[str]:
    """Lines for ``overdrive config show``: the config, then every value's source."""
    shown = copy.deepcopy(cfg.config)
    lines = [f"DeepSpeed config (from {cfg.origin}):"]
    lines += ["  " + line for line in json.dumps(shown, indent=2).splitlines()]
    lines.append("where each value comes from:")
    width = max((len(p) for p in cfg.sources), default=0)
    lines += [f"  {path:<{width}}  {source}" for path, source in sorted(cfg.sources.items())]
    pending = [p for p in auto_paths(shown)]
    if pending:
        lines.append(
            '"auto" values are filled when accelerator.prepare() runs: '
            f"{MICRO_BATCH} from the prepared dataloader's batch size, {BATCH} = {MICRO_BATCH} "
            f"x {GAS} x processes, optimizer/scheduler values from DummyOptim/DummyScheduler"
        )
    lines += [f"note: {note}" for note in cfg.notes]
    return lines
