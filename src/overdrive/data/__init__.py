"""Sharded and dispatched dataloaders, seedable shuffling, exact resume, metric gathering."""

from overdrive.data.loader import PreparedDataLoader
from overdrive.data.metrics import gather_for_metrics
from overdrive.data.prepare import prepare_data_loader, skip_first_batches
from overdrive.data.samplers import SeedableRandomSampler

__all__ = [
    "PreparedDataLoader",
    "SeedableRandomSampler",
    "gather_for_metrics",
    "prepare_data_loader",
    "skip_first_batches",
]
