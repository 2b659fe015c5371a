"""`overdrive launch [options] script.py [args]` / `-m package.module [args]`.

Every setting with ``flag=True`` in the schema becomes a flag; flags go through the one
resolution (as the source ``flag --name``), the launcher options below do not.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
import time
from collections.abc import Iterable
from typing import Any

from overdrive import alias
from overdrive.alias.notice import LINE_VARIABLE
from overdrive.cli.flags import TypedStore, typed_name
from overdrive.cli.launch_options import add_option, container_for, flag_settings, launch_options
from overdrive.config import load_settings
from overdrive.errors import LaunchError
from overdrive.launch import cluster, ports
from overdrive.launch.describe import banner, dry_run_text
from overdrive.launch.runner import run
from overdrive.preflight.launch import plan_launch


def _dest(key: str) -> str:
    return "setting__" + key.replace(".", "__")


def add_launch_options(parser: argparse.ArgumentParser, *, script: bool = False) -> None:
    """The launcher's own options and every setting flag (shared with `overdrive test`);
    with ``script``, also those that say what to run (``-m``)."""
    settings = parser.add_argument_group("settings (a flag overrides env and config file)")
    exclusive: dict[str, Any] = {}
    for option in launch_options():
        if option.script and not script:
            continue
        if option.setting is None:
            add_option(container_for(parser, option, exclusive), option)
        elif option.switch:
            dest = _dest(option.setting.key)
            add_option(settings, option, dest=dest, action=TypedStore, const=option.const)
        else:  # the text as typed: the resolution converts it and names the flag it refuses
            dest = _dest(option.setting.key)
            add_option(settings, option, dest=dest, action=TypedStore, type=None)


def register(commands: Any) -> None:
    """Add the ``launch`` subcommand."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "launch",
        usage="%(prog)s [options] script.py [args...] | -m module [args...]",
        help="run a script on N processes / M machines",
        description="Run a training script on several processes (CPU or GPU) and machines, "
        "supervised by the launcher (by PyTorch's elastic agent across machines or with restarts).",
        allow_abbrev=False,
    )
    add_launch_options(parser, script=True)
    parser.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        metavar="script.py [args] | -m module [args]",
        help="what to run; everything after it goes to it untouched ('--' may precede it)",
    )
    parser.set_defaults(handler=handle)


def _say(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


_FILE_KINDS = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISSOCK, "a socket"),
)


def check_script(target: str, *, command: str = "overdrive launch") -> None:
    """Refuse a script path Python could not run, saying what the path is."""
    fix = "  fix: give the path of a Python file (or add -m to run a module)"
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        raise LaunchError(
            f"script {target!r} does not exist\n  fix: check the path, or add -m to run a "
            f"module; options for {command} go before the script"
        ) from None
    except OSError as error:
        raise LaunchError(f"script {target!r} cannot be read: {error.strerror}\n{fix}") from None
    if stat.S_ISDIR(mode):
        if os.path.isfile(os.path.join(target, "__main__.py")):
            return  # `python dir` runs dir/__main__.py, and so do the workers
        raise LaunchError(f"script {target!r} is a directory (with no __main__.py)\n{fix}")
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _FILE_KINDS if test(mode)), "an unusual file")
        raise LaunchError(f"script {target!r} is not a regular file ({kind})\n{fix}")
    if not os.access(target, os.R_OK):
        raise LaunchError(f"script {target!r} cannot be read (permission denied)\n{fix}")


def flags_after_script(script_args: list[str], known: Iterable[str]) -> list[str]:
    """The options in ``known`` written after the script: they go to the script, not to us."""
    ours = set(known) - {"--help"}
    found: list[str] = []
    for arg in script_args:
        name = arg.split("=", 1)[0]
        if name in ours and name not in found:
            found.append(name)
    return found


def after_script_note(found: list[str], target: str, command: str) -> str | None:
    """One line naming options of ``command`` that reach the script instead, or None."""
    if not found:
        return None
    names = " and ".join([", ".join(found[:-1]), found[-1]] if len(found) > 1 else found)
    them, verb = ("them", "come") if len(found) > 1 else ("it", "comes")
    return (
        f"{names} {verb} after the script, so {target} gets {them}, not {command}; to give "
        f"{them} to {command}, write {them} before {target}"
    )


def _long_options(parser: argparse.ArgumentParser | None) -> list[str]:
    if parser is None:
        return []
    return [o for a in parser._actions for o in a.option_strings if o.startswith("--")]


def _log_dir(args: argparse.Namespace, project_dir: str | None) -> str | None:
    """Where per-rank logs go: --log_dir, or a fresh folder under the project for --tee."""
    if args.log_dir:
        return str(args.log_dir)
    if args.tee:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        return os.path.join(project_dir or ".", "logs", f"launch-{stamp}")
    return None


def handle(args: argparse.Namespace) -> int:
    """Resolve settings, plan, then dry-run or run."""

    if getattr(args, "no_python", False):
        raise LaunchError(
            "--no_python: overdrive starts every worker with Python (its bootstrap reports "
            "failures and keeps the ranks in step)\n  fix: launch the Python script itself, or "
            "a module with -m"
        )
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise LaunchError(
            "no script to launch\n  fix: overdrive launch [options] train.py [args], or "
            "overdrive launch [options] -m package.module [args]"
        )
    target, script_args = command[0], command[1:]
    if not args.module:
        check_script(target)
    found = flags_after_script(script_args, _long_options(getattr(args, "cli_parser", None)))
    note = after_script_note(found, target, "overdrive launch")
    if note and not args.quiet:
        _say(f"overdrive: note: {note}")
    flags = {s.key: getattr(args, _dest(s.key)) for _, s in flag_settings()}
    names = {s.key: typed_name(args, _dest(s.key), n) for n, s in flag_settings()}
    if args.verbose:  # a launcher option that is also a setting: the workers say more too
        flags["verbose"], names["verbose"] = True, "verbose"
    settings = load_settings(flags=flags, flag_names=names, config_file=args.config_file)
    verbose = bool(settings["verbose"])  # --verbose, OVERDRIVE_VERBOSE or the config file
    # Every check `config validate` runs too; a refusal comes before any worker starts.
    plan = plan_launch(
        settings,
        target,
        script_args,
        is_module=args.module,
        gpu_count=cluster.gpu_count(settings),
        max_restarts=args.max_restarts,
        monitor_interval=args.monitor_interval,
        oversubscribe=args.oversubscribe,
        rank_prefix=False if args.no_rank_prefix else None,
        log_dir=_log_dir(args, settings["project_dir"]),
        simulated_device=args.simulate_device if getattr(args, "simulate", False) else None,
    )
    if getattr(args, "simulate", False):
        # deferred: keeps overdrive.cli.launch_cmd torch-free (the simulation loads torch)
        from overdrive.simulate.launch import run_simulation

        return run_simulation(
            plan,
            args.simulate_ranks,
            args.simulate_json,
            args.simulate_steps,
            args.simulate_cost,
            args.simulate_device,
        )
    plan = ports.settle_port(plan)
    if args.dry_run:
        print(dry_run_text(plan, show_all=verbose))
        return 0

    asked_by = None
    if settings["as_accelerate"]:  # flag, config file or environment
        os.environ[alias.OPT_IN_ENV] = "1"  # the workers inherit it; their bootstrap reads it
        asked_by = str(settings.source("as_accelerate"))
    os.environ.pop(LINE_VARIABLE, None)
    if not args.quiet:
        hint = cluster.scheduler_hint(settings, os.environ)
        if hint:
            _say(f"overdrive: note: {hint}")
        if plan.is_main_machine:
            # Rank 0 says it if and when the script imports accelerate (Trainer does).
            os.environ[LINE_VARIABLE] = alias.engine_line(asked_by)
    if verbose:  # what a run that works does, said only when asked
        if plan.is_main_machine:
            _say(banner(plan))
        if plan.load_note:
            _say(f"overdrive: note: {plan.load_note}")
        if plan.log_dir:
            _say(f"overdrive: note: each rank's output also goes to {plan.log_dir}/rank_N.log")
        if plan.port_note:
            _say(f"overdrive: note: {plan.port_note}")

    return run(plan, verbose=verbose)
