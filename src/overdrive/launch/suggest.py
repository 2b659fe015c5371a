"""The command a user should have typed when a script asking for several processes ran alone."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence

from overdrive.config import Settings
from overdrive.config.sources import default_config_path


def _config_file(settings: Settings, environ: Mapping[str, str]) -> str | None:
    """The config file the settings came from, unless the launcher would find it anyway."""
    default = str(default_config_path(environ))
    for key in settings:
        source = settings.source(key)
        if source.kind != "file":
            continue
        path = source.detail.rsplit(":", 1)[0] if ":" in source.detail else source.detail
        if os.path.abspath(os.path.expanduser(path)) != os.path.abspath(default):
            return path
    return None


def suggest_command(
    settings: Settings, argv: Sequence[str], environ: Mapping[str, str] | None = None
) -> str:
    """``overdrive launch ... script args`` that runs ``argv`` (a plain ``sys.argv``) as asked.

    ``argv[0]`` is the script; the rest are its arguments, quoted for a POSIX shell.
    """
    env = os.environ if environ is None else environ
    cmd = ["overdrive", "launch"]
    config_file = _config_file(settings, env)
    if config_file is not None:
        cmd += ["--config_file", config_file]
    if settings["use_cpu"]:
        cmd.append("--cpu")
    processes = settings["num_processes"]
    if processes is not None:
        cmd += ["--num_processes", str(processes)]
    if settings["num_machines"] > 1:
        cmd += [
            "--num_machines",
            str(settings["num_machines"]),
            "--machine_rank",
            str(settings["machine_rank"]),
            "--main_process_ip",
            str(settings["main_process_ip"]),
        ]
    script = argv[0] if argv else "train.py"
    return shlex.join([*cmd, script, *argv[1:]])
