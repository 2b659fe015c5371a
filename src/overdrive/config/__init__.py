"""Configuration: one schema, four sources, one resolution with provenance."""

from overdrive.config.load import load_settings
from overdrive.config.provenance import Resolved, Source
from overdrive.config.resolve import resolve
from overdrive.config.settings import HANDOVER_VARIABLE, Settings

__all__ = ["HANDOVER_VARIABLE", "Resolved", "Settings", "Source", "load_settings", "resolve"]
