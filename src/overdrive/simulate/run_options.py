"""``python -m overdrive.run --simulate [--simulate_ranks R,R] [--simulate_steps N]
[--simulate_json FILE] [--simulate_cost FILE] [--simulate_device DEVICE] script.py``: the
simulation of ``overdrive launch --simulate`` for the
world the settings (config file, environment) describe, planned by the same preflight."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from overdrive.errors import LaunchError
from overdrive.simulate.device import check_device

VALUED = (
    "--simulate_ranks",
    "--simulate_steps",
    "--simulate_json",
    "--simulate_cost",
    "--simulate_device",
)


@dataclass
class SimulateOptions:
    """What ``--simulate`` and its options asked for."""

    ranks: str | None = None
    steps: int = 2
    json_path: str | None = None
    cost_path: str | None = None
    device: str | None = None


def split_simulate_options(argv: Sequence[str]) -> tuple[SimulateOptions | None, list[str]]:
    """The simulate options among the options before the script (None without
    ``--simulate``), and the command line without them."""
    rest: list[str] = []
    found: dict[str, str] = {}
    asked = False
    args = list(argv)
    while args and args[0].startswith("-") and args[0] not in ("-m", "--"):
        option = args.pop(0)
        name, _, value = option.replace("-", "_").lstrip("_").partition("=")
        key = f"--{name}"
        if key == "--simulate":
            asked = True
        elif key in VALUED:
            if not value:
                if not args:
                    raise LaunchError(f"{key} needs a value\n  fix: {key} VALUE before the script")
                value = args.pop(0)
            found[key] = value
        else:
            rest.append(option)
    if not asked:
        if found:
            raise LaunchError(
                f"{', '.join(found)} without --simulate\n  fix: add --simulate before the script"
            )
        return None, list(argv)
    steps = found.get("--simulate_steps", "2")
    if not steps.isdigit():
        raise LaunchError(
            f"--simulate_steps {steps!r} is not a count\n  fix: --simulate_steps 2 (or more)"
        )
    check_device(found.get("--simulate_device"))
    options = SimulateOptions(
        found.get("--simulate_ranks"),
        int(steps),
        found.get("--simulate_json"),
        found.get("--simulate_cost"),
        found.get("--simulate_device"),
    )
    return options, [*rest, *args]


def simulate_script(
    options: SimulateOptions, target: str, args: Sequence[str], *, is_module: bool
) -> int:
    """Plan as ``overdrive launch`` would (the same refusals), then simulate; the exit code."""
    # python -m overdrive.run reads these options on every start, so this module stays light:
    from overdrive.config import load_settings  # deferred: config/ loads yaml
    from overdrive.launch import cluster  # deferred: only a simulation plans a launch
    from overdrive.preflight.launch import plan_launch  # deferred: only a simulation plans a launch
    from overdrive.simulate.launch import run_simulation  # deferred: the simulation loads torch

    settings = load_settings()
    plan = plan_launch(
        settings,
        target,
        list(args),
        is_module=is_module,
        gpu_count=cluster.gpu_count(settings),
        simulated_device=options.device,
    )
    return run_simulation(
        plan, options.ranks, options.json_path, options.steps, options.cost_path, options.device
    )
