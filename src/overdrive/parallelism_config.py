"""``accelerate.parallelism_config``: where Hugging Face Accelerate keeps ``ParallelismConfig``."""

from overdrive.plugins import ParallelismConfig

__all__ = ["ParallelismConfig"]
