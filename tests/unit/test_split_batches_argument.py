"""``Accelerator(split_batches=True)`` is ignored as Hugging Face Accelerate ignores it, with a
warning that names the argument that does split."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

from overdrive import Accelerator, DataLoaderConfiguration


def test_the_argument_is_ignored_with_a_warning_naming_the_fix() -> None:
    with pytest.warns(UserWarning, match=r"DataLoaderConfiguration\(split_batches=True\)"):
        accelerator = Accelerator(split_batches=True, cpu=True)
    assert accelerator.split_batches is False
    assert accelerator.settings["split_batches"] is False


def test_the_dataloader_configuration_splits() -> None:
    accelerator = Accelerator(
        dataloader_config=DataLoaderConfiguration(split_batches=True), cpu=True
    )
    assert accelerator.split_batches is True
    loader = accelerator.prepare(DataLoader(torch.arange(8.0), batch_size=4))
    assert loader.total_batch_size == 4
