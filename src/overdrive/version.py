"""overdrive's own version (``overdrive.__version__``), importable without the package's names."""

__version__ = "0.1.0"
