"""Hugging Face Accelerate's public names under overdrive's (issue 12, part 1)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

from overdrive.errors import ConfigError
from tests.helpers.env import forget_launcher

ISSUE_NAMES = [
    "set_seed",
    "gather",
    "gather_object",
    "broadcast",
    "broadcast_object_list",
    "reduce",
    "pad_across_processes",
    "send_to_device",
    "release_memory",
    "find_executable_batch_size",
    "skip_first_batches",
    "synchronize_rng_states",
    "write_basic_config",
    "LoggerType",
    "PrecisionType",
    "DistributedType",
    "DDPCommunicationHookType",
    "DistributedDataParallelKwargs",
    "ProfileKwargs",
    "notebook_launcher",
    "debug_launcher",
    "init_empty_weights",
    "tqdm",
    "ParallelismConfig",
    "DistributedOperationException",
]
TOP_LEVEL = [
    "Accelerator",
    "PartialState",
    "AcceleratorState",
    "GradientState",
    "DDPCommunicationHookType",
    "DistributedOperationException",
    "LoggerType",
    "PrecisionType",
    "ProfileKwargs",
    "ParallelismConfig",
    "notebook_launcher",
    "debug_launcher",
    "init_empty_weights",
    "find_executable_batch_size",
    "release_memory",
    "skip_first_batches",
    "prepare_data_loader",
    "synchronize_rng_states",
    "tqdm",
    "set_seed",
]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    forget_launcher(monkeypatch, tmp_path)


@pytest.mark.parametrize("name", ISSUE_NAMES)
def test_utils_exports_the_issue_names(name: str) -> None:
    utils = importlib.import_module("overdrive.utils")
    assert getattr(utils, name) is not None
    assert name in utils.__all__


@pytest.mark.parametrize("name", TOP_LEVEL)
def test_top_level_exports(name: str) -> None:
    import overdrive

    assert getattr(overdrive, name) is not None
    assert name in overdrive.__all__


def test_module_paths_the_seeds_scripts_import() -> None:
    from overdrive.accelerator import DataLoaderConfiguration, GradientAccumulationPlugin  # noqa: F401
    from overdrive.data_loader import DataLoaderDispatcher, SeedableRandomSampler  # noqa: F401
    from overdrive.state import AcceleratorState, GradientState  # noqa: F401
    from overdrive.test_utils import RegressionDataset, RegressionModel  # noqa: F401
    from overdrive.test_utils.testing import assert_exception  # noqa: F401
    from overdrive.utils.dataclasses import DistributedType  # noqa: F401
    from overdrive.utils.operations import DistributedOperationException, copy_tensor_to_devices  # noqa: F401


def test_utils_import_stays_cheap() -> None:
    code = "import sys, overdrive, overdrive.utils; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_every_distributed_type_exists_and_the_unrunnable_are_refused() -> None:
    from overdrive.config import load_settings
    from overdrive.preflight.backends import check_available
    from overdrive.utils import DistributedType

    names = {t.value for t in DistributedType}
    assert {"MULTI_NPU", "MULTI_XPU", "MULTI_HPU", "MULTI_NEURON", "XLA"} <= names
    for name in ("MULTI_NPU", "MULTI_XPU", "MULTI_HPU", "MULTI_MLU", "XLA"):
        settings = load_settings(code={"distributed_type": name}, environ={})
        with pytest.raises(ConfigError) as err:
            check_available(settings)
        assert name in str(err.value) and "not available" in str(err.value)


def test_enums_have_the_seeds_values() -> None:
    from overdrive.utils import DDPCommunicationHookType, LoggerType, PrecisionType, RNGType

    assert PrecisionType("bf16") is PrecisionType.BF16 and str(PrecisionType.FP8) == "fp8"
    assert LoggerType.TENSORBOARD == "tensorboard" and LoggerType("all") is LoggerType.ALL
    assert {h.value for h in DDPCommunicationHookType} == {
        "no",
        "fp16",
        "bf16",
        "power_sgd",
        "batched_power_sgd",
    }
    assert RNGType.GENERATOR == "generator"


def test_operations_on_one_process() -> None:
    from overdrive.utils import operations as op

    t = torch.tensor([1.0, 2.0])
    out = op.reduce(t)  # Accelerate's default: mean
    assert torch.equal(out, t) and out is not t
    assert torch.equal(op.reduce(t, "max", scale=2.0), t * 2)
    with pytest.raises(ValueError, match="reduction"):
        op.reduce(t, "median")
    assert op.gather_object([3]) == [3]
    assert op.broadcast_object_list([1, 2]) == [1, 2]
    assert op.DistributedOperationException.__name__ == "CollectiveMismatchError"


def test_send_to_device_honours_skip_keys() -> None:
    from overdrive.utils import send_to_device

    batch = {"x": torch.ones(2, dtype=torch.float64), "keep": torch.ones(1), "n": 3}
    moved = send_to_device(batch, "meta", skip_keys="keep")
    assert moved["x"].device.type == "meta" and moved["keep"].device.type == "cpu"
    assert moved["n"] == 3
    nested = send_to_device([(torch.ones(1),)], torch.device("meta"))
    assert nested[0][0].is_meta


def test_find_executable_batch_size_retries_smaller_after_oom() -> None:
    from overdrive.utils import find_executable_batch_size, release_memory

    tried: list[int] = []

    @find_executable_batch_size(starting_batch_size=100)
    def train(batch_size: int, factor: int) -> int:
        tried.append(batch_size)
        if batch_size > 81:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2 GiB")
        return batch_size * factor

    assert train(2) == 2 * 81 and tried == [100, 90, 81]

    @find_executable_batch_size(starting_batch_size=8)
    def other_error(batch_size: int) -> None:
        raise RuntimeError("shape mismatch")

    with pytest.raises(RuntimeError, match="shape mismatch"):
        other_error()
    a, b = release_memory(torch.ones(1), nn.Linear(1, 1))
    assert a is None and b is None


def test_write_basic_config_writes_once(tmp_path: Path) -> None:
    from overdrive.config import load_settings
    from overdrive.utils import write_basic_config

    path = tmp_path / "cfg.yaml"
    assert write_basic_config("bf16", save_location=path) == path
    assert write_basic_config("no", save_location=path) is False  # kept, not overwritten
    assert load_settings(config_file=str(path), environ={})["mixed_precision"] == "bf16"
    with pytest.raises(ConfigError, match="mixed_precision"):
        write_basic_config("fp4", save_location=tmp_path / "other.yaml")


def test_tqdm_shows_on_the_local_main_process_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from overdrive.utils import tqdm

    assert not tqdm(range(2)).disable
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert tqdm(range(2)).disable
    assert not tqdm(range(2), main_process_only=False).disable
    with pytest.raises(TypeError, match="main_process_only"):
        tqdm(True, range(2))


def test_init_empty_weights_keeps_buffers_unless_asked() -> None:
    from overdrive.utils import init_empty_weights

    with init_empty_weights():
        model = nn.BatchNorm1d(4)
    assert model.weight.is_meta and isinstance(model.weight, nn.Parameter)
    assert not model.running_mean.is_meta
    with init_empty_weights(include_buffers=True):
        model = nn.BatchNorm1d(4)
    assert model.weight.is_meta and model.running_mean.is_meta
    assert not nn.Linear(1, 1).weight.is_meta  # nothing leaks out of the block


def test_ddp_kwargs_comm_hooks_are_checked_and_kept_out_of_ddp() -> None:
    from overdrive.utils import DDPCommunicationHookType, DistributedDataParallelKwargs

    kw = DistributedDataParallelKwargs(
        comm_hook=DDPCommunicationHookType.POWER_SGD,
        comm_wrapper=DDPCommunicationHookType.FP16,
        comm_state_option={"matrix_approximation_rank": 2},
        bucket_cap_mb=10,
    )
    assert kw.comm_hook == "power_sgd" and kw.ddp_kwargs() == {"bucket_cap_mb": 10}
    with pytest.raises(ConfigError, match="comm_wrapper"):
        DistributedDataParallelKwargs(comm_hook="fp16", comm_wrapper="bf16")
    with pytest.raises(ConfigError, match="not a known hook"):
        DistributedDataParallelKwargs(comm_hook="int8")


def test_profile_kwargs_and_accelerator_profile(tmp_path: Path) -> None:
    from overdrive import Accelerator, ProfileKwargs

    with pytest.raises(ConfigError, match="activities"):
        ProfileKwargs(activities=["gpu"])
    acc = Accelerator(cpu=True)
    handler = ProfileKwargs(activities=["cpu"], output_trace_dir=str(tmp_path / "traces"))
    with acc.profile(handler) as prof:
        torch.ones(8, 8) @ torch.ones(8, 8)
    assert any("mm" in e.key for e in prof.key_averages())
    assert (tmp_path / "traces" / "profile_0.json").stat().st_size > 0


def test_parallelism_config() -> None:
    from overdrive import Accelerator
    from overdrive.utils import ParallelismConfig

    with pytest.raises(ConfigError, match="cp_size"):
        Accelerator(cpu=True, parallelism_config=ParallelismConfig(cp_size=2))
    acc = Accelerator(cpu=True, parallelism_config=ParallelismConfig(dp_shard_size=1))
    assert acc.settings["parallelism_config.parallelism_config_dp_shard_size"] == 1
    assert acc.parallelism_config.dp_shard_size == 1


def test_seedable_sampler_generator_form_matches_a_reseeded_random_sampler() -> None:
    from overdrive.data_loader import SeedableRandomSampler

    g = torch.Generator()
    sampler = SeedableRandomSampler(range(10), generator=g, data_seed=7)
    first, second = list(sampler), list(sampler)  # each full pass moves to the next epoch
    expected = [
        torch.randperm(10, generator=torch.Generator().manual_seed(s)).tolist() for s in (7, 8)
    ]
    assert [first, second] == expected and sampler.epoch == 2
    torch.manual_seed(3)
    assert SeedableRandomSampler(range(4)).seed == 3  # defaults to torch's initial seed


def test_prepared_loader_with_a_user_generator_keeps_its_order() -> None:
    from overdrive import Accelerator

    acc = Accelerator(cpu=True)
    plain_gen, prep_gen = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    plain = DataLoader(range(12), batch_size=4, shuffle=True, generator=plain_gen)
    prepared = acc.prepare(DataLoader(range(12), batch_size=4, shuffle=True, generator=prep_gen))
    for _ in range(2):  # two epochs: the generator advances the same way
        assert [b.tolist() for b in prepared] == [b.tolist() for b in plain]
