"""Environment for launched DeepSpeed tests.

``clean_env`` points the cache at a directory that does not exist, so a launched worker would
compile DeepSpeed's C++ ops (CPU Adam takes minutes) into a fresh, possibly unwritable place
on every run. The workers get the compiled-ops directory of the environment running the
tests instead, so each op compiles once per machine.
"""

from __future__ import annotations

import subprocess
import sys

from overdrive.cli.env_cmd import extension_dir
from tests.helpers.dist import clean_env

DS_ENV = {"TORCH_EXTENSIONS_DIR": str(extension_dir())}


def build_cpu_adam() -> None:
    """Compile DeepSpeed's CPU Adam (offload's optimizer) once, outside any launch.

    A first build takes minutes on two cores, longer than a test launch may run; a launch
    killed mid-build would also leave torch's build lock behind and every later run waiting
    on it. Built here, in a child process with no short deadline, the workers load it as is.
    """
    code = "from deepspeed.ops.op_builder import CPUAdamBuilder; CPUAdamBuilder().load()"
    env = clean_env({**DS_ENV, "DS_ACCELERATOR": "cpu"})
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, f"building CPU Adam failed:\n{done.stdout}\n{done.stderr}"
