"""Hugging Face Accelerate's general ``accelerate.utils`` helpers under overdrive: imports,
constants, environment, other, operations, versions, random, launch, deepspeed, dataclasses,
ao, bnb and rich, checked for their values, results and errors."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import os
import socket
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from overdrive.errors import ConfigError


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("ACCELERATE_", "PARALLELISM_CONFIG_")):
            monkeypatch.delenv(name)


# --------------------------------------------------------------------------- constants
def test_constants_have_accelerates_values() -> None:
    from overdrive.utils import constants as c

    assert (c.WEIGHTS_NAME, c.WEIGHTS_INDEX_NAME) == (
        "pytorch_model.bin",
        "pytorch_model.bin.index.json",
    )
    assert c.SAFE_WEIGHTS_INDEX_NAME == "model.safetensors.index.json"
    assert c.SAFE_WEIGHTS_PATTERN_NAME.format(suffix="-00001") == "model-00001.safetensors"
    assert c.PROFILE_PATTERN_NAME.format(suffix="0") == "profile_0.json"
    assert c.SCALER_NAME == "scaler.pt" and c.DEEPSPEED_MULTINODE_LAUNCHERS[1] == "standard"
    assert "MULTI_CPU" in c.TORCH_DISTRIBUTED_OPERATION_TYPES
    assert "MULTI_CPU" not in c.CUDA_DISTRIBUTED_TYPES
    assert c.STR_OPERATION_TO_FUNC["<="](1, 2) and not c.STR_OPERATION_TO_FUNC["!="](3, 3)
    assert nn.Linear in c.SUPPORTED_PYTORCH_LAYERS_FOR_UPCASTING
    assert nn.Embedding not in c.SUPPORTED_PYTORCH_LAYERS_FOR_UPCASTING
    with pytest.raises(AttributeError):
        c.NOT_A_CONSTANT  # noqa: B018


# --------------------------------------------------------------------------- imports
def test_bnb_checks_compare_the_installed_version(monkeypatch: pytest.MonkeyPatch) -> None:
    from overdrive.utils import imports, versions

    assert versions.torch_version  # read before importlib.metadata.version is replaced below
    monkeypatch.setattr(imports, "_installed", lambda name: name == "bitsandbytes")
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.38.0")
    assert imports.is_bnb_available() and imports.is_bnb_available("0.38.0")
    assert not imports.is_bnb_available(min_version="0.40")
    assert imports.is_8bit_bnb_available() and not imports.is_4bit_bnb_available()
    monkeypatch.setattr(imports, "_installed", lambda name: False)
    assert not imports.is_bnb_available() and not imports.is_bitsandbytes_multi_backend_available()


def test_torchao_needs_0_6_1_and_the_decorator_refuses_without_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from overdrive.utils import imports

    @imports.torchao_required
    def convert(x: int) -> int:
        return x + 1

    real_version = importlib.metadata.version
    monkeypatch.setattr(
        importlib.metadata, "version", lambda n: "0.6.0" if n == "torchao" else real_version(n)
    )
    assert not imports.is_torchao_available()
    with pytest.raises(ImportError, match="pip install torchao"):
        convert(1)
    monkeypatch.setattr(importlib.metadata, "version", real_version)
    assert imports.is_torchao_available() and convert(1) == 2


def test_flags_from_the_environment_switch_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    from overdrive.utils import imports

    assert not imports.is_rich_available()
    monkeypatch.setenv("ACCELERATE_ENABLE_RICH", "yes")
    assert imports.is_rich_available()
    assert not imports.is_megatron_lm_available()
    assert imports.is_mps_available(min_version="99.0") is False
    assert imports.is_pippy_available() and imports.is_weights_only_available()
    assert imports.is_numpy_available("1.0") and not imports.is_numpy_available("999.0")
    assert imports.is_torch_distributed_available() is torch.distributed.is_available()
    assert not imports.is_habana_gaudi1() and not imports.is_xpu_available(check_device=True)
    assert imports.is_transformer_engine_mxfp8_available() is False  # not installed here


def test_deepspeed_required_refuses_a_non_deepspeed_accelerator() -> None:
    from overdrive import Accelerator
    from overdrive.processes.process_state import reset_state
    from overdrive.utils import deepspeed_required

    @deepspeed_required
    def needs_deepspeed() -> str:
        return "ran"

    reset_state()
    assert needs_deepspeed() == "ran"  # no accelerator yet
    accelerator = Accelerator(cpu=True)
    with pytest.raises(ValueError, match="DeepSpeed is not enabled"):
        needs_deepspeed()
    del accelerator
    reset_state()


# --------------------------------------------------------------------------- environment
def test_environment_parsers(monkeypatch: pytest.MonkeyPatch) -> None:
    from overdrive.utils import (
        are_libraries_initialized,
        get_int_from_env,
        parse_choice_from_env,
        parse_flag_from_env,
        str_to_bool,
    )

    assert str_to_bool("Yes") == 1 and str_to_bool("off") == 0
    assert str_to_bool("ON", to_bool=True) is True and str_to_bool("0", to_bool=True) is False
    with pytest.raises(ValueError, match="invalid truth value maybe"):
        str_to_bool("maybe")
    monkeypatch.setenv("B", "-1")
    monkeypatch.setenv("C", "7")
    assert get_int_from_env(["A", "B", "C"], 3) == 7 and get_int_from_env(["A"], 3) == 3
    monkeypatch.setenv("FLAG", "true")
    assert parse_flag_from_env("FLAG") and not parse_flag_from_env("UNSET_FLAG")
    assert parse_flag_from_env("UNSET_FLAG", default=True)
    assert parse_choice_from_env("UNSET_CHOICE") == "no" and parse_choice_from_env("C") == "7"
    assert are_libraries_initialized("torch", "surely_not_a_library") == ["torch"]


def test_cpu_distributed_information_reads_mpi_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    from overdrive.utils import get_cpu_distributed_information

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PMI_RANK", "5")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "8")
    info = get_cpu_distributed_information()
    assert (info.rank, info.world_size, info.local_rank, info.local_world_size) == (5, 8, 0, 1)


def test_gpu_questions_go_to_nvidia_smi(monkeypatch: pytest.MonkeyPatch) -> None:
    from overdrive.launch import host_gpus
    from overdrive.utils import environment

    answers = {
        "count,name": ["2, NVIDIA GeForce RTX 4090", "2, NVIDIA GeForce RTX 4090"],
        "driver_version": ["535.104.05", "535.104.05"],
        "compute_capability": ["8.9", "8.9"],
    }
    monkeypatch.setattr(host_gpus, "query", lambda field: answers[field])
    assert environment.get_gpu_info() == (["NVIDIA GeForce RTX 4090"] * 2, 2)
    assert environment.get_driver_version() == "535.104.05"
    assert environment.check_cuda_p2p_ib_support() is False  # RTX 40xx with an old driver
    answers["driver_version"] = ["550.54.14"]
    assert environment.check_cuda_p2p_ib_support() is True
    environment.check_cuda_fp8_capability.cache_clear()
    assert environment.check_cuda_fp8_capability() is True
    environment.check_cuda_fp8_capability.cache_clear()

    def broken(field: str) -> list[str]:
        raise FileNotFoundError("nvidia-smi")

    monkeypatch.setattr(host_gpus, "query", broken)
    assert environment.check_cuda_p2p_ib_support() is True  # cannot tell: assume it works


def test_subprocess_answer_is_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    from overdrive.launch import host_gpus

    seen: list[list[str]] = []

    def fake(cmd: list[str], text: bool) -> str:
        seen.append(cmd)
        return "1, Tesla T4\n"

    monkeypatch.setattr(host_gpus.subprocess, "check_output", fake)
    assert host_gpus.gpu_names_and_count() == (["Tesla T4"], 1)
    assert seen[0][1:] == ["--query-gpu=count,name", "--format=csv,noheader"]
    assert host_gpus.parse_cpu_list("0-3, 8,10-11,") == [0, 1, 2, 3, 8, 10, 11]


def test_device_type_and_numa_on_this_machine() -> None:
    from overdrive.utils import get_current_device_type
    from overdrive.utils.environment import override_numa_affinity

    assert get_current_device_type() == ("cuda", "MULTI_GPU")
    if not torch.cuda.is_available():
        before = os.sched_getaffinity(0)
        override_numa_affinity(0)  # nothing to pin to without a GPU
        assert os.sched_getaffinity(0) == before


# --------------------------------------------------------------------------- versions, random
def test_compare_versions_takes_names_and_version_objects() -> None:
    from torch.torch_version import TorchVersion

    from overdrive.utils import compare_versions
    from overdrive.utils.versions import torch_version

    assert str(torch_version) == importlib.metadata.version("torch")
    assert compare_versions("torch", ">=", "2.0") and compare_versions(
        TorchVersion("1.9"), "<", "1.10"
    )

    class Version:  # stands for packaging.version.Version
        def __str__(self) -> str:
            return "0.4.2"

    assert compare_versions(Version(), "==", "0.4.2")
    with pytest.raises(ValueError, match="`operation` must be one of"):
        compare_versions("torch", "~=", "2.0")


def test_synchronize_rng_state_on_one_process() -> None:
    from overdrive.utils import synchronize_rng_state
    from overdrive.utils.dataclasses import RNGType

    torch.manual_seed(3)
    before = torch.get_rng_state()
    synchronize_rng_state(RNGType.TORCH)
    assert torch.equal(torch.get_rng_state(), before)
    with pytest.raises(ValueError, match="Need a generator"):
        synchronize_rng_state("generator")
    with pytest.raises(ValueError, match="needs rng_type"):
        synchronize_rng_state()


# --------------------------------------------------------------------------- operations
def test_batch_size_structure_and_slices() -> None:
    from overdrive.utils import (
        find_batch_size,
        get_data_structure,
        ignorant_find_batch_size,
        initialize_tensors,
        is_tensor_information,
        slice_tensors,
    )
    from overdrive.utils.operations import get_shape

    batch = {"x": torch.zeros(4, 3), "y": [torch.ones(4, dtype=torch.long)]}
    assert find_batch_size(batch) == 4 and find_batch_size([torch.zeros(2, 5)]) == 2
    with pytest.raises(ValueError, match="empty"):
        find_batch_size([])
    with pytest.raises(TypeError, match="only find the batch size of tensors"):
        find_batch_size(["text"])
    assert ignorant_find_batch_size({}) is None and ignorant_find_batch_size([1]) is None
    structure = get_data_structure(batch)
    assert is_tensor_information(structure["x"]) and structure["y"][0].dtype == torch.long
    rebuilt = initialize_tensors(structure)
    assert rebuilt["x"].shape == (4, 3) and rebuilt["y"][0].dtype == torch.long
    assert get_shape(batch) == {"x": [4, 3], "y": [[4]]}
    sliced = slice_tensors(batch, slice(1, 3))
    assert sliced["x"].shape == (2, 3) and sliced["y"][0].shape == (2,)


def test_dtype_codes_and_tensor_checks() -> None:
    from overdrive.utils.operations import (
        TENSOR_INT_TO_DTYPE,
        TENSOR_TYPE_TO_INT,
        gather_tensor_shape,
        is_torch_tensor,
        is_torch_xpu_tensor,
        pad_input_tensors,
    )

    assert TENSOR_TYPE_TO_INT[torch.bfloat16] == 4 and TENSOR_INT_TO_DTYPE[9] is torch.int64
    assert is_torch_tensor(tensor=torch.zeros(1)) and not is_torch_tensor([1])
    assert not is_torch_xpu_tensor(torch.zeros(1))
    shape, code = gather_tensor_shape(torch.zeros(3, 5, dtype=torch.half))
    assert shape.tolist() == [3, 5] and TENSOR_INT_TO_DTYPE[code] is torch.half
    padded = pad_input_tensors(tensor=torch.ones(9, 2), batch_size=9, num_processes=4)
    assert padded.shape == (12, 2) and padded[9:].sum() == 0  # a multiple of 4, zero rows
    assert pad_input_tensors(torch.ones(8, 2), 8, 4).shape == (8, 2)


def test_operation_decorators_pass_through_and_rename_errors() -> None:
    from overdrive.utils.operations import (
        DistributedOperationException,
        chained_operation,
        verify_operation,
    )

    @verify_operation
    def double(tensor: torch.Tensor) -> torch.Tensor:
        return tensor * 2

    assert torch.equal(double(torch.ones(2)), torch.full((2,), 2.0))

    @chained_operation
    def failing(tensor: torch.Tensor) -> None:
        raise DistributedOperationException("shapes differ")

    with pytest.raises(DistributedOperationException, match="Error found while calling") as err:
        failing(torch.ones(1))
    assert "shapes differ" in str(err.value.__cause__)


def test_gathered_parameters_is_a_no_op_without_zero3() -> None:
    from overdrive.utils import GatheredParameters

    layer = nn.Linear(2, 2)
    with GatheredParameters(layer.parameters(), modifier_rank=0):
        layer.weight.data.fill_(1.0)
    assert layer.weight.sum().item() == 4.0


# --------------------------------------------------------------------------- other
def test_small_helpers() -> None:
    from overdrive.utils import convert_bytes, get_pretty_name, merge_dicts, recursive_getattr

    assert convert_bytes(512) == "512 bytes" and convert_bytes(1536) == "1.5 KB"
    assert convert_bytes(3 * 1024**3) == "3.0 GB" and convert_bytes(1024**5 * 2) == "2.0 PB"
    assert merge_dicts({"a": {"b": 1}, "c": 2}, {"a": {"d": 3}}) == {"a": {"d": 3, "b": 1}, "c": 2}
    model = nn.Sequential(nn.Linear(2, 3))
    assert recursive_getattr(model, "0.weight").shape == (3, 2)
    assert get_pretty_name(model) == "Sequential" and get_pretty_name(merge_dicts) == "merge_dicts"


def test_children_bottom_up() -> None:
    from overdrive.utils import get_module_children_bottom_up

    model = nn.Sequential(nn.Sequential(nn.Linear(1, 1), nn.ReLU()), nn.Linear(1, 1))
    order = get_module_children_bottom_up(model)
    assert order[-1] is model and order.index(model[0][0]) < order.index(model[0])
    names = [name for name, _ in get_module_children_bottom_up(model, return_fqns=True)]
    assert names[-1] == "" and set(names) == {"", "0", "0.0", "0.1", "1"}


def test_ports() -> None:
    from overdrive.utils import is_port_in_use
    from overdrive.utils.other import get_free_port

    with socket.socket() as server:
        server.bind(("localhost", 0))
        server.listen()
        assert is_port_in_use(server.getsockname()[1])
    port = get_free_port()
    assert 0 < port < 65536 and not is_port_in_use(port)


def test_clean_state_dict_keeps_one_name_per_storage(caplog: pytest.LogCaptureFixture) -> None:
    from overdrive.utils import clean_state_dict_for_safetensors

    weight = torch.ones(4, 2)
    state = {"emb": weight, "head": weight, "other": torch.zeros(2).t(), "meta": "8bit"}
    cleaned = clean_state_dict_for_safetensors(state)
    assert set(cleaned) == {"emb", "other", "meta"} and "head" not in state
    assert "Removed shared tensor {'head'}" in caplog.text


def test_load_rebuilds_tensors_and_numpy_but_no_other_objects(tmp_path: Path) -> None:
    import numpy as np

    from overdrive.utils import load

    before = torch.serialization.get_safe_globals()
    good = tmp_path / "good.pt"
    torch.save({"t": torch.arange(3), "rng": np.random.get_state()}, good)
    loaded = load(good)
    assert torch.equal(loaded["t"], torch.arange(3)) and loaded["rng"][0] == "MT19937"
    bad = tmp_path / "bad.pt"
    torch.save({"obj": argparse.Namespace(a=1)}, bad)
    with pytest.raises(Exception, match="Weights only load failed"):
        load(bad)
    assert load(bad, weights_only=False)["obj"].a == 1  # the caller's explicit choice
    after = torch.serialization.get_safe_globals()
    assert np.ndarray not in before and np.ndarray not in after  # allowed for the call only


def test_regional_compilation_compiles_each_block_and_unwraps() -> None:
    from overdrive.utils import (
        compile_regions,
        compile_regions_deepspeed,
        has_compiled_regions,
        is_compiled_module,
    )
    from overdrive.utils.other import extract_model_from_parallel, has_repeated_blocks

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))
            self.head = nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for block in self.blocks:
                x = block(x)
            return self.head(x)

    net = Net()
    assert has_repeated_blocks(net) and not has_compiled_regions(net)
    compiled = compile_regions(net, backend="eager")
    assert (
        compiled is not net and not is_compiled_module(compiled) and has_compiled_regions(compiled)
    )
    assert all(is_compiled_module(block) for block in compiled.blocks)
    assert is_compiled_module(compiled.head) and not has_compiled_regions(net)
    assert len(list(compiled.parameters())) == len(list(net.parameters()))
    assert compiled.head._orig_mod is net.head  # the blocks are wrapped, not copied
    assert extract_model_from_parallel(compiled, keep_torch_compile=False) is net
    kept = extract_model_from_parallel(compiled)
    assert kept is compiled and "_orig_mod" not in dict(kept.named_children())
    in_place = Net()
    compile_regions_deepspeed(in_place, backend="eager")
    assert in_place.blocks[0]._compiled_call_impl is not None


def test_model_has_dtensor_and_wait_for_everyone() -> None:
    from overdrive.utils import model_has_dtensor, wait_for_everyone

    assert model_has_dtensor(nn.Linear(2, 2)) is False
    wait_for_everyone()  # one process: returns at once


# --------------------------------------------------------------------------- launch
def test_launch_environment_helpers(monkeypatch: pytest.MonkeyPatch) -> None:
    from overdrive.utils.launch import (
        env_var_path_add,
        prepare_extend_env_parallelism_config,
        setup_fp8_env,
    )

    monkeypatch.setenv("SOME_PATH", "/a::/b")
    assert env_var_path_add("SOME_PATH", "/c") == "/a:/b:/c" and os.environ["SOME_PATH"] == "/a::/b"
    args = argparse.Namespace(
        fp8_backend="te", fp8_margin=None, fp8_override_linear_precision=(True, False, True), lr=1
    )
    env = setup_fp8_env(args, {})
    assert env == {
        "ACCELERATE_FP8_BACKEND": "te",
        "ACCELERATE_FP8_OVERRIDE_FPROP": "True",
        "ACCELERATE_FP8_OVERRIDE_DGRAD": "False",
        "ACCELERATE_FP8_OVERRIDE_WGRAD": "True",
    }
    names = ("dp_replicate_size", "dp_shard_size", "tp_size", "cp_size", "cp_backend", "sp_size",
             "sp_backend", "cp_comm_strategy", "sp_seq_length", "sp_seq_length_is_variable",
             "sp_attn_implementation")  # fmt: skip
    values = dict.fromkeys(names, 1) | {"cp_size": 2, "cp_comm_strategy": "alltoall"}
    env = prepare_extend_env_parallelism_config(
        argparse.Namespace(**{f"parallelism_config_{k}": v for k, v in values.items()}), {}
    )
    assert env["ACCELERATE_USE_PARALLELISM_CONFIG"] == "true"
    assert env["PARALLELISM_CONFIG_CP_SIZE"] == "2"
    assert env["PARALLELISM_CONFIG_CP_COMM_STRATEGY"] == "alltoall"
    assert "PARALLELISM_CONFIG_SP_SEQ_LENGTH" not in env  # sp_size 1


def test_prepare_for_launch_sets_the_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    from overdrive.utils import PrepareForLaunch

    seen: list[Any] = []
    for name in ("LOCAL_RANK", "RANK", "FORK_LAUNCHED"):
        monkeypatch.setenv(name, "unset")  # restored (or removed) after the test
    monkeypatch.setenv("NPROC", "4")
    monkeypatch.setenv("NODE_RANK", "1")
    PrepareForLaunch(lambda *a: seen.append(a), distributed_type="MULTI_CPU")(2, "x", 3)
    assert seen == [("x", 3)]
    assert (os.environ["LOCAL_RANK"], os.environ["RANK"], os.environ["FORK_LAUNCHED"]) == (
        "2",
        "6",
        "1",
    )
    with pytest.raises(ValueError):
        PrepareForLaunch(print, distributed_type="NOT_A_TYPE")


def test_deepspeed_launch_command_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from overdrive.commands.launch import _validate_launch_command, launch_command_parser
    from overdrive.utils import prepare_deepspeed_cmd_env

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    parser = launch_command_parser()
    args = parser.parse_args(
        ["--cpu", "--num_processes", "2", "--main_process_port", "0", "t.py", "--lr", "1"]
    )
    command, env = prepare_deepspeed_cmd_env(args)
    assert command[0] == sys.executable and command[-3:] == ["t.py", "--lr", "1"]
    assert env["ACCELERATE_USE_DEEPSPEED"] == "true" and env["DS_ACCELERATOR"] == "cpu"
    assert env["MASTER_PORT"] == args.master_port != "0"
    assert env["PYTHONPATH"].endswith(os.path.abspath("."))
    plain, _, _ = _validate_launch_command(parser.parse_args(["--cpu", "t.py"]))
    with pytest.raises(ValueError, match="pass --use_deepspeed"):
        prepare_deepspeed_cmd_env(plain)


# --------------------------------------------------------------------------- deepspeed
class _Engine:
    def __init__(self) -> None:
        self.calls: list[Any] = []

    def set_gradient_accumulation_boundary(self, is_boundary: bool) -> None:
        self.calls.append(("boundary", is_boundary))

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        self.calls.append(("backward", kwargs))

    def step(self) -> None:
        self.calls.append("step")

    def get_global_grad_norm(self) -> torch.Tensor:
        return torch.tensor(2.5)


def test_engine_wrapper_steps_only_at_the_window_end() -> None:
    from overdrive.utils import DeepSpeedEngineWrapper

    engine = _Engine()
    wrapper = DeepSpeedEngineWrapper(engine)
    wrapper.backward(torch.tensor(1.0), sync_gradients=False, retain_graph=True)
    wrapper.backward(torch.tensor(1.0))
    assert engine.calls == [
        ("boundary", False),
        ("backward", {"retain_graph": True}),
        ("boundary", True),
        ("backward", {}),
        "step",
    ]
    assert wrapper.get_global_grad_norm() == 2.5


def test_active_deepspeed_plugin() -> None:
    from overdrive.utils import get_active_deepspeed_plugin

    with pytest.raises(ValueError, match="none were enabled"):
        get_active_deepspeed_plugin(types.SimpleNamespace(distributed_type="MULTI_GPU"))
    first, second = types.SimpleNamespace(selected=False), types.SimpleNamespace(selected=True)
    state = types.SimpleNamespace(
        distributed_type="DEEPSPEED", deepspeed_plugins={"a": first, "b": second}
    )
    assert get_active_deepspeed_plugin(state) is second
    only = types.SimpleNamespace(distributed_type="DEEPSPEED", deepspeed_plugin=first)
    assert get_active_deepspeed_plugin(only) is first


def test_map_pytorch_optim_to_deepspeed(monkeypatch: pytest.MonkeyPatch) -> None:
    from overdrive.utils import map_pytorch_optim_to_deepspeed

    made: list[tuple[str, dict[str, Any]]] = []

    def fake(name: str) -> type:
        class CPUOptimizer:
            def __init__(self, groups: Any, **kwargs: Any) -> None:
                made.append((name, kwargs))

        return CPUOptimizer

    for module, cls in (("adam", "DeepSpeedCPUAdam"), ("adagrad", "DeepSpeedCPUAdagrad")):
        monkeypatch.setitem(
            sys.modules, f"deepspeed.ops.{module}", types.SimpleNamespace(**{cls: fake(cls)})
        )
    params = [nn.Parameter(torch.zeros(1))]
    map_pytorch_optim_to_deepspeed(torch.optim.AdamW(params, lr=0.1, weight_decay=0.2))
    map_pytorch_optim_to_deepspeed(torch.optim.Adam(params, lr=0.3))
    map_pytorch_optim_to_deepspeed(torch.optim.Adagrad(params, lr=0.4))
    assert made == [
        ("DeepSpeedCPUAdam", {"lr": 0.1, "weight_decay": 0.2, "adamw_mode": True}),
        ("DeepSpeedCPUAdam", {"lr": 0.3, "weight_decay": 0, "adamw_mode": False}),
        ("DeepSpeedCPUAdagrad", {"lr": 0.4, "weight_decay": 0, "adamw_mode": False}),
    ]


def test_dummy_scheduler_callable_reaches_deepspeed_initialize() -> None:
    from overdrive.ds.engine import initialize
    from overdrive.ds.finish import _section
    from overdrive.utils import DummyScheduler

    def build(optimizer: Any) -> str:
        return "scheduler"

    scheduler = DummyScheduler("optimizer", 10, 2, build)
    assert scheduler.lr_scheduler_callable is build and scheduler.total_num_steps == 10
    cfg = types.SimpleNamespace(origin="ds.json", sources={})
    _section(cfg, {}, "scheduler", scheduler, DummyScheduler, "DummyScheduler(...)")  # accepted
    with pytest.raises(ConfigError, match="would build the callable's scheduler"):
        _section(
            cfg, {"scheduler": {"type": "WarmupLR"}}, "scheduler", scheduler, DummyScheduler, "x"
        )
    seen: dict[str, Any] = {}
    fake_deepspeed = types.SimpleNamespace(
        initialize=lambda **kw: (seen.update(kw) or "engine", None)
    )
    assert initialize(fake_deepspeed, nn.Linear(1, 1), None, {}, scheduler) == "engine"
    assert seen["lr_scheduler"] is build


# --------------------------------------------------------------------------- dataclasses
def test_enums() -> None:
    from overdrive.bigmodel.custom_dtype import CustomDtype as Engine
    from overdrive.utils import CustomDtype, DynamoBackend, FP8BackendType, SageMakerDistributedType
    from overdrive.utils.dataclasses import BaseEnum

    assert CustomDtype is Engine and CustomDtype.INT4.value == "int4"
    assert "INDUCTOR" in DynamoBackend and "inductor" not in DynamoBackend
    assert str(DynamoBackend.AOT_EAGER) == "AOT_EAGER" and DynamoBackend.list()[0] == "NO"
    assert FP8BackendType("AO") is FP8BackendType.AO
    assert SageMakerDistributedType.DATA_PARALLEL == "DATA_PARALLEL"

    class Colour(BaseEnum):
        RED = "red"

    assert "red" in Colour and "blue" not in Colour and Colour.list() == ["red"]


def test_get_module_class_from_name_and_tensor_information() -> None:
    from overdrive.utils.dataclasses import TensorInformation, get_module_class_from_name

    model = nn.Sequential(nn.Sequential(nn.GELU()), nn.Linear(1, 1))
    assert get_module_class_from_name(model, "GELU") is nn.GELU
    assert get_module_class_from_name(model, "Conv2d") is None
    info = TensorInformation(shape=torch.Size([2]), dtype=torch.float16)
    assert info.shape == (2,) and info.dtype is torch.float16


def test_bnb_config_validates_and_fills_dtypes() -> None:
    from overdrive.utils import BnbQuantizationConfig, CustomDtype

    eight = BnbQuantizationConfig(load_in_8bit=True)
    assert eight.torch_dtype is torch.float16 and eight.target_dtype is torch.int8
    four = BnbQuantizationConfig(load_in_4bit=True, bnb_4bit_compute_dtype="bf16")
    assert four.torch_dtype is torch.bfloat16 and four.target_dtype is CustomDtype.INT4
    for kwargs, message in (
        ({}, "can't be both False"),
        ({"load_in_4bit": True, "load_in_8bit": True}, "can't be both True"),
        ({"load_in_4bit": True, "bnb_4bit_quant_type": "int3"}, r"\['fp4','nf4'\]"),
        ({"load_in_8bit": True, "torch_dtype": "fp64"}, "torch_dtype must be in"),
        ({"load_in_8bit": True, "skip_modules": "lm_head"}, "skip_modules must be a list"),
    ):
        with pytest.raises(ValueError, match=message):
            BnbQuantizationConfig(**kwargs)
    with pytest.warns(UserWarning, match="only be used for model loaded in 8bit"):
        BnbQuantizationConfig(load_in_4bit=True, llm_int8_threshold=4.0)


def test_parallel_handlers_validate(monkeypatch: pytest.MonkeyPatch) -> None:
    from overdrive.utils import (
        DeepSpeedSequenceParallelConfig,
        TorchContextParallelConfig,
        TorchTensorParallelConfig,
        TorchTensorParallelPlugin,
    )

    assert TorchContextParallelConfig().cp_comm_strategy == "allgather"
    monkeypatch.setenv("PARALLELISM_CONFIG_CP_COMM_STRATEGY", "alltoall")
    assert TorchContextParallelConfig().cp_comm_strategy == "alltoall"
    with pytest.raises(ValueError, match="Invalid cp_comm_strategy"):
        TorchContextParallelConfig("ring")
    assert DeepSpeedSequenceParallelConfig().sp_seq_length_is_variable is True
    with pytest.raises(ValueError, match="sp_seq_length` must be provided"):
        DeepSpeedSequenceParallelConfig(sp_seq_length_is_variable=False)
    monkeypatch.setenv("PARALLELISM_CONFIG_SP_SEQ_LENGTH", "256")
    assert DeepSpeedSequenceParallelConfig(sp_seq_length_is_variable=False).sp_seq_length == 256
    with pytest.raises(ValueError, match="'eager' and 'flex_attention' are not supported"):
        DeepSpeedSequenceParallelConfig(sp_attn_implementation="eager")
    with pytest.raises(ValueError, match="Invalid sp_attn_implementation: my_attn"):
        DeepSpeedSequenceParallelConfig(sp_attn_implementation="my_attn")
    assert DeepSpeedSequenceParallelConfig(sp_attn_implementation="kernels-community/flash-attn2")
    with pytest.warns(UserWarning, match="Async tensor parallelism"):
        TorchTensorParallelConfig(enable_async_tp=True)
    assert TorchTensorParallelPlugin(4).tp_size == 4


def test_fp8_recipe_handlers(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torchao.float8")
    from overdrive.precision.fp8 import FP8RecipeKwargs as EngineRecipe
    from overdrive.setup.accelerator_setup import sort_handlers
    from overdrive.utils import AORecipeKwargs, FP8RecipeKwargs, MSAMPRecipeKwargs, TERecipeKwargs

    recipe = AORecipeKwargs()
    assert recipe.config.pad_inner_dim and recipe.config.enable_fsdp_float8_all_gather
    monkeypatch.setenv("ACCELERATE_FP8_PAD_INNER_DIM", "false")
    assert AORecipeKwargs().config.pad_inner_dim is False
    assert sort_handlers([recipe]) == {EngineRecipe: recipe}  # the Accelerator's fp8 uses it
    assert FP8RecipeKwargs(recipe="rowwise").recipe == "rowwise"
    with pytest.raises(ConfigError, match=r"FP8RecipeKwargs\(margin=..., backend=...\)"):
        FP8RecipeKwargs(margin=1, backend="TE")
    with pytest.raises(ImportError, match="TransformerEngine is not available"):
        TERecipeKwargs()
    assert MSAMPRecipeKwargs().opt_level == "O2"
    with pytest.raises(ValueError, match="`opt_level` must be one of O1 or O2"):
        MSAMPRecipeKwargs("O3")
    with pytest.raises(ConfigError, match="not a kwargs handler"):
        sort_handlers([MSAMPRecipeKwargs()])


# --------------------------------------------------------------------------- ao
def _mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.Linear(64, 32), nn.Linear(32, 3)
    )


def test_ao_filters() -> None:
    from overdrive.utils.ao import (
        filter_first_and_last_linear_layers,
        filter_linear_layers,
        find_first_last_linear_layers,
    )

    assert find_first_last_linear_layers(_mlp()) == ("0", "4")
    assert find_first_last_linear_layers(nn.ReLU()) == (None, None)
    assert filter_linear_layers(nn.Linear(32, 64), "2", ["0", "4"])
    assert not filter_linear_layers(nn.Linear(32, 64), "0", ["0", "4"])
    assert not filter_linear_layers(nn.Linear(32, 3), "9", [])  # 3 is not a multiple of 16
    assert filter_first_and_last_linear_layers(nn.Linear(32, 64), "2")


def test_convert_model_to_fp8_ao_keeps_the_first_and_last_linear() -> None:
    float8 = pytest.importorskip("torchao.float8")
    from torchao.float8.float8_linear import Float8Linear

    from overdrive.precision.fp8 import FP8Precision
    from overdrive.utils import AORecipeKwargs, convert_model_to_fp8_ao, has_ao_layers

    model = _mlp()
    assert not has_ao_layers(model)
    convert_model_to_fp8_ao(model, config=float8.Float8LinearConfig(emulate=True))
    assert [isinstance(m, Float8Linear) for m in model] == [False, False, True, True, False]
    assert has_ao_layers(model)
    policy = FP8Precision(
        torch.device("cpu"), AORecipeKwargs(config=float8.Float8LinearConfig(emulate=True))
    )
    converted = policy.convert_module(_mlp())
    assert [isinstance(m, Float8Linear) for m in converted] == [False, False, True, True, False]


# --------------------------------------------------------------------------- bnb, rich
def test_bnb_helpers_without_bitsandbytes() -> None:
    from overdrive.utils import BnbQuantizationConfig, has_4bit_bnb_layers, load_and_quantize_model
    from overdrive.utils.bnb import (
        get_keys_to_not_convert,
        get_parameter_device,
        get_quantized_model_device_map,
        replace_with_bnb_layers,
    )

    if importlib.util.find_spec("bitsandbytes") is not None:
        pytest.skip("bitsandbytes is installed here")
    model = _mlp()
    config = BnbQuantizationConfig(load_in_4bit=True)
    assert get_parameter_device(model) == torch.device("cpu")
    for call in (
        lambda: has_4bit_bnb_layers(model),
        lambda: replace_with_bnb_layers(model, config),
        lambda: load_and_quantize_model(model, config),
    ):
        with pytest.raises(ImportError, match="bitsandbytes"):
            call()
    config.skip_modules, config.keep_in_fp32_modules = ["4"], []
    with pytest.raises(ValueError, match="Some modules are dispatched on the CPU or the disk"):
        get_quantized_model_device_map(model, config, {"0": 0, "2": "cpu"})
    assert get_quantized_model_device_map(model, config, {"0": 0, "4": "cpu"}) == {
        "0": 0,
        "4": "cpu",
    }
    with pytest.raises(ValueError, match="please choose 'auto'"):
        get_quantized_model_device_map(model, config, "everywhere")
    assert get_keys_to_not_convert(model) == ["4"]  # the last child: the head


def test_keys_to_not_convert_include_tied_weights() -> None:
    from overdrive.utils.bnb import get_keys_to_not_convert

    class LM(nn.Module):
        base_model_prefix = "body"

        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Embedding(10, 4)
            self.lm_head = nn.Linear(4, 10, bias=False)
            self.lm_head.weight = self.body.weight

    assert set(get_keys_to_not_convert(LM())) == {"body", "lm_head"}


def test_utils_exposes_bnb_and_rich_installs_tracebacks(monkeypatch: pytest.MonkeyPatch) -> None:
    import overdrive.utils

    assert overdrive.utils.bnb is sys.modules["overdrive.utils.bnb"]
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    monkeypatch.delitem(sys.modules, "overdrive.utils.rich", raising=False)
    importlib.import_module("overdrive.utils.rich")
    assert "rich" in sys.excepthook.__module__
