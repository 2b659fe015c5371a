"""One decision: ``decide_layout`` returns one frozen ``Decision`` (layout, backend as a
``DistributedType`` member, the chain's settings, the precision owner) that the launcher's
plan carries and every reader in a worker takes; no code outside the settings parser compares
backend names."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from overdrive.compat.properties import PropertiesMixin
from overdrive.config import Settings, load_settings
from overdrive.config.types import DistributedType
from overdrive.memory_estimate import STRATEGIES, ModelSpec, TensorSpec, estimate, layout_of
from overdrive.parallel.decide import Decision, decide_layout
from overdrive.processes.process_state import PartialState
from overdrive.strategies import select_strategy

SRC = Path(__file__).resolve().parents[2] / "src" / "overdrive"
BACKEND_NAMES = {member.value for member in DistributedType}

# Where a backend name may still be compared as text, and why (empty: nowhere). The settings
# parser (config/) turns the setting's text into a member (config/backend.py) and is not
# scanned; enum definitions, constant tables, messages and CLI choices are not comparisons.
ALLOWED: dict[str, str] = {}


def _strings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for element in node.elts for s in _strings(element)]
    return []


def backend_name_comparisons(source: str) -> list[tuple[int, str]]:
    """(line, name) of each comparison, dispatch-table key or ``case`` against a backend name."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Compare):
            names = [s for operand in (node.left, *node.comparators) for s in _strings(operand)]
        elif isinstance(node, ast.Dict):
            names = [s for key in node.keys if key is not None for s in _strings(key)]
        elif isinstance(node, ast.MatchValue):
            names = _strings(node.value)
        found += [(getattr(node, "lineno", 0), n) for n in names if n in BACKEND_NAMES]
    return found


def test_the_scan_sees_every_form_of_comparison() -> None:
    source = (
        'a == "FSDP"\nb in ("NO", "MULTI_CPU")\n"DEEPSPEED" != c\n{"MEGATRON_LM": 1}[d]\n'
        'match e:\n    case "MULTI_GPU":\n        pass\n'
        'f = ("DEEPSPEED", "a message")\ng == DistributedType.FSDP\n'
    )
    assert [n for _, n in backend_name_comparisons(source)] == [
        "FSDP",
        "NO",
        "MULTI_CPU",
        "DEEPSPEED",
        "MEGATRON_LM",
        "MULTI_GPU",
    ]


def test_no_code_outside_the_settings_parser_compares_backend_names() -> None:
    found = []
    paths = sorted(SRC.rglob("*.py"))
    assert len(paths) > 300  # the whole package is scanned
    for path in paths:
        where = str(path.relative_to(SRC))
        if where.startswith("config/") or where in ALLOWED:
            continue
        found += [
            f"{where}:{line}: {name}" for line, name in backend_name_comparisons(path.read_text())
        ]
    assert found == []


def _settings(**code: Any) -> Settings:
    return load_settings(code={"use_cpu": True, **code}, environ={})


def test_the_decision_is_frozen_and_names_the_backend_as_a_member() -> None:
    decision = decide_layout(_settings(distributed_type="DEEPSPEED"), 2)
    assert decision.backend is DistributedType.DEEPSPEED
    assert decision.precision_owner == "DeepSpeed"
    with pytest.raises(dataclasses.FrozenInstanceError):
        decision.backend = DistributedType.FSDP  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        decision.chain.fsdp = True  # type: ignore[misc]
    # automatic settings resolve as a worker resolves them
    assert decide_layout(_settings(), 1).backend is DistributedType.NO
    assert decide_layout(_settings(), 2).backend is DistributedType.MULTI_CPU
    assert decide_layout(_settings(), 2, cuda=True).backend is DistributedType.MULTI_GPU
    fsdp = decide_layout(
        _settings(distributed_type="FSDP", **{"fsdp_config.fsdp_cpu_ram_efficient_loading": True}),
        2,
    )
    assert fsdp.chain.fsdp and fsdp.chain.fill_from_main and fsdp.precision_owner is None


def test_the_launchers_plan_carries_the_decision_a_worker_makes() -> None:
    from overdrive.preflight.launch import plan_launch

    settings = _settings(distributed_type="FSDP", num_processes=4)
    plan = plan_launch(settings, "train.py", environ={}, warn=lambda _: None)
    assert isinstance(plan.decision, Decision)
    assert plan.decision == decide_layout(settings, 4)
    assert plan.layout is plan.decision.layout


def test_partial_state_and_the_accelerator_read_one_decision() -> None:
    from overdrive import Accelerator
    from overdrive.arguments.plugins import ParallelismConfig

    state = PartialState(settings=_settings(), environ={})
    assert state.distributed_type is state.decision.backend is DistributedType.NO

    acc = Accelerator(cpu=True, parallelism_config=ParallelismConfig(dp_shard_size=1))
    decision = acc.state.decision
    assert acc.distributed_type is decision.backend
    assert acc.strategy.topology is not None and acc.strategy.topology.layout is decision.layout
    config = acc.parallelism_config
    assert config is not None
    sizes = {n: getattr(config, f"{n}_size") for n in decision.layout.degrees()}
    assert sizes == decision.layout.degrees()  # cp and pp included
    # computed once: reading it in a training loop rebuilds nothing
    assert all(acc.parallelism_config is config for _ in range(10))
    # the memory estimate takes the same layout
    spec = ModelSpec("test", "Linear", (TensorSpec("w", (8, 8), "w"),))
    ddp = next(s for s in STRATEGIES if s.name == "DDP")
    assert estimate(spec, decision.layout, "fp32", ddp) == estimate(
        spec, layout_of(num_processes=1), "fp32", ddp
    )


def _face(settings: Settings, world: int) -> PropertiesMixin:
    """Accelerate's properties over a state whose decision is ``world`` processes'."""
    face = PropertiesMixin()
    face.settings = settings
    face.state = SimpleNamespace(decision=decide_layout(settings, world))
    face.strategy = SimpleNamespace(tp=None)
    return face


@pytest.mark.parametrize(
    ("code", "degrees"),
    [
        (
            {"parallelism_config.parallelism_config_cp_size": 2, "fsdp_config.fsdp_version": 2},
            {"dp_replicate": 1, "dp_shard": 4, "cp": 2, "pp": 1, "tp": 1},
        ),
        (
            {"parallelism_config.parallelism_config_pp_size": 2, "fsdp_config.fsdp_version": 2},
            {"dp_replicate": 1, "dp_shard": 4, "cp": 1, "pp": 2, "tp": 1},
        ),
    ],
)
def test_parallelism_config_is_a_view_of_the_decision_with_cp_and_pp(
    code: dict[str, Any], degrees: dict[str, int]
) -> None:
    face = _face(_settings(distributed_type="FSDP", mixed_precision="bf16", **code), 8)
    config = face.parallelism_config
    assert config is not None and config.total_size == 8  # type: ignore[attr-defined]
    assert {n: getattr(config, f"{n}_size") for n in degrees} == degrees
    assert face.parallelism_config is config


def test_the_strategy_table_reads_the_decision_not_the_settings() -> None:
    fsdp = decide_layout(_settings(distributed_type="FSDP"), 2)
    state = SimpleNamespace(num_processes=2, device=torch.device("cpu"), decision=fsdp)
    assert select_strategy(state, _settings()).name == "fsdp"
