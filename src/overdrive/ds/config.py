"""The DeepSpeed config: built from the settings, or read from a DeepSpeed JSON file whose
``"auto"`` values are filled from the settings and, at ``prepare``, from the prepared objects.

Every value records where it came from. A value the JSON fixes that contradicts a setting is
an error naming both values and both sources; a setting the JSON makes meaningless (the JSON
is then the whole DeepSpeed config) is reported, never dropped in silence. ``build`` needs
only the settings, so ``overdrive config show``/``validate`` and the launcher run it too;
``finish`` completes the config once the dataloader and the optimizer are known.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from overdrive.config import Settings
from overdrive.errors import ConfigError

AUTO = "auto"
CLIPPING_FILL = "transformers' Trainer fills it from max_grad_norm, else 1.0"
CLIPPING_DEFAULT = (
    f'default "auto", as in Hugging Face Accelerate: filled at prepare ({CLIPPING_FILL})'
)
_MISSING = object()

# (setting, path in the DeepSpeed config): DeepSpeed's own knobs.
KNOBS: tuple[tuple[str, str], ...] = (
    ("deepspeed_config.zero_stage", "zero_optimization.stage"),
    ("deepspeed_config.offload_optimizer_device", "zero_optimization.offload_optimizer.device"),
    (
        "deepspeed_config.offload_optimizer_nvme_path",
        "zero_optimization.offload_optimizer.nvme_path",
    ),
    ("deepspeed_config.offload_param_device", "zero_optimization.offload_param.device"),
    ("deepspeed_config.offload_param_nvme_path", "zero_optimization.offload_param.nvme_path"),
    ("deepspeed_config.gradient_clipping", "gradient_clipping"),
    (
        "deepspeed_config.zero3_save_16bit_model",
        "zero_optimization.stage3_gather_16bit_weights_on_model_save",
    ),
)
_LAUNCHER_ONLY = (  # read only by DeepSpeed's own multi-machine launchers
    "deepspeed_config.deepspeed_hostfile",
    "deepspeed_config.deepspeed_inclusion_filter",
    "deepspeed_config.deepspeed_exclusion_filter",
)
# fp16 loss-scaling options: DeepSpeed's bf16 section refuses them (bf16 needs no scaling).
_LOSS_SCALING = (
    "loss_scale",
    "initial_scale_power",
    "loss_scale_window",
    "hysteresis",
    "consecutive_hysteresis",
    "min_loss_scale",
)
MICRO_BATCH = "train_micro_batch_size_per_gpu"
# A number the JSON (or a setting) gives: int() and float() take it as Python does.
JsonNumber = int | float | str
BATCH = "train_batch_size"
GAS = "gradient_accumulation_steps"


@dataclass
class DeepSpeedConfig:
    """A DeepSpeed config with the source of every value (dotted path -> source)."""

    config: dict[str, object]  # the DeepSpeed JSON's tree
    sources: dict[str, str]
    origin: str  # "the DeepSpeed config file ds.json (file cfg.yaml:3)" or "the settings"
    from_file: bool
    gradient_accumulation_steps: int
    mixed_precision: str
    notes: list[str] = field(default_factory=list)
    # The caller accumulates by itself (transformers' Trainer): overdrive divides no loss and
    # the JSON's gradient_accumulation_steps sizes only the engine's window.
    caller_accumulates: bool = False

    def get(self, path: str, default: object = None) -> object:
        value = _get(self.config, path)
        return default if value is _MISSING else value

    @property
    def zero_stage(self) -> int:
        return int(cast(JsonNumber, self.get("zero_optimization.stage", 0) or 0))

    @property
    def gradient_clipping(self) -> float:
        value = self.get("gradient_clipping", 0.0)
        # "auto": filled at prepare
        return 0.0 if value in (None, AUTO) else float(cast(JsonNumber, value))

    @property
    def offload_optimizer(self) -> str:
        return str(self.get("zero_optimization.offload_optimizer.device", "none") or "none")

    @property
    def offload_param(self) -> str:
        return str(self.get("zero_optimization.offload_param.device", "none") or "none")


# --- dotted paths ---------------------------------------------------------------------------
def _get(tree: Mapping[str, object], path: str) -> object:
    node: object = tree
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _set(tree: dict[str, object], path: str, value: object) -> None:
    *parents, last = path.split(".")
    node = tree
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[last] = value


def _drop(tree: dict[str, object], path: str) -> None:
    *parents, last = path.split(".")
    node: object = tree
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(last, None)


def _same(a: object, b: object) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    if isinstance(a, str) and isinstance(b, str):
        return a.lower() == b.lower()
    return bool(a == b)


def auto_paths(tree: object, prefix: str = "") -> list[str]:
    """Dotted paths of every ``"auto"`` value left in ``tree``."""
    if isinstance(tree, dict):
        return [p for k, v in tree.items() for p in auto_paths(v, f"{prefix}{k}.")]
    return [prefix[:-1]] if isinstance(tree, str) and tree == AUTO else []


# --- reading the JSON -----------------------------------------------------------------------
def _read_json(path_text: str, source: str) -> dict[str, object]:
    path = Path(path_text).expanduser()
    fix = "point deepspeed_config_file at a DeepSpeed JSON config"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"deepspeed_config_file {path_text} ({source}) cannot be read: {exc.strerror}",
            key="deepspeed_config.deepspeed_config_file",
            fix=fix,
        ) from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(
            f"deepspeed_config_file {path_text} ({source}) is not valid JSON: {exc}",
            key="deepspeed_config.deepspeed_config_file",
            fix="correct the file (DeepSpeed configs are JSON objects)",
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"deepspeed_config_file {path_text} ({source}) holds a {type(data).__name__}, not a "
            "JSON object",
            key="deepspeed_config.deepspeed_config_file",
            fix=fix,
        )
    return data


def _given_config(
    settings: Settings, code_config: dict[str, object] | None, code_label: str
) -> tuple[dict[str, object], str] | None:
    """(config dict, its name in messages) from code or the file setting; None without one."""
    if code_config is not None:
        return copy.deepcopy(code_config), f"the DeepSpeed config dict given in code ({code_label})"
    key = "deepspeed_config.deepspeed_config_file"
    path = settings[key]
    if path is None:
        return None
    source = str(settings.source(key))
    return _read_json(path, source), f"the DeepSpeed config file {path} ({source})"


# --- building -------------------------------------------------------------------------------
class _Builder:
    def __init__(
        self,
        settings: Settings,
        given: dict[str, object] | None,
        origin: str,
        caller_accumulates: bool = False,
    ) -> None:
        self.s = settings
        self.caller_accumulates = caller_accumulates
        self.from_file = given is not None
        self.config: dict[str, object] = given if given is not None else {}
        self.origin = origin
        self.sources: dict[str, str] = {}
        self.notes: list[str] = []

    def describe(self, key: str) -> str:
        return f"{key} = {self.s[key]!r} ({self.s.source(key)})"

    def conflict(
        self, path: str, fixed: object, key: str, ours: object, our_source: str
    ) -> ConfigError:
        return ConfigError(
            f"{self.origin} sets {path} = {json.dumps(fixed)}, but {key} = {ours!r} ({our_source})",
            key=key,
            fix=f'make them equal, write "{path.rsplit(".", 1)[-1]}": "auto" in the JSON to use '
            f"the setting, or remove the setting",
        )

    def knob(self, key: str, path: str) -> None:
        ours, explicit = self.s[key], self.s.is_set(key)
        source = str(self.s.source(key))
        clipping = path == "gradient_clipping"
        if not self.from_file:
            if ours is not None:
                _set(self.config, path, ours)
                self.sources[path] = source
            elif clipping:  # Hugging Face Accelerate's default: "auto", filled at prepare
                _set(self.config, path, AUTO)
                self.sources[path] = CLIPPING_DEFAULT
            return
        found = _get(self.config, path)
        if found == AUTO and clipping and ours is None:
            self.sources[path] = f'"auto" in {self.origin}, filled at prepare ({CLIPPING_FILL})'
        elif found == AUTO:
            if ours is None:
                _drop(self.config, path)
                self.sources[path] = f'"auto" in {self.origin}, no setting: DeepSpeed\'s default'
            else:
                _set(self.config, path, ours)
                self.sources[path] = f'{source}, for "auto" in {self.origin}'
        elif found is _MISSING:
            if explicit:
                self.notes.append(
                    f"{self.describe(key)} has no effect: {self.origin} is the whole DeepSpeed "
                    f"config and does not set {path}\n"
                    f'  fix: write "{path.rsplit(".", 1)[-1]}": "auto" at {path} in the JSON to '
                    "use the setting, or remove the setting"
                )
        else:
            if explicit and not _same(found, ours):
                raise self.conflict(path, found, key, ours, source)
            self.sources[path] = self.origin

    def accumulation(self) -> int:
        key = GAS
        ours, source = int(self.s[key]), str(self.s.source(key))
        found = _get(self.config, GAS)
        if found is _MISSING or found == AUTO:
            _set(self.config, GAS, ours)
            self.sources[GAS] = source if found is _MISSING else f'{source}, for "auto"'
            return ours
        if self.caller_accumulates and isinstance(found, int) and found >= 1:
            self.sources[GAS] = f"{self.origin} (the caller accumulates by itself)"
            return found
        if self.s.is_set(key) and not _same(found, ours):
            raise self.conflict(GAS, found, key, ours, source)
        if not isinstance(found, int) or isinstance(found, bool) or found < 1:
            raise ConfigError(
                f"{self.origin} sets {GAS} = {json.dumps(found)}, which is not a positive integer",
                key=key,
                fix='write a whole number of micro-batches, or "auto"',
            )
        self.sources[GAS] = self.origin
        return int(found)

    def precision(self) -> str:
        key = "mixed_precision"
        ours, source = self.s[key], str(self.s.source(key))  # fp8: refused by config.rules
        chosen: str = ours
        for name in ("bf16", "fp16"):
            section_key = "bfloat16" if name == "bf16" and "bfloat16" in self.config else name
            path = f"{section_key}.enabled"
            found = _get(self.config, path)
            table = dict(self.s[f"deepspeed_config.{name}"] or {})
            if not self.from_file:
                if ours == name:
                    if name == "bf16":
                        table = self._without_loss_scaling(table)
                    _set(self.config, section_key, {**table, "enabled": True})
                    self.sources[path] = source
                continue
            if found == AUTO or (found is _MISSING and ours == name):
                _set(self.config, path, ours == name)
                self.sources[path] = f'{source}, for "auto"' if found == AUTO else source
            elif found is not _MISSING:
                if self.s.is_set(key) and bool(found) != (ours == name):
                    raise self.conflict(path, found, key, ours, source)
                self.sources[path] = self.origin
                if found is True:
                    chosen = name
        return chosen

    def _without_loss_scaling(self, table: dict[str, object]) -> dict[str, object]:
        key = "deepspeed_config.bf16"
        dropped = [k for k in table if k in _LOSS_SCALING]
        if dropped:
            self.notes.append(
                f"{key}.{', '.join(dropped)} ({self.s.source(key)}) has no effect: bf16 needs no "
                "loss scaling, and DeepSpeed's bf16 section takes no such option, so it is left "
                "out\n  fix: remove it (loss scaling options belong to the fp16 section)"
            )
        return {k: v for k, v in table.items() if k not in _LOSS_SCALING}

    def launcher(self) -> None:
        key = "deepspeed_config.deepspeed_multinode_launcher"
        if self.s[key] != "standard" and self.s["num_machines"] > 1:
            raise ConfigError(
                f"{self.describe(key)}: overdrive starts the processes of every machine with its "
                "own launcher (as `deepspeed_multinode_launcher: standard` does); pdsh, "
                "openmpi, mvapich, mpich and nossh are not available",
                key=key,
                fix="run `overdrive launch` on every machine with its machine_rank "
                "(deepspeed_multinode_launcher: standard)",
            )
        for other in (key, *_LAUNCHER_ONLY):
            if self.s.is_set(other) and (other != key or self.s[key] != "standard"):
                self.notes.append(
                    f"{self.describe(other)} has no effect: overdrive starts the processes "
                    "itself on every machine (standard launcher), so no hostfile is read\n"
                    "  fix: remove the setting; run `overdrive launch` on each machine"
                )


def build(
    settings: Settings,
    *,
    code_config: dict[str, object] | None = None,
    code_label: str = "Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=...))",
    caller_accumulates: bool = False,
) -> DeepSpeedConfig:
    """Everything the settings decide; batch sizes and optimizer values wait for ``finish``.
    ``caller_accumulates``: the code that gave the config accumulates by itself and drives
    the window's end (``gradient_state._set_sync_gradients``), as transformers' Trainer does."""
    given = _given_config(settings, code_config, code_label)
    config, origin = given if given is not None else (None, "the settings")
    b = _Builder(settings, config, origin, caller_accumulates and code_config is not None)
    for key, path in KNOBS:
        b.knob(key, path)
    steps = b.accumulation()
    precision = b.precision()
    b.launcher()
    init_key = "deepspeed_config.zero3_init_flag"
    stage = _get(b.config, "zero_optimization.stage")
    stage = 0 if stage is _MISSING else stage  # DeepSpeed's default
    if settings[init_key] and int(cast(JsonNumber, stage or 0)) != 3:
        b.notes.append(
            f"{b.describe(init_key)} has no effect: models are built partitioned only under "
            f"ZeRO stage 3 ({origin} gives stage {stage})\n"
            "  fix: set zero_stage: 3, or remove zero3_init_flag"
        )
    if "zero_allow_untested_optimizer" not in b.config:
        b.config["zero_allow_untested_optimizer"] = True  # plain torch optimizers under ZeRO
        b.sources["zero_allow_untested_optimizer"] = "overdrive (torch optimizers are allowed)"
    for path in (MICRO_BATCH, BATCH):
        if _get(b.config, path) in (_MISSING, AUTO):
            _set(b.config, path, AUTO)
            b.sources[path] = "filled at prepare()"
        else:
            b.sources[path] = origin
    return DeepSpeedConfig(
        config=b.config,
        sources=b.sources,
        origin=origin,
        from_file=b.from_file,
        gradient_accumulation_steps=steps,
        mixed_precision=precision,
        notes=b.notes,
        caller_accumulates=b.caller_accumulates,
    )
