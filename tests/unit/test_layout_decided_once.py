"""The layout is decided once, and every mesh is built by one piece of code: a strategy's
``Topology`` and ``ParallelismConfig.build_device_mesh`` name and order their dimensions alike
(Hugging Face Accelerate's order, the pipeline outermost)."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from overdrive.arguments.plugins import ParallelismConfig
from overdrive.config import Settings, load_settings
from overdrive.parallel.decide import decide_layout
from overdrive.parallel.layout import ParallelLayout
from overdrive.parallel.mesh_shape import mesh_shape
from overdrive.parallel.topology import Topology
from overdrive.strategies import StrategyOptions, select_strategy

SRC = Path(__file__).resolve().parents[2] / "src"


def _call_sites(name: str) -> dict[str, int]:
    """Source file (relative to src/) -> how many calls of ``name`` it makes."""
    sites: dict[str, int] = {}
    for path in sorted(SRC.rglob("*.py")):
        calls = sum(
            1
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call)
            and (
                (isinstance(node.func, ast.Name) and node.func.id == name)
                or (isinstance(node.func, ast.Attribute) and node.func.attr == name)
            )
        )
        if calls:
            sites[str(path.relative_to(SRC))] = calls
    return sites


def test_the_layout_is_decided_at_one_call_site() -> None:
    # layout_from_settings runs in one place, decide_layout; the launcher's plan (which hands
    # the decision to preflight's checks and the dry run) and a worker's PartialState (whose
    # decision select_strategy reads) each ask it once
    assert _call_sites("layout_from_settings") == {"overdrive/parallel/decide.py": 1}
    assert _call_sites("decide_layout") == {
        "overdrive/launch/plan.py": 1,
        "overdrive/processes/process_state.py": 1,
    }


def test_the_launchers_plan_carries_the_layout_a_worker_decides() -> None:
    from overdrive.errors import ConfigError
    from overdrive.preflight.launch import plan_launch

    def settings(**code: Any) -> Settings:
        given = {"distributed_type": "FSDP", "use_cpu": True, "num_processes": 4, **code}
        return load_settings(code=given, environ={})

    plan = plan_launch(settings(), "train.py", environ={}, warn=lambda _: None)
    assert plan.layout == ParallelLayout(dp_shard=4)
    topology = select_strategy(_state(4, settings()), settings()).topology
    assert topology is not None and topology.layout == plan.layout
    # a layout that does not factor is refused alike, before and in a worker
    odd = {
        "fsdp_config.fsdp_sharding_strategy": "HYBRID_SHARD",
        "parallelism_config.parallelism_config_dp_shard_size": 3,
    }
    with pytest.raises(ConfigError) as launcher:
        plan_launch(settings(**odd), "train.py", environ={}, warn=lambda _: None)
    with pytest.raises(ConfigError) as worker:
        decide_layout(settings(**odd), 4)  # what a worker's PartialState asks
    assert "does not fit 4 processes" in str(launcher.value)
    assert str(launcher.value) == str(worker.value)
    assert launcher.value.key == worker.value.key


def test_the_call_site_counter_counts_calls_not_names() -> None:
    tree = ast.parse("from m import f\nf(1)\nm.f(2)\ng = f\n")
    assert sum(isinstance(n, ast.Call) for n in ast.walk(tree)) == 2


@pytest.mark.parametrize(
    "sizes",
    [
        {"dp_replicate": 2, "dp_shard": 2, "tp": 2},
        {"dp_shard": 4, "cp": 2, "tp": 2},
        {"dp_replicate": 2, "dp_shard": 2, "cp": 2},
        {"pp": 2, "dp_shard": 2, "tp": 2},
        {"dp_shard": 8},
    ],
)
def test_parallelism_config_and_the_layout_name_the_mesh_alike(sizes: dict[str, int]) -> None:
    config = ParallelismConfig(**{f"{n}_size": d for n, d in sizes.items()})
    layout = ParallelLayout(**sizes)
    assert config._get_mesh() == layout.mesh_dims() == mesh_shape(sizes)
    names = config._get_mesh()[0]
    assert list(names) == sorted(names, key=["pp", "dp_replicate", "dp_shard", "cp", "tp"].index)


def test_the_order_is_accelerates_with_sequence_parallelism_before_tp() -> None:
    # Hugging Face Accelerate 1.15: dp_replicate, dp_shard, cp, sp, tp
    config = ParallelismConfig(dp_shard_size=2, cp_size=2, sp_size=2, tp_size=2)
    assert config._get_mesh() == (("dp_shard", "cp", "sp", "tp"), (2, 2, 2, 2))
    # a layout keeps dp_shard at 1 (FSDP2's replicate-only mesh); the config drops it
    assert ParallelLayout(dp_replicate=2).mesh_dims() == (("dp_replicate", "dp_shard"), (2, 1))
    assert ParallelismConfig(dp_replicate_size=2)._get_mesh() == (("dp_replicate",), (2,))


class _FakeMesh:
    """Stands in for a ``DeviceMesh``: records the sub-meshes flattened."""

    def __init__(self, flattened: list[tuple[Any, str]]) -> None:
        self.flattened = flattened

    def __getitem__(self, dims: Any) -> _FakeMesh:
        mesh = _FakeMesh(self.flattened)
        mesh._dims = dims  # type: ignore[attr-defined]
        return mesh

    def _flatten(self, name: str) -> None:
        self.flattened.append((self._dims, name))  # type: ignore[attr-defined]


def test_build_device_mesh_and_the_topology_build_through_the_same_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch.distributed.device_mesh as device_mesh

    made: list[tuple[str, tuple[int, ...], tuple[str, ...]]] = []
    flattened: list[tuple[Any, str]] = []

    def init_device_mesh(device_type: str, shape: Any, *, mesh_dim_names: Any) -> _FakeMesh:
        made.append((device_type, tuple(shape), tuple(mesh_dim_names)))
        return _FakeMesh(flattened)

    monkeypatch.setattr(device_mesh, "init_device_mesh", init_device_mesh)
    sizes = {"dp_replicate": 2, "dp_shard": 2, "tp": 2}
    ParallelismConfig(dp_replicate_size=2, dp_shard_size=2, tp_size=2).build_device_mesh("cpu")
    assert Topology(ParallelLayout(**sizes), "cpu").mesh is not None
    assert made == [("cpu", (2, 2, 2), ("dp_replicate", "dp_shard", "tp"))] * 2
    # Accelerate's flattened dimensions, on the config's mesh only
    assert flattened == [
        (("dp_replicate", "dp_shard"), "dp"),
        (("dp_shard",), "dp_shard_cp"),
        (("dp_replicate", "dp_shard"), "dp_cp"),
    ]


def _state(n: int, settings: Settings) -> SimpleNamespace:
    decision = decide_layout(settings, n)
    return SimpleNamespace(num_processes=n, device=torch.device("cpu"), decision=decision)


@pytest.mark.parametrize(
    ("code", "nprocs", "name", "degrees"),
    [
        ({}, 1, "single", {"dp_replicate": 1}),
        ({}, 4, "ddp", {"dp_replicate": 4}),
        ({"distributed_type": "DEEPSPEED"}, 2, "deepspeed", {"dp_replicate": 2}),
        ({"distributed_type": "FSDP"}, 4, "fsdp", {"dp_shard": 4}),
        (
            {"distributed_type": "MEGATRON_LM", "megatron_lm_config.tp_degree": 2},
            4,
            "tensor_parallel",
            {"dp_replicate": 2, "tp": 2},
        ),
        (
            {
                "distributed_type": "MEGATRON_LM",
                "megatron_lm_config.use_distributed_optimizer": True,
            },
            4,
            "fsdp",
            {"dp_shard": 4},
        ),
        ({"distributed_type": "MEGATRON_LM"}, 1, "single", {"dp_replicate": 1}),
    ],
)
def test_the_table_picks_the_strategy_and_hands_it_the_layouts_topology(
    code: dict[str, Any], nprocs: int, name: str, degrees: dict[str, int]
) -> None:
    settings = load_settings(code=code, environ={})
    strategy = select_strategy(_state(nprocs, settings), settings)
    assert strategy.name == name
    assert strategy.topology is not None
    assert strategy.topology.layout == ParallelLayout(**degrees)


def test_the_mesh_strategy_takes_its_policy_from_the_case() -> None:
    megatron = {"distributed_type": "MEGATRON_LM", "megatron_lm_config.tp_degree": 2}
    megatron_settings = load_settings(code=megatron, environ={})
    replicas = select_strategy(_state(4, megatron_settings), megatron_settings)
    assert replicas.policy.sharding_strategy == "NO_SHARD"  # type: ignore[attr-defined]
    sharded = {**megatron, "megatron_lm_config.use_distributed_optimizer": True}
    sharded_settings = load_settings(code=sharded, environ={})
    zero2 = select_strategy(_state(4, sharded_settings), sharded_settings)
    assert zero2.policy.sharding_strategy == "SHARD_GRAD_OP"  # type: ignore[attr-defined]


def test_in_code_options_reach_the_strategy() -> None:
    from overdrive.arguments.kwargs_handlers import DistributedDataParallelKwargs

    options = StrategyOptions(
        ddp_kwargs=DistributedDataParallelKwargs(bucket_cap_mb=7),
        tp_plan={"fc": "colwise"},
    )
    with pytest.warns(UserWarning, match=r"tp_plan=\.\.\.\) cannot take effect"):
        ddp = select_strategy(
            _state(2, load_settings(environ={})), load_settings(environ={}), options
        )
    assert ddp.ddp_kwargs == {"bucket_cap_mb": 7}  # type: ignore[attr-defined]
    tp = {"distributed_type": "MEGATRON_LM", "megatron_lm_config.tp_degree": 2}
    tp_settings = load_settings(code=tp, environ={})
    split = select_strategy(_state(2, tp_settings), tp_settings, options)
    assert split.tp.plan == {"fc": "colwise"}  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        options.tp_plan = None  # type: ignore[misc]  # frozen: built once, read only


def test_a_pipeline_loss_without_a_pipeline_warns_and_changes_nothing() -> None:
    options = StrategyOptions(pp_loss_fn=lambda out, target: out, pp_split_points=[1])
    with pytest.warns(UserWarning, match=r"ParallelismConfig\(pp_loss_fn=.*there is no pipeline"):
        plain = load_settings(environ={})
        strategy = select_strategy(_state(2, plain), plain, options)
    assert strategy.name == "ddp"
