"""A tiny regression problem for tests (y = a*x + b + noise, learned by two parameters), and
the mocked MRPC dataloaders Hugging Face Accelerate's examples use under test."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from overdrive.test_utils.mocked import (
    mocked_dataloaders,
    mocked_dataloaders_for_autoregressive_models,
)

__all__ = [
    "RegressionDataset",
    "RegressionModel",
    "mocked_dataloaders",
    "mocked_dataloaders_for_autoregressive_models",
]


class RegressionDataset:
    """``length`` samples ``{"x": x, "y": a*x + b + noise}`` (float32) drawn from ``seed``."""

    def __init__(self, a: float = 2, b: float = 3, length: int = 64, seed: int | None = None):
        rng = np.random.default_rng(seed)
        self.length = length
        self.x = rng.normal(size=(length,)).astype(np.float32)
        noise = rng.normal(scale=0.1, size=(length,)).astype(np.float32)
        self.y = a * self.x + b + noise

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"x": self.x[i], "y": self.y[i]}


class RegressionModel(torch.nn.Module):
    """``x * a + b`` with ``a`` and ``b`` scalar parameters (``double_output`` is accepted and
    unused, as in Hugging Face Accelerate)."""

    def __init__(self, a: float = 0, b: float = 0, double_output: bool = False) -> None:
        super().__init__()
        self.a = torch.nn.Parameter(torch.tensor(a).float())
        self.b = torch.nn.Parameter(torch.tensor(b).float())
        self.first_batch = True

    def forward(self, x: torch.Tensor | None = None) -> torch.Tensor:
        assert x is not None
        if self.first_batch:
            print(f"Model dtype: {self.a.dtype}, {self.b.dtype}. Input dtype: {x.dtype}")
            self.first_batch = False
        return x * self.a + self.b
