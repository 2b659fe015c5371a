"""Port Hugging Face Accelerate's own test scripts to overdrive by renaming imports only.

The scripts ship inside the ``accelerate`` package (``accelerate/test_utils/scripts``). This
module finds them in a given site directory (``make compat`` installs the pinned version
there, outside the project's virtualenv) and writes copies in which every import of
``accelerate`` (``import accelerate``, ``from accelerate.x import y``) names ``overdrive``
instead. Nothing else in a script changes.

    python tests/compat/port.py --site .compat/site --out .compat/ported
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ACCELERATE_VERSION = "1.15.0"

# The scripts the conformance suite runs, relative to accelerate/test_utils/scripts.
SCRIPTS = (
    "test_script.py",
    "test_sync.py",
    "test_ops.py",
    "test_distributed_data_loop.py",
    "external_deps/test_metrics.py",
    "test_ddp_comm_hook.py",
    "test_merge_weights.py",
    "test_notebook.py",
)

_FROM = re.compile(r"^(\s*from\s+)accelerate(?=[\s.])", re.MULTILINE)
_IMPORT = re.compile(r"^(\s*import\s+)accelerate(?=[\s.,]|$)", re.MULTILINE)


def rename_imports(source: str) -> str:
    """``source`` with every ``accelerate`` import statement naming ``overdrive``."""
    source = _FROM.sub(r"\1overdrive", source)
    return _IMPORT.sub(r"\1overdrive", source)


def scripts_dir(site: Path) -> Path:
    """Where the installed package keeps its test scripts; a clear error when it is absent."""
    path = site / "accelerate" / "test_utils" / "scripts"
    if not path.is_dir():
        raise SystemExit(
            f"error: no accelerate test scripts under {site} (looked for {path}).\n"
            f"  fix: pip install --no-deps --target {site} accelerate=={ACCELERATE_VERSION} "
            "(or run `make compat`, which does)"
        )
    return path


def port_all(site: Path, out: Path, *, rename: bool = True) -> list[Path]:
    """Write every script of ``SCRIPTS`` to ``out`` (renamed, or verbatim with rename=False)."""
    source_dir = scripts_dir(site)
    written = []
    for name in SCRIPTS:
        text = (source_dir / name).read_text()
        target = out / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(rename_imports(text) if rename else text)
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path, required=True, help="where accelerate is installed")
    parser.add_argument("--out", type=Path, required=True, help="folder for the ported scripts")
    parser.add_argument("--verbatim", action="store_true", help="copy without renaming")
    args = parser.parse_args(argv)
    for path in port_all(args.site, args.out, rename=not args.verbatim):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
