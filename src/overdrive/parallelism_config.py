"""``accelerate.parallelism_config``: where the described system keeps ``ParallelismConfig``."""

from overdrive.plugins import ParallelismConfig

__all__ = ["ParallelismConfig"]
