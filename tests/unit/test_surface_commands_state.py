"""Hugging Face Accelerate's command modules, core-class signatures, state, tracking, data
loader, optimizer, scheduler and checkpointing names, answered by overdrive."""

from __future__ import annotations

import argparse
import collections
import importlib
import inspect
import json
import os
import pickle
import random
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from torch.utils.data import BatchSampler, DataLoader, RandomSampler

from overdrive.errors import ConfigError


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    for name in list(os.environ):
        if name.startswith(("ACCELERATE_", "OVERDRIVE_", "MLFLOW_", "PARALLELISM_CONFIG_")):
            monkeypatch.delenv(name)


# --- core classes take Hugging Face Accelerate's positional order ---------------------------
def test_accelerator_parameters_follow_accelerate_then_overdrive_keywords() -> None:
    from overdrive.accelerator import Accelerator

    params = inspect.signature(Accelerator).parameters
    positional = [n for n, p in params.items() if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert positional[7:10] == ["fsdp_plugin", "torch_tp_plugin", "megatron_lm_plugin"]
    assert positional[-2:] == ["deepspeed_plugins", "parallelism_config"]
    for name in ("logging_dir", "num_processes", "debug", "config_file"):
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY


def test_plugin_aliases_pick_one_deepspeed_plugin_and_map_the_tp_plugin() -> None:
    from overdrive.arguments.plugins import DeepSpeedPlugin, plugin_aliases

    one = DeepSpeedPlugin(zero_stage=2)
    assert plugin_aliases(None, {"student": one}, None, None) == (one, None)
    assert plugin_aliases(None, one, None, None)[0] is one
    with pytest.raises(ConfigError, match="one of them"):
        plugin_aliases(one, one, None, None)
    with pytest.raises(ConfigError, match="one DeepSpeed configuration"):
        plugin_aliases(None, {"a": one, "b": DeepSpeedPlugin()}, None, None)
    with pytest.raises(TypeError):
        plugin_aliases(None, {"a": object()}, None, None)
    with pytest.warns(FutureWarning, match="ParallelismConfig"):
        _, config = plugin_aliases(None, None, argparse.Namespace(tp_size=2), None)
    assert config is not None and config.tp_size == 2
    with pytest.raises(ConfigError, match="given twice"):
        plugin_aliases(None, None, None, None, both_accumulations=True)


def test_deepspeed_plugin_positional_fields_and_refusals() -> None:
    from overdrive.arguments.plugins import DeepSpeedPlugin

    settings = DeepSpeedPlugin("ds.json", 4, 1.0, 3).to_settings()
    assert settings["deepspeed_config.deepspeed_config_file"] == "ds.json"
    assert settings["deepspeed_config.gradient_accumulation_steps"] == 4
    assert settings["deepspeed_config.zero_stage"] == 3
    nvme = DeepSpeedPlugin(offload_param_nvme_path="/nvme").to_settings()
    assert nvme["deepspeed_config.offload_param_nvme_path"] == "/nvme"
    with pytest.raises(ConfigError, match="enable_msamp"):
        DeepSpeedPlugin(enable_msamp=True).to_settings()
    with pytest.raises(ConfigError, match="is_train_batch_min"):
        DeepSpeedPlugin(is_train_batch_min=False).to_settings()


def test_fsdp_plugin_positional_fields_offload_objects_and_refusals() -> None:
    from torch.distributed.fsdp import CPUOffload

    from overdrive.arguments.plugins import FullyShardedDataParallelPlugin as Plugin

    settings = Plugin(1, "FULL_SHARD", None, "BACKWARD_POST").to_settings()
    assert settings["fsdp_config.fsdp_backward_prefetch"] == "BACKWARD_POST"
    assert Plugin(cpu_offload=CPUOffload(offload_params=True)).cpu_offload is True
    with pytest.raises(ConfigError, match="mixed_precision_policy"):
        Plugin(mixed_precision_policy={"param_dtype": "bf16"}).to_settings()
    with pytest.raises(ConfigError, match="ignored_modules"):
        Plugin(ignored_modules=[torch.nn.Linear(1, 1)]).to_settings()
    with pytest.warns(UserWarning, match="limit_all_gathers"):
        Plugin(limit_all_gathers=False).to_settings()


def test_megatron_plugin_runs_its_degrees_and_refuses_the_library_options() -> None:
    from overdrive.arguments.plugins import MegatronLMPlugin

    settings = MegatronLMPlugin(2, 4).to_settings()
    assert settings["megatron_lm_config.tp_degree"] == 2
    assert settings["megatron_lm_config.pp_degree"] == 4
    assert MegatronLMPlugin(context_parallel_size=1).to_settings()["use_megatron_lm"]
    for field in ({"train_iters": 10}, {"context_parallel_size": 2}, {"lr_decay_style": "cosine"}):
        with pytest.raises(ConfigError, match=next(iter(field))):
            MegatronLMPlugin(**field).to_settings()
    params = inspect.signature(MegatronLMPlugin).parameters
    assert params["pipeline_schedule"].kind is inspect.Parameter.KEYWORD_ONLY


def test_parallelism_config_takes_accelerate_order_and_refuses_sequence_parallel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from overdrive.arguments.plugins import ParallelismConfig

    config = ParallelismConfig(1, 2, 1, 1, None, 2)
    assert (config.sp_size, config.cp_backend, config.sp_backend) == (2, "torch", "deepspeed")
    assert "sp" in config.non_dp_dim_names and config.total_size == 4
    with pytest.raises(ConfigError, match="sp_size"):
        config.to_settings()
    monkeypatch.setenv("PARALLELISM_CONFIG_CP_BACKEND", "other")
    assert ParallelismConfig().cp_backend == "other"
    with pytest.raises(TypeError):
        ParallelismConfig(1, 1, 1, 1, None, 1, None, None, None, None, {"x": "colwise"})


def test_dataloader_configuration_and_partial_state_positional_order() -> None:
    from overdrive.arguments.plugins import DataLoaderConfiguration
    from overdrive.state import PartialState

    assert DataLoaderConfiguration(False, None, True, False, 7).data_seed == 7
    state = PartialState(True, backend="gloo")
    assert state.device == torch.device("cpu") and state.settings["use_cpu"] is True
    with pytest.raises(ConfigError, match="world_size"):
        PartialState(world_size=2)


# --- state ---------------------------------------------------------------------------------
def test_is_initialized_follows_the_accelerator_and_reset() -> None:
    from overdrive.accelerator import Accelerator
    from overdrive.state import AcceleratorState, is_initialized

    AcceleratorState._reset_state()
    assert not is_initialized()
    Accelerator(cpu=True)
    assert is_initialized()
    AcceleratorState._reset_state()
    assert not is_initialized()
    AcceleratorState()  # as in Hugging Face Accelerate, building the state sets it up
    assert is_initialized()
    AcceleratorState._reset_state()


def test_do_nothing_shared_dict_and_a_thread_local_descriptor() -> None:
    from overdrive.state import SharedDict, ThreadLocalSharedDict, do_nothing

    assert do_nothing(1, a=2) is None and SharedDict is dict

    class Holder:
        shared = ThreadLocalSharedDict()

    Holder.shared["main"] = 1
    seen: dict[str, Any] = {}

    def other() -> None:
        seen["other"] = dict(Holder.shared)
        Holder.shared["other"] = 2

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert seen["other"] == {} and Holder.shared == {"main": 1}
    Holder().shared = {"new": 3}
    assert Holder.shared == {"new": 3}


# --- optimizer and scheduler ---------------------------------------------------------------
def test_move_to_device_keeps_container_types() -> None:
    from overdrive.optimizer import move_to_device

    Pair = collections.namedtuple("Pair", "a b")
    moved = move_to_device({"x": Pair(torch.ones(1), [torch.zeros(1)]), "n": 3}, "meta")
    assert isinstance(moved["x"], Pair) and moved["x"].a.device.type == "meta"
    assert moved["x"].b[0].device.type == "meta" and moved["n"] == 3


def test_patch_optimizer_step_records_the_call() -> None:
    from overdrive.optimizer import patch_optimizer_step

    holder = argparse.Namespace(_accelerate_step_called=False)
    patched = patch_optimizer_step(holder, lambda x: x + 1)
    assert patched(1) == 2 and holder._accelerate_step_called


def test_optimizer_built_by_hand_steps_and_skips_an_overflow_with_its_scaler() -> None:
    from overdrive.optimizer import AcceleratedOptimizer
    from overdrive.state import AcceleratorState

    AcceleratorState._reset_state()
    param = torch.nn.Parameter(torch.ones(2))
    scaler = torch.amp.GradScaler("cpu", init_scale=4.0)
    opt = AcceleratedOptimizer(torch.optim.SGD([param], lr=1.0), True, scaler)
    scaler.scale(torch.ones(()))  # as a backward through the scaled loss would
    assert opt.scaler is scaler and opt.gradient_state.sync_gradients
    param.grad = torch.tensor([float("inf"), 1.0])
    opt.step()
    assert opt.step_was_skipped and torch.equal(param.detach(), torch.ones(2))
    assert scaler.get_scale() == 2.0  # backed off after the overflow
    param.grad = torch.tensor([2.0, 2.0])  # scaled by 2: the step uses 1.0
    opt.step()
    assert not opt.step_was_skipped and torch.equal(param.detach(), torch.zeros(2))


def test_scheduler_built_by_hand_takes_one_optimizer_and_split_batches() -> None:
    from overdrive.optimizer import AcceleratedOptimizer
    from overdrive.scheduler import AcceleratedScheduler

    param = torch.nn.Parameter(torch.ones(1))
    opt = AcceleratedOptimizer(torch.optim.SGD([param], lr=1.0), False)
    sched = AcceleratedScheduler(
        torch.optim.lr_scheduler.StepLR(opt.optimizer, 1, 0.5), opt, True, True
    )
    assert sched.steps_per_advance == 1 and sched.split_batches
    param.grad = torch.ones(1)
    opt.step()
    sched.step()
    assert sched.get_last_lr() == [0.5]


# --- data loader ---------------------------------------------------------------------------
def test_get_sampler_and_the_adapter_hold_a_plain_loader() -> None:
    from overdrive.data_loader import DataLoaderAdapter, DataLoaderShard, get_sampler

    plain = DataLoader(list(range(8)), batch_size=2, shuffle=True)
    assert isinstance(get_sampler(plain), RandomSampler)
    sampler_as_batches = DataLoader(
        list(range(8)), sampler=BatchSampler(RandomSampler(range(8)), 2, False), batch_size=None
    )
    assert isinstance(get_sampler(sampler_as_batches), RandomSampler)
    adapter = DataLoaderAdapter(list(range(6)), batch_size=4)
    assert isinstance(adapter, DataLoader) and isinstance(adapter, DataLoaderAdapter)
    assert adapter.batch_size == 4 and len(adapter) == 2
    assert [b.tolist() for b in adapter] == [[0, 1, 2, 3], [4, 5]]
    assert [b.tolist() for b in pickle.loads(pickle.dumps(adapter))] == [[0, 1, 2, 3], [4, 5]]
    assert isinstance(DataLoaderShard(list(range(4)), batch_size=2), DataLoaderAdapter)
    if importlib.util.find_spec("torchdata") is None:
        with pytest.raises(ImportError, match="torchdata"):
            DataLoaderAdapter(list(range(4)), use_stateful_dataloader=True)


def test_seedable_sampler_takes_random_sampler_arguments() -> None:
    from overdrive.data_loader import SeedableRandomSampler

    sampler = SeedableRandomSampler(range(10), False, 5, data_seed=3)
    assert len(sampler) == 5 and sampler.initial_seed == 3
    again = SeedableRandomSampler(data_source=range(10), num_samples=5, data_seed=3)
    assert list(sampler) == list(again)
    with pytest.raises(TypeError, match="twice"):
        SeedableRandomSampler(range(3), data_source=range(3))


def test_loader_shard_moves_through_epochs_and_the_dispatcher_reads_alone() -> None:
    from overdrive.data_loader import (
        DataLoaderDispatcher,
        DataLoaderShard,
        SeedableRandomSampler,
        SkipDataLoader,
    )

    sampler = SeedableRandomSampler(list(range(8)), data_seed=1)
    loader = DataLoaderShard(
        list(range(8)), batch_sampler=BatchSampler(sampler, 4, False), iteration=3
    )
    first = [b.tolist() for b in loader]
    assert (loader.iteration, sampler.epoch) == (4, 4)
    loader.set_epoch(3)
    assert [b.tolist() for b in loader] == first
    assert len(SkipDataLoader(list(range(8)), 1, batch_size=2)) == 3
    dispatcher = DataLoaderDispatcher(list(range(6)), False, 1, batch_size=2)
    assert [b.tolist() for b in dispatcher] == [[2, 3], [4, 5]] and dispatcher.end_of_dataloader
    with pytest.raises(ConfigError, match="slice_fn"):
        DataLoaderDispatcher(list(range(6)), slice_fn=lambda *a, **k: None)


# --- tracking ------------------------------------------------------------------------------
def test_filter_trackers_checks_dedupes_and_needs_a_directory() -> None:
    from overdrive.arguments.enums import LoggerType
    from overdrive.tracking import (
        GeneralTracker,
        TrackerError,
        filter_trackers,
        get_available_trackers,
    )

    available = get_available_trackers()
    assert LoggerType.TENSORBOARD in available and "tensorboard" in available
    assert filter_trackers(None) == []
    with pytest.raises(ValueError, match="requires a `logging_dir`"):
        filter_trackers(["jsonl"])
    assert filter_trackers(["jsonl", "jsonl"], "logs") == ["jsonl"]
    with pytest.raises(ValueError, match="Unsupported logging capability"):
        filter_trackers("nope", "logs")
    with pytest.raises(TrackerError, match="aim tracker is not available"):
        filter_trackers(["aim"], "logs")
    mine = GeneralTracker(_blank=True)
    assert filter_trackers([mine, "all"], "logs") == [mine, *available]


def test_on_main_process_runs_where_the_tracker_says() -> None:
    from overdrive.tracking import on_main_process

    class Mine:
        main_process_only = True
        calls = 0

        @on_main_process
        def log(self) -> int:
            self.calls += 1
            return self.calls

    assert Mine().log() == 1  # one process: it is the main one


def test_trackers_take_accelerate_arguments_and_start_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from overdrive.tracking import MLflowTracker, TensorBoardTracker, WandBTracker

    board = TensorBoardTracker("run", tmp_path)
    assert board.writer is None and not (tmp_path / "run").exists()
    board.start()
    board.log({"loss": 1.0}, step=1)
    board.finish()
    assert any((tmp_path / "run").iterdir())
    assert WandBTracker("project", mode="offline").run is None  # wandb.init waits for start
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "from-env")
    monkeypatch.setenv("MLFLOW_NESTED_RUN", "false")
    monkeypatch.setenv("MLFLOW_TAGS", '{"team": "a"}')
    flow = MLflowTracker("from-code", tmp_path, nested_run=True)
    assert (flow.experiment_name, flow.nested_run, flow.tags) == ("from-env", False, {"team": "a"})
    assert flow.run is None


# --- checkpointing -------------------------------------------------------------------------
def _pieces() -> tuple[torch.nn.Module, Any, Any, Any]:
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1, 0.5)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    sched.step()
    return model, opt, sched, torch.amp.GradScaler("cpu", init_scale=8.0)


def test_accelerator_state_round_trips_without_pickle(tmp_path: Path) -> None:
    from overdrive.checkpointing import load_accelerator_state, save_accelerator_state

    model, opt, sched, scaler = _pieces()
    out = save_accelerator_state(
        str(tmp_path), [model.state_dict()], [opt], [sched], [], 0, 5, scaler
    )
    assert out == tmp_path and {"model.safetensors", "optimizer.json", "random_states_0.json"} <= {
        p.name for p in tmp_path.iterdir()
    }
    assert not [p for p in tmp_path.iterdir() if p.suffix in (".bin", ".pkl", ".pt")]
    expected = (random.random(), np.random.rand(), torch.rand(1))
    fresh, fresh_opt, fresh_sched, fresh_scaler = _pieces()
    overrides = load_accelerator_state(
        str(tmp_path), [fresh], [fresh_opt], [fresh_sched], [], 0, fresh_scaler
    )
    assert overrides == {"step": 5}
    assert (random.random(), np.random.rand()) == expected[:2] and torch.equal(
        torch.rand(1), expected[2]
    )
    assert torch.equal(fresh.weight, model.weight)
    assert fresh_sched.get_last_lr() == sched.get_last_lr()
    momentum = opt.state_dict()["state"][0]["momentum_buffer"]
    assert torch.equal(fresh_opt.state_dict()["state"][0]["momentum_buffer"], momentum)
    with pytest.raises(TypeError, match="map location"):
        load_accelerator_state(str(tmp_path), [], [], [], [], 0, map_location="gpu")
    with pytest.raises(ConfigError.__mro__[1], match="data only"):
        load_accelerator_state(
            str(tmp_path), [], [], [], [], 0, load_kwargs={"weights_only": False}
        )


def test_accelerate_written_pickles_load_as_data_only(tmp_path: Path) -> None:
    from overdrive.checkpointing import load_accelerator_state

    model, opt, _, _ = _pieces()
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    torch.save(opt.state_dict(), tmp_path / "optimizer.bin")
    rng = {"step": 9, "random_state": random.getstate(), "numpy_random_seed": np.random.get_state()}
    torch.save(
        {**rng, "torch_manual_seed": torch.get_rng_state()}, tmp_path / "random_states_0.pkl"
    )
    expected = random.random()
    fresh, fresh_opt, _, _ = _pieces()
    assert load_accelerator_state(str(tmp_path), [fresh], [fresh_opt], [], [], 0) == {"step": 9}
    assert random.random() == expected and torch.equal(fresh.bias, model.bias)


def test_custom_state_round_trips_and_refuses_a_pickle(tmp_path: Path) -> None:
    from overdrive.checkpoint.errors import UnsafeCheckpointError
    from overdrive.checkpointing import load_custom_state, save_custom_state

    class Counter:
        def __init__(self, n: int) -> None:
            self.n, self.t = n, torch.full((2,), float(n))

        def state_dict(self) -> dict[str, Any]:
            return {"n": self.n, "t": self.t}

        def load_state_dict(self, state: dict[str, Any]) -> None:
            self.n, self.t = state["n"], state["t"]

    save_custom_state(Counter(4), str(tmp_path), 1)
    back = Counter(0)
    load_custom_state(back, str(tmp_path), 1)
    assert back.n == 4 and torch.equal(back.t, torch.full((2,), 4.0))
    # Hugging Face Accelerate's file: plain data loads as there, without unpickling code.
    torch.save({"n": 7, "t": torch.zeros(2)}, tmp_path / "custom_checkpoint_2.pkl")
    plain = Counter(0)
    load_custom_state(plain, str(tmp_path), 2)
    assert plain.n == 7
    torch.save({"n": 8, "t": Path("x")}, tmp_path / "custom_checkpoint_3.pkl")
    with pytest.raises(UnsafeCheckpointError, match="names pathlib"):
        load_custom_state(Counter(0), str(tmp_path), 3)
    trusted = Counter(0)
    load_custom_state(trusted, str(tmp_path), 3, allow_unsafe_pickle=True)
    assert trusted.n == 8


# --- launchers and memory_utils --------------------------------------------------------------
def test_test_launch_makes_a_state_and_memory_utils_warns() -> None:
    from overdrive.launchers import debug_launcher, notebook_launcher, test_launch
    from overdrive.state import PartialState

    assert isinstance(test_launch(), PartialState) and callable(debug_launcher)
    assert notebook_launcher.__module__ == "overdrive.launch.notebook"
    sys.modules.pop("overdrive.memory_utils", None)
    with pytest.warns(FutureWarning, match="utils.memory"):
        importlib.import_module("overdrive.memory_utils")


# --- commands ------------------------------------------------------------------------------
def test_custom_parser_takes_both_spellings_and_notes_what_was_given() -> None:
    from overdrive.commands.utils import CustomArgumentGroup, CustomArgumentParser

    parser = CustomArgumentParser(allow_abbrev=False)
    parser.add_argument("--num_processes", type=int, default=1)
    group = parser.add_argument_group("switches")
    assert isinstance(group, CustomArgumentGroup)
    group.add_argument("--use_cpu", action="store_true")
    args = parser.parse_args(["--num-processes", "3", "--use-cpu"])
    assert (args.num_processes, args.use_cpu, args.nondefault) == (
        3,
        True,
        {"num_processes", "use_cpu"},
    )
    assert not hasattr(parser.parse_args([]), "nondefault")


def test_launch_help_shows_what_the_command_line_selects(monkeypatch: pytest.MonkeyPatch) -> None:
    from overdrive.commands.launch import CustomHelpFormatter, clean_option, launch_command_parser

    assert clean_option("--num-processes=2") == "num_processes" and clean_option("x") is None
    assert clean_option("--fp8_backend_te") == "fp8_backend"
    assert "--zero_stage" in launch_command_parser().format_help()  # not asked: everything
    monkeypatch.setattr(sys, "argv", ["overdrive", "launch", "--use_deepspeed", "--help"])
    text = launch_command_parser().format_help()
    assert "--zero_stage" in text and "--fsdp_version" not in text
    assert "(currently selected)" in text and "--num-processes NUM" not in text
    assert issubclass(CustomHelpFormatter, argparse.HelpFormatter)


def test_named_launchers_go_through_launch_command(monkeypatch: pytest.MonkeyPatch) -> None:
    from overdrive.commands import launch

    seen: list[argparse.Namespace] = []
    monkeypatch.setattr(launch, "launch_command", seen.append)
    args = launch.launch_command_parser().parse_args(["--num_processes", "4", "train.py"])
    launch.simple_launcher(args)
    launch.multi_gpu_launcher(args)
    launch.deepspeed_launcher(args)
    assert [a.num_processes for a in seen] == [1, 4, 4]
    assert seen[2].use_deepspeed and not args.use_deepspeed  # the caller's args are left alone


def test_config_commands_write_files_overdrive_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from overdrive.commands.config import config as config_module
    from overdrive.commands.config import get_config_parser
    from overdrive.commands.config.config_args import (
        ClusterConfig,
        cache_dir,
        default_yaml_config_file,
    )
    from overdrive.config import load_settings

    assert Path(default_yaml_config_file).parent == Path(cache_dir)
    target = tmp_path / "c.yaml"
    parser = get_config_parser()
    args = parser.parse_args(["default", "--config_file", str(target), "--mixed_precision", "bf16"])
    args.func(args)
    args.func(args)
    assert "already exists" in capsys.readouterr().out
    assert load_settings(config_file=str(target), flags={})["mixed_precision"] == "bf16"
    update = parser.parse_args(["update", "--config_file", str(target)])
    update.func(update)
    assert "main_training_function" in yaml.safe_load(target.read_text())
    assert load_settings(config_file=str(target), flags={})["mixed_precision"] == "bf16"
    answers = ClusterConfig("LOCAL_MACHINE", "MULTI_CPU", "no", True, False, num_processes=2)
    monkeypatch.setattr(config_module, "get_user_input", lambda: answers)
    wizard = tmp_path / "w.yaml"
    config_module.config_command(argparse.Namespace(config_file=str(wizard)))
    assert load_settings(config_file=str(wizard), flags={})["num_processes"] == 2


def test_the_accelerate_command_dispatches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from overdrive.commands.accelerate_cli import main

    target = tmp_path / "d.json"
    monkeypatch.setattr(
        sys, "argv", ["accelerate", "config", "default", "--config-file", str(target)]
    )
    main()
    assert json.loads(target.read_text())["compute_environment"] == "LOCAL_MACHINE"
    monkeypatch.setattr(sys, "argv", ["accelerate"])
    with pytest.raises(SystemExit) as caught:
        main()
    assert caught.value.code == 1


def test_estimate_helpers(tmp_path: Path) -> None:
    from overdrive.commands.estimate import (
        check_has_model,
        create_ascii_table,
        create_empty_model,
        estimate_training_usage,
    )

    assert estimate_training_usage(100, "float32") == {
        "model": 100, "optimizer": 200, "gradients": 100, "step": 400,
    }  # fmt: skip
    assert estimate_training_usage(100, "fp8")["gradients"] == 150
    assert set(estimate_training_usage(100, "fp8", "O2").values()) == {-1}
    table = create_ascii_table(["a", "bb"], [["1", "22"]], "a much longer title here")
    lines = table.splitlines()
    assert len({len(line) for line in lines}) == 1 and "a much longer title here" in lines[1]
    error = OSError("x does not appear to have a file named config.json")
    assert check_has_model(error) == "transformers" and check_has_model(KeyError("z")) == "unknown"
    config = {"model_type": "bert", "hidden_size": 8, "num_hidden_layers": 1,
              "num_attention_heads": 2, "intermediate_size": 16, "vocab_size": 30}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    model = create_empty_model(str(tmp_path), "transformers")
    assert {p.device.type for p in model.parameters()} == {"meta"}


def test_to_fsdp2_tables_drive_the_conversion() -> None:
    from overdrive.commands.to_fsdp2 import (
        ARGUMENT_KEY_MAPPING,
        ARGUMENT_VALUE_MAPPING,
        ConversionStatus,
        convert_config_to_fsdp2,
    )

    assert ARGUMENT_KEY_MAPPING["fsdp_use_orig_params"] is ConversionStatus.REMOVED
    assert ARGUMENT_VALUE_MAPPING["fsdp_sharding_strategy"]["SHARD_GRAD_OP"] is False
    with warnings.catch_warnings():
        converted = convert_config_to_fsdp2(
            {
                "fsdp_config": {
                    "fsdp_sharding_strategy": "SHARD_GRAD_OP",
                    "fsdp_use_orig_params": True,
                }
            }
        )
    assert converted["fsdp_config"] == {"fsdp_reshard_after_forward": False, "fsdp_version": 2}


def test_command_modules_have_main_and_description() -> None:
    from overdrive.commands import env, estimate, merge, test
    from overdrive.commands.config import config, default, update

    for module in (env, estimate, merge, test, config):
        assert callable(module.main)
    for module in (merge, config, default, update):
        assert isinstance(module.description, str) and module.description
