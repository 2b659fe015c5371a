"""FSDP1 and FSDP2 on CPU processes (gloo): sharding, wrapping and exact training semantics.

Each case launches ``scripts/fsdp_checks.py`` with FSDP settings as launch flags; the script
compares W processes against one process doing the same work (see its docstring).
"""

from __future__ import annotations

import pytest

from tests.helpers.dist import assert_ok, run_launch

SCRIPT = "fsdp_checks.py"
BLOCKS = "blocks.0,blocks.1,blocks.2"
LAYER_WRAP = ["--fsdp_transformer_layer_cls_to_wrap", "Block"]
SIZE_WRAP = ["--fsdp_auto_wrap_policy", "SIZE_BASED_WRAP", "--fsdp_min_num_params", "200"]

CASES = {
    "full-shard-no-wrap": (2, [], ""),
    "full-shard-layer-wrap-3-procs": (3, LAYER_WRAP, BLOCKS),
    "size-wrap": (2, SIZE_WRAP, "blocks.0.fc,blocks.1.fc,blocks.2.fc"),
    "shard-grad-op": (2, ["--fsdp_sharding_strategy", "SHARD_GRAD_OP", *LAYER_WRAP], BLOCKS),
    "no-shard": (2, ["--fsdp_sharding_strategy", "NO_SHARD"], ""),
    "offload-and-activation-checkpointing": (
        2,
        [*LAYER_WRAP, "--fsdp_offload_params", "true", "--fsdp_activation_checkpointing", "true"],
        BLOCKS,
    ),
    # torch.compile is the chain's last step, around the wrapped model (eager: same numbers).
    "compiled": (2, [*LAYER_WRAP, "--dynamo_backend", "eager"], BLOCKS),
    # Regional: each block compiled in place before FSDP wraps it (torchtitan's order).
    "regional-compiled": (
        2,
        [*LAYER_WRAP, "--dynamo_backend", "eager", "--dynamo_use_regional_compilation", "true"],
        BLOCKS,
    ),
    "hybrid-2x2": (
        4,
        ["--fsdp_sharding_strategy", "HYBRID_SHARD", "--parallelism_config_dp_shard_size", "2"],
        "",
    ),
}


# FSDP1 keeps two cases in `make test` (no wrapping; compiled, its chain's last step); its other cases, which FSDP2 runs there,
# run in `make extended`.
FSDP1_IN_MAKE_TEST = {"full-shard-no-wrap", "compiled"}
RUNS = [
    pytest.param(
        case,
        version,
        id=f"{case}-{version}",
        marks=[] if version == 2 or case in FSDP1_IN_MAKE_TEST else [pytest.mark.extended],
    )
    for case in CASES
    for version in (2, 1)
]


@pytest.mark.distributed
@pytest.mark.parametrize(("case", "version"), RUNS)
def test_fsdp_trains_like_one_process(case: str, version: int) -> None:
    nprocs, flags, units = CASES[case]
    result = run_launch(
        SCRIPT,
        nprocs=nprocs,
        launch_args=["--use_fsdp", "--fsdp_version", str(version), *flags],
        args=[units] if units else [],
    )
    assert_ok(result)
    assert f"ALL CHECKS PASSED world={nprocs}" in result.stdout
    assert f"UNITS {units or '-'}" in result.stdout
    compiled = "no" if "--dynamo_backend" not in flags else "whole"
    if "--dynamo_use_regional_compilation" in flags:
        compiled = "regions"
    assert f"COMPILED {compiled}" in result.stdout
    if "--fsdp_activation_checkpointing" in flags:
        assert f"CHECKPOINTED {units}" in result.stdout
