"""``python -m overdrive.run script.py [args]`` (or ``-m module [args]``): run with the accelerate alias on."""

from __future__ import annotations

import runpy
import sys

from overdrive.alias import OPT_IN_ENV, install, real_accelerate

USAGE = "usage: python -m overdrive.run script.py [args...] | -m module [args...]"


def main(argv: list[str]) -> None:
    """Install the alias, then run the script or module as ``__main__`` with the remaining arguments."""
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        raise SystemExit(0 if argv else 2)
    if not install():
        raise SystemExit(
            f"overdrive.run: accelerate {real_accelerate()} is installed, so overdrive will not shadow it "
            f"unasked. Set {OPT_IN_ENV}=1 to run this script on overdrive, or run it with plain python."
        )
    if argv[0] == "-m":
        if len(argv) < 2:
            raise SystemExit(USAGE)
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
