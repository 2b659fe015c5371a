"""Fetch, on a machine with network, the wheels a GPU machine without network lacks for `make gpu`.

    .venv/bin/python bench/gpu/wheels.py [--dest .whl]        (or: make gpu-wheels)

The GPU machines have python3 3.12 with torch, transformers and pytest but no deepspeed,
torchao or pydantic, and no network. The versions are the ones installed in the running
interpreter (the dev venv: what the CPU tests run), for CPython 3.12 on manylinux x86_64.
DeepSpeed publishes no wheel: it is built here (pure Python; its ops compile on first use).
Copy ``.whl`` with the tree to the GPU machine; bench/README.md (## gpu) has the command
that installs them there.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import subprocess
import sys
from pathlib import Path

# deepspeed's needs that the GPU image lacks, and torchao for fp8. typing-extensions comes
# along because pydantic needs a newer one than an image may hold.
BINARY = ["torchao", "pydantic", "pydantic-core", "annotated-types", "typing-inspection",
          "hjson", "typing-extensions"]  # fmt: skip
BUILT_HERE = ["deepspeed"]
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
             "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64"]  # fmt: skip


def pinned(names: list[str]) -> list[str]:
    return [f"{n}=={importlib.metadata.version(n)}" for n in names]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dest", type=Path, default=Path(".whl"))
    args = p.parse_args()
    args.dest.mkdir(exist_ok=True)
    pip = [sys.executable, "-m", "pip"]
    platform = [a for plat in PLATFORMS for a in ("--platform", plat)]
    subprocess.run(
        [*pip, "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
         "--implementation", "cp", *platform, "-d", str(args.dest), *pinned(BINARY)],
        check=True,
    )  # fmt: skip
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(args.dest),
         *pinned(BUILT_HERE)],
        check=True,
    )  # fmt: skip
    wheels = sorted(args.dest.glob("*.whl"))
    size = sum(w.stat().st_size for w in wheels) / 2**20
    print(
        f"{len(wheels)} wheels, {size:.1f} MiB in {args.dest}: " + ", ".join(w.name for w in wheels)
    )


if __name__ == "__main__":
    main()
