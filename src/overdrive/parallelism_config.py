"""``accelerate.parallelism_config``: where Hugging Face Accelerate keeps ``ParallelismConfig``."""

from overdrive.arguments.plugins import ParallelismConfig

__all__ = ["ParallelismConfig"]
