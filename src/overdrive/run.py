"""``python -m overdrive.run [--as_accelerate] script.py [args]`` (or ``-m module [args]``): one
process, no launcher, ``import accelerate`` answered by overdrive."""

from __future__ import annotations

import os
import runpy
import sys

from overdrive import alias
from overdrive.alias.notice import announce
from overdrive.cli.launch_cmd import after_script_note, check_script, flags_after_script
from overdrive.config import load_settings
from overdrive.errors import OverdriveError
from overdrive.simulate.run_options import simulate_script, split_simulate_options

USAGE = (
    "usage: python -m overdrive.run [--as_accelerate] script.py [args...] | "
    "[--as_accelerate] -m module [args...]"
)
HELP = f"""{USAGE}

Run a script (or a module, as python -m does) in this process with `import accelerate`
answered by overdrive, as transformers' Trainer needs.

options (before the script):
  --as_accelerate  answer to `import accelerate` even where Hugging Face Accelerate's package
                   is installed (also OVERDRIVE_AS_ACCELERATE=1, or `as_accelerate: true` in
                   the config file)
  -v, --verbose    also say the effective settings and overdrive's notes (the verbose
                   setting; also OVERDRIVE_VERBOSE=1, or `verbose: true` in the config file)
  --simulate       start nothing: run the script as ranks of the world the settings describe,
                   on a fake process group (with --simulate_ranks R,R, --simulate_steps N,
                   --simulate_json FILE, --simulate_cost FILE, --simulate_device cuda;
                   docs/simulate.md)
  -h, --help       show this help"""
OPTIONS = ("--as_accelerate", "--as-accelerate")
VERBOSE = ("-v", "--verbose")
PROG = "overdrive.run"


class _UsageError(OverdriveError):
    """A command line this module cannot run."""


def _parse(argv: list[str]) -> tuple[bool, bool, str, list[str]]:
    """(as_accelerate given, run a module, target, the target's arguments); ``--verbose``
    goes into the environment, where the script's settings resolution reads it."""
    as_accelerate = False
    rest = list(argv)
    while rest and rest[0].startswith("-") and rest[0] != "-m":
        option = rest.pop(0)
        if option in ("-h", "--help"):
            print(HELP)
            raise SystemExit(0)
        if option == "--":
            break
        if option in VERBOSE:
            os.environ["OVERDRIVE_VERBOSE"] = "1"
            continue
        if option not in OPTIONS:
            raise _UsageError(
                f"unknown option {option} (before the script)\n  fix: {USAGE}; everything after "
                "the script goes to the script"
            )
        as_accelerate = True
    is_module = bool(rest) and rest[0] == "-m"
    if is_module:
        rest = rest[1:]
    if not rest:
        raise _UsageError(f"no {'module' if is_module else 'script'} to run\n  fix: {USAGE}")
    return as_accelerate, is_module, rest[0], rest[1:]


def _engine(as_accelerate: bool) -> str:
    """Install the alias as the settings ask; return the engine line, with its source."""
    flags = {"as_accelerate": True} if as_accelerate else {}
    settings = load_settings(flags=flags, flag_names={"as_accelerate": "as_accelerate"})
    asked_by = str(settings.source("as_accelerate")) if settings["as_accelerate"] else None
    if not alias.install(
        force=asked_by is not None, asked_by=asked_by, started_by="python -m overdrive.run"
    ):
        raise _UsageError(
            f"accelerate {alias.real_accelerate()} is installed, so overdrive will not answer to "
            "`import accelerate` unasked\n  fix: python -m overdrive.run --as_accelerate "
            f"SCRIPT (or set {alias.OPT_IN_ENV}=1, or write `as_accelerate: true` in the config "
            "file) to run it on overdrive; plain python runs it on the installed accelerate"
        )
    return alias.engine_line(asked_by)


def _prepare(argv: list[str]) -> tuple[bool, str, list[str]]:
    """Every check before the script runs: its path, our options after it, the alias."""
    as_accelerate, is_module, target, args = _parse(argv)
    if not is_module:
        check_script(target, command="python -m overdrive.run")
    ours = (*OPTIONS, "--verbose")  # a script may have a -v of its own
    note = after_script_note(flags_after_script(args, ours), target, "python -m overdrive.run")
    if note:
        sys.stderr.write(f"{PROG}: note: {note}\n")
    line = _engine(as_accelerate)
    if os.environ.get("RANK", "0") == "0":
        announce(line)  # said when the script imports accelerate, if it does
    return is_module, target, args


def main(argv: list[str]) -> None:
    """Check the command line, install the alias, then run the script or module as
    ``__main__`` with its arguments, as ``python script.py`` would."""
    try:
        simulate, argv = split_simulate_options(argv)
        is_module, target, args = _prepare(argv)
        if simulate is not None:  # docs/simulate.md
            raise SystemExit(simulate_script(simulate, target, args, is_module=is_module))
    except OverdriveError as exc:
        sys.stderr.write(f"{PROG}: error: {exc}\n")
        raise SystemExit(exc.exit_code) from None
    sys.argv = [target, *args]
    if is_module:
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        path = os.path.abspath(target)  # `python script.py` puts the script's folder first
        sys.path[0] = path if os.path.isdir(path) else os.path.dirname(path)
        runpy.run_path(target, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
