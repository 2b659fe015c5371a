"""Parallel layouts and the plain functions that apply them to a model.

``layout`` is torch-free (the launcher validates a layout before any worker starts);
``mesh`` turns a layout into a ``DeviceMesh`` in the worker; ``fsdp*``, ``wrap`` and
``activation_checkpointing`` are the pieces a strategy composes, each owning its settings.
"""

from overdrive.parallel.layout import ParallelLayout, layout_from_settings

__all__ = ["ParallelLayout", "layout_from_settings"]
