"""The one declaration of the ``launch`` options, read by both of its parsers.

``overdrive launch`` (`overdrive.cli.launch_cmd`) and Hugging Face Accelerate's face
``accelerate.commands.launch`` (`overdrive.commands.launch`) build every option from this
table: its names, spellings, value, default, help and help group. Each parser decides only
the shape of its namespace (where a value lands, whether a setting's value is parsed yet).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from overdrive.config import schema
from overdrive.config.kinds import Bool, Float, Int

# Boolean settings that work as plain switches (``--use_fsdp``); other booleans take a value.
SWITCHES = (
    "use_cpu",
    "use_fsdp",
    "use_deepspeed",
    "use_megatron_lm",
    "debug",
    "downcast_bf16",
    "as_accelerate",
)
SWITCH_NAMES = {"use_cpu": "cpu"}
ALIASES = {"use_cpu": ("use_cpu",)}
"""Setting key -> other long names of its flag (``--cpu`` is also ``--use_cpu``)."""

PLAIN_TYPES: dict[type, Callable[[str], Any]] = {Int: int, Float: float}
"""Setting kinds whose values the Accelerate face parses as numbers (``args.num_processes ==
4``); `overdrive launch` hands every setting's text to the resolution, which names the flag
when it refuses a value."""

GENERAL = "options"
HARDWARE = "Hardware Selection Arguments"
RESOURCE = "Resource Selection Arguments"
PARADIGM = "Training Paradigm Arguments"
DISTRIBUTED = "Distributed GPUs"
GROUPS = (
    HARDWARE,
    RESOURCE,
    PARADIGM,
    DISTRIBUTED,
    "DeepSpeed Arguments",
    "FSDP Arguments",
    "Megatron-LM Arguments",
    "ParallelismConfig Arguments",
)
"""Hugging Face Accelerate's help groups, in its order (`GENERAL` holds the rest)."""

_SECTION_GROUPS = {
    "deepspeed_config": "DeepSpeed Arguments",
    "fsdp_config": "FSDP Arguments",
    "megatron_lm_config": "Megatron-LM Arguments",
    "parallelism_config": "ParallelismConfig Arguments",
    "dynamo_config": RESOURCE,
}
_KEY_GROUPS = {
    "distributed_type": HARDWARE,
    "use_cpu": HARDWARE,
    "use_deepspeed": PARADIGM,
    "use_fsdp": PARADIGM,
    "use_megatron_lm": PARADIGM,
    "num_processes": RESOURCE,
    "num_machines": RESOURCE,
    "mixed_precision": RESOURCE,
    "downcast_bf16": RESOURCE,
    "gradient_accumulation_steps": RESOURCE,
}


@dataclass(frozen=True)
class LaunchOption:
    """One option of ``launch``: ``--name`` (and ``--name-with-dashes``), maybe ``short`` and
    other long names; a ``switch`` takes no value. ``setting`` is the setting it sets (a
    switch sets it to ``const``), None for the launcher's own options."""

    name: str
    help: str
    group: str = GENERAL
    short: str | None = None
    aliases: tuple[str, ...] = ()
    switch: bool = False
    type: Callable[[str], Any] | None = None
    default: Any = None
    metavar: str | None = None
    exclusive: str | None = None  # options sharing this name cannot be given together
    script: bool = False  # says what to run: `overdrive test` (which runs its own) lacks it
    setting: schema.Setting | None = None
    const: Any = True

    @property
    def unset(self) -> Any:
        """Its value when not given: False for a switch, else ``default``."""
        return False if self.switch else self.default

    @property
    def spellings(self) -> list[str]:
        """Every option string: the short one, then each long name snake_case and dashed."""
        found = [self.short] if self.short else []
        for name in (self.name, *self.aliases):
            for spelling in (f"--{name}", f"--{name.replace('_', '-')}"):
                if spelling not in found:
                    found.append(spelling)
        return found


LAUNCHER_OPTIONS = (
    LaunchOption("module", "run a module (python -m) instead of a file", short="-m",
                 switch=True, script=True),
    LaunchOption("no_python", "refused: overdrive starts every worker with Python",
                 switch=True, script=True),
    LaunchOption("config_file", "config file (default: the cached one)"),
    LaunchOption("max_restarts", "restart the group this often", DISTRIBUTED, type=int,
                 default=0),
    LaunchOption("monitor_interval", "seconds between checks of the workers", DISTRIBUTED,
                 type=float, default=0.1),
    LaunchOption("dry_run", "print the plan, start nothing", switch=True),
    LaunchOption("oversubscribe", "start more CPU processes than the machine is allowed by "
                 "default (4 per core, at least 64)", switch=True),
    LaunchOption("no_rank_prefix", "relay the workers' lines without the '[rank N] ' prefix",
                 switch=True),
    LaunchOption("tee", "also write each rank's output to <project_dir or .>/logs/launch-"
                 "<time>/rank_N.log", DISTRIBUTED, switch=True),
    LaunchOption("log_dir", "also write each rank's output to DIR/rank_N.log", DISTRIBUTED,
                 metavar="DIR"),
    LaunchOption("quiet", "no notes from the launcher, not even about flags after the "
                 "script", short="-q", switch=True, exclusive="noise"),
    LaunchOption("verbose", "also the banner, the effective settings, notes and the agent's "
                 "logs (the verbose setting; also OVERDRIVE_VERBOSE=1)", short="-v",
                 switch=True, exclusive="noise"),
    LaunchOption("simulate", "start no workers: run the script as chosen ranks of the planned "
                 "world, one process each, on a fake process group, and report each rank's "
                 "memory and collectives per step (docs/simulate.md)", switch=True),
    LaunchOption("simulate_ranks", "with --simulate: the ranks to run (default 0,-1: the first "
                 "and the last)", metavar="R,R"),
    LaunchOption("simulate_steps", "with --simulate: optimizer steps before the script is "
                 "stopped", type=int, default=2, metavar="N"),
    LaunchOption("simulate_json", "with --simulate: also write the report as JSON to FILE",
                 metavar="FILE"),
    LaunchOption("simulate_cost", "with --simulate: a YAML or JSON file of FLOP/s and "
                 "bandwidths; the report adds an estimated step time (docs/simulate.md)",
                 metavar="FILE"),
    LaunchOption("simulate_device", "with --simulate: size memory as this device's allocator "
                 "does: cuda (PyTorch's caching allocator) or cpu (the dtypes' sizes, the "
                 "default); the simulation still runs on this machine's CPU", metavar="DEVICE"),
)  # fmt: skip
"""The launcher's own options (how to launch, not what the workers run with)."""


def flag_name(setting: schema.Setting) -> str:
    """The flag for a setting: its short name, with Megatron's prefix kept for clarity."""
    if setting.key in SWITCH_NAMES:
        return SWITCH_NAMES[setting.key]
    if setting.section == "megatron_lm_config" and not setting.name.startswith("megatron_lm_"):
        return f"megatron_lm_{setting.name}"
    return setting.name


def flag_settings() -> list[tuple[str, schema.Setting]]:
    """(flag name, setting) for every launch flag, in schema order."""
    return [(flag_name(s), s) for s in schema.SETTINGS if s.flag]


def group_of(setting: schema.Setting) -> str:
    """The Accelerate help group a setting's flag is listed in."""
    if setting.key in _KEY_GROUPS:
        return _KEY_GROUPS[setting.key]
    return _SECTION_GROUPS.get(setting.section or "", DISTRIBUTED)


def _setting_option(name: str, setting: schema.Setting) -> LaunchOption:
    switch = setting.key in SWITCHES
    metavar = "BOOL" if isinstance(setting.kind, Bool) else setting.name.upper()
    return LaunchOption(
        name, setting.help, group_of(setting), aliases=ALIASES.get(setting.key, ()),
        switch=switch, type=PLAIN_TYPES.get(type(setting.kind)),
        metavar=None if switch else metavar, setting=setting,
    )  # fmt: skip


@cache
def setting_options() -> tuple[LaunchOption, ...]:
    """An option per launch flag setting, in schema order, ``--multi_gpu`` after
    ``--distributed_type`` (a switch for ``--distributed_type MULTI_GPU``)."""
    options: list[LaunchOption] = []
    for name, setting in flag_settings():
        options.append(_setting_option(name, setting))
        if setting.key == "distributed_type":
            options.append(
                LaunchOption(
                    "multi_gpu",
                    "several GPU processes (same as --distributed_type MULTI_GPU)",
                    HARDWARE,
                    switch=True,
                    setting=setting,
                    const="MULTI_GPU",
                )  # fmt: skip
            )
    return tuple(options)


def launch_options() -> tuple[LaunchOption, ...]:
    """Every option of ``launch``: the launcher's own, then the settings'."""
    return LAUNCHER_OPTIONS + setting_options()


def add_option(container: Any, option: LaunchOption, **changes: Any) -> argparse.Action:
    """Add ``option`` in every spelling to a parser or group, as the table declares it (a
    switch stores True); ``changes`` replace keyword arguments of ``add_argument``."""
    kwargs: dict[str, Any] = {"dest": option.name, "help": option.help}
    if option.switch:
        kwargs["action"] = "store_true"
    else:
        kwargs.update(type=option.type, default=option.default, metavar=option.metavar)
    kwargs.update(changes)
    action: argparse.Action = container.add_argument(*option.spellings, **kwargs)
    return action


def container_for(base: Any, option: LaunchOption, exclusive: dict[str, Any]) -> Any:
    """Where to add ``option``: ``base``, or the mutually exclusive group made in it for the
    options sharing ``option.exclusive`` (kept in ``exclusive``)."""
    if option.exclusive is None:
        return base
    if option.exclusive not in exclusive:
        exclusive[option.exclusive] = base.add_mutually_exclusive_group()
    return exclusive[option.exclusive]
