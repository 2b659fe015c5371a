"""``overdrive config validate FILE --simulate train.py [args]``: after the file's checks,
the script simulated as ranks of the world the file describes (docs/simulate.md).

Torch-free: the CLI imports it on every start; the simulation is imported when asked for.
"""

from __future__ import annotations

import argparse
from typing import Any

from overdrive.cli.flags import add_flag
from overdrive.errors import LaunchError
from overdrive.simulate.device import check_device


def add_validate_simulation(parser: argparse.ArgumentParser) -> None:
    """``--simulate`` and its options, and the script with its arguments, on ``validate``."""
    add_flag(
        parser, "simulate", action="store_true",
        help="then run SCRIPT as chosen ranks of the world the file describes, on a fake "
        "process group, and report each rank's memory and collectives (docs/simulate.md)",
    )  # fmt: skip
    add_flag(parser, "simulate_ranks", metavar="R,R", help="with --simulate: the ranks to run "
             "(default 0,-1: the first and the last)")  # fmt: skip
    add_flag(parser, "simulate_steps", type=int, metavar="N",
             help="with --simulate: optimizer steps before the script is stopped "
             "(default 2)")  # fmt: skip
    add_flag(parser, "simulate_json", metavar="FILE",
             help="with --simulate: also write the report as JSON to FILE")  # fmt: skip
    add_flag(parser, "simulate_cost", metavar="FILE",
             help="with --simulate: a YAML or JSON file of FLOP/s and bandwidths; the report "
             "adds an estimated step time")  # fmt: skip
    add_flag(parser, "simulate_device", metavar="DEVICE",
             help="with --simulate: size memory as this device's allocator does: cuda "
             "(PyTorch's caching allocator) or cpu (the dtypes' sizes, the default)")  # fmt: skip
    parser.add_argument("script", nargs="?", help="with --simulate: the training script")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="the script's arguments")


def check_simulation_arguments(args: argparse.Namespace) -> None:
    """A script or a simulate option without ``--simulate``, or ``--simulate`` without a
    script, is refused before the file is read."""
    if args.simulate and not args.script:
        raise LaunchError(
            "config validate --simulate needs the script to simulate\n"
            f"  fix: overdrive config validate --simulate {args.file} train.py [its arguments]"
        )
    given = [
        f"--{name}"
        for name in (
            "simulate_ranks",
            "simulate_steps",
            "simulate_json",
            "simulate_cost",
            "simulate_device",
        )
        if getattr(args, name) is not None
    ]
    if given and not args.simulate:
        raise LaunchError(
            f"config validate: {', '.join(given)} without --simulate\n"
            "  fix: add --simulate (and the script after the file)"
        )
    if args.simulate:
        check_device(args.simulate_device)
    if args.script and not args.simulate:
        raise LaunchError(
            f"config validate reads a script ({args.script}) only with --simulate\n"
            f"  fix: overdrive config validate --simulate {args.file} {args.script}, or leave "
            "the script out to check the file alone"
        )


def simulate_validated(
    args: argparse.Namespace, settings: Any, *, gpu_count: int, oversubscribe: bool
) -> int:
    """Plan the launch of ``args.script`` with the validated settings, for the machine the
    checks assumed (``gpu_count`` GPUs, ``oversubscribe``), then simulate it; a file
    written for GPUs this machine lacks is simulated on its CPU (as with ``--cpu``)."""
    # deferred: only a simulation plans a launch (and loads torch)
    from overdrive.config import load_settings  # deferred: as above
    from overdrive.launch import cluster  # deferred: as above
    from overdrive.preflight.launch import plan_launch  # deferred: as above
    from overdrive.simulate.launch import DEFAULT_STEPS, run_simulation  # deferred: as above

    def plan_for(chosen: Any, gpus: int) -> Any:
        script_args = list(args.script_args)
        return plan_launch(
            chosen,
            args.script,
            script_args,
            gpu_count=gpus,
            oversubscribe=oversubscribe,
            simulated_device=args.simulate_device,
        )

    plan = plan_for(settings, gpu_count)
    if plan.device != "cpu" and cluster.gpu_count(settings) == 0:
        sizes = (
            "memory sized as CUDA's allocator would"
            if args.simulate_device == "cuda"
            else "sizes are the dtypes' (--simulate_device cuda: as CUDA's allocator would)"
        )
        print(
            f"note: {args.file} runs on GPUs, which this machine lacks: simulated on its CPU "
            f"(the same layout and collectives; {sizes})"
        )
        on_cpu = load_settings(config_file=args.file, flags={"use_cpu": True})
        plan = plan_for(on_cpu, 0)
    steps = DEFAULT_STEPS if args.simulate_steps is None else args.simulate_steps
    return run_simulation(
        plan,
        args.simulate_ranks,
        args.simulate_json,
        steps,
        args.simulate_cost,
        args.simulate_device,
    )
