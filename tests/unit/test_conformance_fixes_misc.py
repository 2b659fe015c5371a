"""Hugging Face Accelerate behaviours its own unit tests check (test_accelerator.py,
test_data_loader.py, test_dataclasses.py): a quantized model's placement checked at prepare,
default context/sequence-parallel handlers, a prepared loader freed with its owner,
``unwrap_model(keep_torch_compile=True)``."""

from __future__ import annotations

import os
import weakref
from unittest import mock

import pytest
import torch
from torch.utils.data import DataLoader

from overdrive import Accelerator, ParallelismConfig
from overdrive.arguments.parallel_handlers import (
    DeepSpeedSequenceParallelConfig,
    TorchContextParallelConfig,
)


def _quantized(device_map: dict[str, str]) -> torch.nn.Module:
    model = torch.nn.Linear(2, 2)
    model.is_loaded_in_8bit = True
    model.hf_device_map = device_map
    return model


def test_an_8bit_model_with_cpu_or_disk_offload_is_refused_at_prepare() -> None:
    acc = Accelerator(cpu=True)
    for device_map in ({"": "cpu"}, {"a": 0, "b": "disk"}):
        with pytest.raises(ValueError, match="CPU or disk offload"):
            acc.prepare_model(_quantized(device_map))
    # bitsandbytes' multi-backend build trains on the CPU
    with mock.patch(
        "overdrive.accelerator.is_bitsandbytes_multi_backend_available", return_value=True
    ):
        acc.prepare_model(_quantized({"": "cpu"}))
    plain = torch.nn.Linear(2, 2)
    plain.hf_device_map = {"": "cpu"}  # not quantized: nothing to check
    acc.prepare_model(plain)


def test_context_and_sequence_parallel_sizes_get_their_handlers() -> None:
    with mock.patch.dict(os.environ, {"PARALLELISM_CONFIG_CP_COMM_STRATEGY": "alltoall"}):
        config = ParallelismConfig(cp_size=2)
    assert isinstance(config.cp_handler, TorchContextParallelConfig)
    assert config.cp_handler.cp_comm_strategy == "alltoall"
    assert isinstance(ParallelismConfig(sp_size=2).sp_handler, DeepSpeedSequenceParallelConfig)
    assert ParallelismConfig(tp_size=2).cp_handler is None
    with pytest.raises(ValueError, match="requires TorchContextParallelConfig"):
        ParallelismConfig(cp_size=2, cp_handler=DeepSpeedSequenceParallelConfig())


def test_a_prepared_loader_is_freed_with_its_owner() -> None:
    class Owner:
        def __init__(self) -> None:
            self.accelerator = Accelerator(cpu=True)
            self.loader = self.accelerator.prepare(DataLoader(list(range(8)), batch_size=4))
            self.iterator = iter(self.loader)

    owner = Owner()
    assert next(owner.iterator).tolist() == [0, 1, 2, 3]
    assert owner.accelerator.gradient_state.active_dataloader is owner.loader
    refs = [
        weakref.ref(owner.accelerator),
        weakref.ref(owner.loader),
        weakref.ref(owner.loader.gradient_state),
    ]
    del owner  # no reference cycle: freed now, not by the cycle collector later
    assert [ref() for ref in refs] == [None, None, None]


def test_keep_torch_compile_compiles_the_unwrapped_module_again() -> None:
    acc = Accelerator(cpu=True)
    model = torch.nn.Linear(2, 2)
    wrapped = torch.nn.DataParallel(model)
    compiled = torch.compile(wrapped, backend="eager")
    kept = acc.unwrap_model(compiled, keep_torch_compile=True)
    assert kept._orig_mod is model
    assert compiled._orig_mod is wrapped  # the compiled wrapper given is left as it was
    assert torch.equal(kept(torch.ones(1, 2)), model(torch.ones(1, 2)))
    assert acc.unwrap_model(compiled) is model
