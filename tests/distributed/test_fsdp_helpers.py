"""save/load_fsdp_model and save/load_fsdp_optimizer (what transformers' Trainer checkpoints an
FSDP run with): pickle-free, and a save of N processes loads under M and under the other
state-dict type, continuing as the saving run did."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.helpers.dist import assert_ok, run_launch

SCRIPT = "fsdp_helpers_roundtrip.py"
FULL, SHARDED = "FULL_STATE_DICT", "SHARDED_STATE_DICT"


def _flags(state_dict_type: str) -> list[str]:
    return [
        *("--use_fsdp", "--fsdp_version", "2"),
        *("--fsdp_transformer_layer_cls_to_wrap", "Block"),
        *("--fsdp_state_dict_type", state_dict_type),
    ]


def _run(out: Path, phase: str, nprocs: int, kind: str, *extra: str) -> str:
    args = ["--out", str(out), "--phase", phase, *extra]
    result = run_launch(SCRIPT, nprocs=nprocs, launch_args=_flags(kind), args=args)
    assert_ok(result)
    return result.stdout


@pytest.mark.distributed
@pytest.mark.parametrize(
    ("saved", "loaded"),
    [
        ((2, SHARDED), (3, SHARDED)),
        pytest.param((2, SHARDED), (2, FULL), marks=pytest.mark.extended),
        pytest.param((2, FULL), (3, SHARDED), marks=pytest.mark.extended),
    ],
    ids=["sharded-2-to-sharded-3", "sharded-2-to-full-2", "full-2-to-sharded-3"],
)
def test_a_save_continues_under_another_layout(
    tmp_path: Path, saved: tuple[int, str], loaded: tuple[int, str]
) -> None:
    _run(tmp_path, "save", *saved)
    ckpt = tmp_path / "ckpt"
    names = sorted(p.name for p in ckpt.iterdir())
    if saved[1] == SHARDED:
        assert names == ["optimizer_0", "pytorch_model_fsdp_0"]
    else:
        assert names == [
            "optimizer_0.json",
            "optimizer_0.safetensors",
            "pytorch_model_fsdp_0.safetensors",
        ]
    assert not list(ckpt.rglob("*.bin")) and not list(ckpt.rglob("*.pt"))
    _run(tmp_path, "load", *loaded)
    after = torch.load(tmp_path / "after.pt")
    got = torch.load(tmp_path / "loaded.pt")
    assert after.keys() == got.keys()
    # The third step depends on Adam's moments: a lost or misplaced optimizer state shows.
    for name in after:
        torch.testing.assert_close(got[name], after[name], rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.distributed
def test_a_model_with_other_names_is_refused_naming_them(tmp_path: Path) -> None:
    _run(tmp_path, "save", 2, SHARDED)
    out = _run(tmp_path, "load", 2, SHARDED, "--renamed")
    refusal = next(line for line in out.splitlines() if line.startswith("REFUSED"))
    assert "out.weight" in refusal and "head.weight" in refusal
    assert "fix: build the model exactly as in the run that saved them" in out
    assert not (tmp_path / "loaded.pt").exists()
