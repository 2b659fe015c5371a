"""``accelerate.utils.fsdp_utils``, ``compile_regions_fsdp2`` and ``accelerate.inference`` in one
process: each helper does what Hugging Face Accelerate's does (or overdrive's stated rule)."""

from __future__ import annotations

import functools
import inspect
import os
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn

from overdrive.arguments.plugins import FullyShardedDataParallelPlugin
from overdrive.errors import OverdriveError
from overdrive.utils import fsdp_utils


class Block(nn.Module):
    calls = 0

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(6, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        Block.calls += 1
        return torch.tanh(self.lin(x))


class Net(nn.Module):
    _no_split_modules = ["Block"]

    def __init__(self, layers: int = 3) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 6)
        self.layers = nn.ModuleList(Block() for _ in range(layers))
        self.head = nn.Linear(6, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for layer in self.layers:
            h = layer(h)
        return self.head(h)


def _accelerator(plugin: Any) -> Any:
    return SimpleNamespace(state=SimpleNamespace(fsdp_plugin=plugin), device=torch.device("cpu"))


# --- names and parameters ---------------------------------------------------------------
def test_canonicalize_names_drops_wrapper_parts_only() -> None:
    named = {
        "_orig_mod.layers.0._checkpoint_wrapped_module.lin.weight": 1,
        "model._orig_mod.head.bias": 2,
        "plain.orig_modest": 3,
    }
    assert fsdp_utils.fsdp2_canonicalize_names(named) == {
        "layers.0.lin.weight": 1,
        "model.head.bias": 2,
        "plain.orig_modest": 3,
    }


def test_parameters_from_modules_by_pattern_list_or_none() -> None:
    model = Net()
    found = fsdp_utils.get_parameters_from_modules(r"layers\.[01]", model, "cpu")
    assert found == {*model.layers[0].parameters(), *model.layers[1].parameters()}
    # the pattern must match a whole path: "head" matches, "hea" nothing
    assert fsdp_utils.get_parameters_from_modules("hea", model, "cpu") == set()
    assert fsdp_utils.get_parameters_from_modules([model.head], model, "cpu") == set(
        model.head.parameters()
    )
    assert fsdp_utils.get_parameters_from_modules(None, model, "cpu") == set()


# --- wrap policies --------------------------------------------------------------------------
def test_wrap_policy_by_layer_class_names_or_the_models_no_split_modules() -> None:
    model = Net()
    named = FullyShardedDataParallelPlugin(
        auto_wrap_policy="TRANSFORMER_BASED_WRAP", transformer_cls_names_to_wrap=["Linear"]
    )
    chosen = fsdp_utils.fsdp2_prepare_auto_wrap_policy(named, model)
    assert chosen is not None
    assert [n for n, m in model.named_modules() if chosen(m)] == [
        "embed",
        "layers.0.lin",
        "layers.1.lin",
        "layers.2.lin",
        "head",
    ]
    by_default = FullyShardedDataParallelPlugin(auto_wrap_policy="TRANSFORMER_BASED_WRAP")
    chosen = fsdp_utils.fsdp2_prepare_auto_wrap_policy(by_default, model)
    assert chosen is not None and [n for n, m in model.named_modules() if chosen(m)] == [
        "layers.0",
        "layers.1",
        "layers.2",
    ]
    wrong = FullyShardedDataParallelPlugin(
        auto_wrap_policy="TRANSFORMER_BASED_WRAP", transformer_cls_names_to_wrap=["Nope"]
    )
    with pytest.raises(ValueError, match="Nope"):
        fsdp_utils.fsdp2_prepare_auto_wrap_policy(wrong, model)


def test_wrap_policy_by_size_by_torch_functions_and_none() -> None:
    from torch.distributed.fsdp.wrap import (
        size_based_auto_wrap_policy,
        transformer_auto_wrap_policy,
    )

    model = Net()
    sized = FullyShardedDataParallelPlugin(auto_wrap_policy="SIZE_BASED_WRAP", min_num_params=42)
    chosen = fsdp_utils.fsdp2_prepare_auto_wrap_policy(sized, model)
    # more than 42 parameters: a block (42) is not, two blocks' list and the root are
    assert chosen is not None and not chosen(model.layers[0]) and chosen(model.layers)
    torch_fn = SimpleNamespace(
        auto_wrap_policy=functools.partial(
            transformer_auto_wrap_policy, transformer_layer_cls=set()
        ),
        transformer_cls_names_to_wrap=None,
        min_num_params=None,
    )
    chosen = fsdp_utils.fsdp2_prepare_auto_wrap_policy(torch_fn, model)
    assert chosen is not None and chosen(model.layers[1]) and not chosen(model.head)
    torch_size = SimpleNamespace(auto_wrap_policy=size_based_auto_wrap_policy, min_num_params=50)
    chosen = fsdp_utils.fsdp2_prepare_auto_wrap_policy(torch_size, model)
    assert chosen is not None and chosen(model.layers) and not chosen(model.layers[0])
    none = FullyShardedDataParallelPlugin(auto_wrap_policy="NO_WRAP")
    assert fsdp_utils.fsdp2_prepare_auto_wrap_policy(none, model) is None


# --- optimizer, ties, environment, scaler ------------------------------------------------
def test_switch_optimizer_parameters_by_data_ptr_and_refuse_a_missing_one() -> None:
    old = [nn.Parameter(torch.ones(2)), nn.Parameter(torch.ones(3))]
    optimizer = torch.optim.SGD(old, lr=0.1)
    new = [nn.Parameter(torch.zeros(2)), nn.Parameter(torch.zeros(3))]
    fsdp_utils.fsdp2_switch_optimizer_parameters(
        optimizer, {o.data_ptr(): n for o, n in zip(old, new, strict=True)}
    )
    assert optimizer.param_groups[0]["params"][0] is new[0]
    assert optimizer.param_groups[0]["params"][1] is new[1]
    # Accelerate's prepare leaves placeholders whose data_ptr is the old address, an int
    placeholder = torch.empty(1)
    placeholder.data_ptr = new[0].data_ptr()  # type: ignore[method-assign]
    optimizer.param_groups[0]["params"] = [placeholder]
    fsdp_utils.fsdp2_switch_optimizer_parameters(optimizer, {new[0].data_ptr(): old[0]})
    assert optimizer.param_groups[0]["params"] == [old[0]]
    with pytest.raises(KeyError, match="sharded counterpart"):
        fsdp_utils.fsdp2_switch_optimizer_parameters(optimizer, {})


class Tied(nn.Module):
    _tied_weights_keys = ["head.weight"]

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(5, 3)
        self.head = nn.Linear(3, 5, bias=False)
        self.head.weight = self.embed.weight


def test_ensure_weights_retied_ties_again_after_an_init_that_reallocates() -> None:
    model = Tied()

    def reinit(module: nn.Module) -> nn.Module:
        for name, param in list(module.named_parameters(recurse=False)):
            setattr(module, name, nn.Parameter(torch.randn_like(param)))
        return module

    init = fsdp_utils.ensure_weights_retied(reinit, model, torch.device("cpu"))
    for module in (model.embed, model.head):
        init(module)
    assert model.head.weight is model.embed.weight
    untied = Net()
    assert fsdp_utils.ensure_weights_retied(reinit, untied, "cpu") is reinit


def test_ram_efficient_loading_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ACCELERATE_USE_FSDP", "FSDP_CPU_RAM_EFFICIENT_LOADING"):
        monkeypatch.setenv(name, "")  # recorded, so the test's own writes are undone after it
        monkeypatch.delenv(name)
    fsdp_utils.enable_fsdp_ram_efficient_loading()
    assert os.environ["ACCELERATE_USE_FSDP"] == "True"
    assert os.environ["FSDP_CPU_RAM_EFFICIENT_LOADING"] == "True"
    fsdp_utils.disable_fsdp_ram_efficient_loading()
    assert os.environ["FSDP_CPU_RAM_EFFICIENT_LOADING"] == "False"
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "false")
    fsdp_utils.enable_fsdp_ram_efficient_loading()
    assert os.environ["ACCELERATE_USE_FSDP"] == "false"  # an existing choice stays


def test_grad_scaler_takes_its_arguments() -> None:
    scaler = fsdp_utils.get_fsdp2_grad_scaler(device="cpu", init_scale=8.0)
    assert isinstance(scaler, torch.amp.GradScaler) and scaler.get_scale() == 8.0


# --- activation checkpointing ---------------------------------------------------------------
@pytest.mark.parametrize("offload", [False, True], ids=["kept", "offloaded"])
def test_apply_ac_recomputes_the_chosen_layers_and_keeps_names(offload: bool) -> None:
    torch.manual_seed(0)
    plain, checked = Net(), Net()
    checked.load_state_dict(plain.state_dict())
    plugin = FullyShardedDataParallelPlugin(auto_wrap_policy="TRANSFORMER_BASED_WRAP")
    plugin.activation_checkpointing_offload = offload  # type: ignore[attr-defined]
    keys = list(checked.state_dict())
    assert fsdp_utils.fsdp2_apply_ac(_accelerator(plugin), checked) is checked
    assert list(checked.state_dict()) == keys
    x = torch.randn(5, 4)
    plain(x).square().sum().backward()
    Block.calls = 0
    checked(x).square().sum().backward()
    assert Block.calls == 6  # 3 forwards, 3 recomputed in backward
    for (name, a), b in zip(plain.named_parameters(), checked.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, msg=name)


def test_fsdp2_helpers_refuse_an_accelerator_without_fsdp() -> None:
    with pytest.raises(OverdriveError, match="does not run FSDP"):
        fsdp_utils.fsdp2_apply_ac(_accelerator(None), Net())
    with pytest.raises(OverdriveError, match="does not run FSDP"):
        fsdp_utils.fsdp2_prepare_model(_accelerator(None), Net())


# --- loading a full state dict into a sharded model ------------------------------------------
@pytest.mark.usefixtures("one_process_group")
def test_load_full_state_dict_fills_a_meta_model_sharded_by_fsdp2() -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    reference = Net()
    with torch.device("meta"):
        empty = Net()
    mesh = init_device_mesh("cpu", (1,))
    for layer in empty.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(empty, mesh=mesh)
    accelerator = SimpleNamespace(device=torch.device("cpu"), is_main_process=True)
    full = {k: v.double() for k, v in reference.state_dict().items()}  # cast back to fp32
    fsdp_utils.fsdp2_load_full_state_dict(accelerator, empty, full)
    x = torch.randn(3, 4)
    torch.testing.assert_close(empty(x), reference(x))
    assert all(p.dtype == torch.float32 and not p.is_meta for p in empty.parameters())
    with pytest.raises(KeyError, match="head.bias"):
        partial = {k: v for k, v in full.items() if k != "head.bias"}
        fsdp_utils.fsdp2_load_full_state_dict(accelerator, empty, partial)


# --- regional compilation ---------------------------------------------------------------
def test_compile_regions_fsdp2_compiles_each_block_in_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from overdrive.utils import compile_regions_fsdp2

    compiled: list[tuple[nn.Module, dict]] = []
    monkeypatch.setattr(nn.Module, "compile", lambda self, **kw: compiled.append((self, kw)))
    model = Net()
    assert compile_regions_fsdp2(model, mode="max-autotune") is model
    # the blocks one by one, the modules around them whole, the root never
    assert [m for m, _ in compiled] == [model.embed, *model.layers, model.head]
    assert all(kw == {"mode": "max-autotune"} for _, kw in compiled)
    compiled.clear()
    leaf = nn.Linear(2, 2)
    assert compile_regions_fsdp2(leaf) is leaf and [m for m, _ in compiled] == [leaf]


# --- file helpers keep Accelerate's positional order -------------------------------------
@pytest.mark.parametrize(
    ("name", "last"),
    [
        ("save_fsdp_model", ["model_index", "adapter_only", "use_dcp"]),
        ("load_fsdp_model", ["model_index", "adapter_only", "use_dcp"]),
        ("save_fsdp_optimizer", ["optimizer_index", "use_dcp"]),
        ("load_fsdp_optimizer", ["optimizer_index", "adapter_only", "use_dcp"]),
    ],
)
def test_file_helpers_take_use_dcp_last(name: str, last: list[str]) -> None:
    import overdrive.utils as utils

    params = list(inspect.signature(getattr(utils, name)).parameters)
    assert params[-len(last) :] == last
    assert getattr(utils, name) is getattr(fsdp_utils, name)


# --- accelerate.inference in one process --------------------------------------------------
def test_generate_device_map_splits_in_order_into_even_parts() -> None:
    from overdrive.inference import generate_device_map
    from overdrive.parallel.stage_balance import split_points_from_map

    model = Net(layers=4)  # embed 30, each block 42, head 14 parameters
    device_map = generate_device_map(model, 2, no_split_module_classes=["Block"])
    assert device_map == {
        "embed": 0,
        "layers.0": 0,
        "layers.1": 0,
        "layers.2": 1,
        "layers.3": 1,
        "head": 1,
    }
    assert split_points_from_map(model, device_map, 2) == ["layers.2"]
    # without no_split classes a block may be opened to fill a part
    opened = generate_device_map(model, 3)
    assert sorted(set(opened.values())) == [0, 1, 2]
    assert list(opened) == sorted(opened, key=list(opened).index)  # module order kept
    # max_memory decides the parts' sizes (bytes, or strings with units)
    small_first = generate_device_map(model, 2, ["Block"], max_memory={0: "200B", 1: "1KB"})
    assert small_first["embed"] == 0 and small_first["layers.0"] == 1


def test_find_pippy_batch_size_looks_at_args_then_kwargs() -> None:
    from overdrive.inference import find_pippy_batch_size

    assert find_pippy_batch_size((torch.zeros(3, 2),), None) == 3
    assert find_pippy_batch_size(("text", [torch.zeros(5)]), {"x": torch.zeros(7)}) == 5
    assert find_pippy_batch_size((), {"flag": True, "ids": {"a": torch.zeros(4, 1)}}) == 4
    assert find_pippy_batch_size((), {"flag": True}) is None


def test_prepare_pippy_on_one_process_runs_the_model_whole() -> None:
    from overdrive.inference import pippy_forward, prepare_pippy
    from overdrive.utils.other import extract_model_from_parallel

    model = Net()
    x = torch.randn(3, 4)
    want = model(x)
    prepared = prepare_pippy(model, example_args=(x,))
    assert prepared is model and model.pippy_stage is None and model.hf_split_points == []
    torch.testing.assert_close(model(x), want)
    assert pippy_forward(lambda a: a * 2, 1, False, x) is not None
    unwrapped = extract_model_from_parallel(model, keep_fp32_wrapper=False)
    assert unwrapped.forward.__func__ is Net.forward  # the pipeline taken off


def test_build_schedule_refuses_wrong_split_points_before_tracing() -> None:
    from overdrive.parallel.pipeline_inference import build_schedule

    model, cpu = Net(), torch.device("cpu")
    x = (torch.zeros(1, 4),)
    with pytest.raises(OverdriveError, match="1 split points make 2 pipeline stages"):
        build_schedule(model, ["layers.1"], x, None, 1, stage_index=0, num_stages=3, device=cpu)
    with pytest.raises(OverdriveError, match="not modules"):
        build_schedule(model, ["layer.1"], x, None, 1, stage_index=0, num_stages=2, device=cpu)
