"""Environment for launched DeepSpeed tests.

``clean_env`` points the cache at a directory that does not exist, so a launched worker would
compile DeepSpeed's C++ ops (CPU Adam takes minutes) into a fresh, possibly unwritable place
on every run. The workers get the compiled-ops directory of the environment running the
tests instead, so each op compiles once per machine.
"""

from __future__ import annotations

from overdrive.cli.env_cmd import extension_dir

DS_ENV = {"TORCH_EXTENSIONS_DIR": str(extension_dir())}
