"""FSDP checkpoints on CPU processes: sharded saves reshard onto another world size, full
saves resume bitwise, and merge-weights turns shards into a plain safetensors model."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from overdrive.commands.merge import merge_command, merge_command_parser
from overdrive.utils import merge_fsdp_weights
from tests.helpers.dist import REPO, SCRIPTS, assert_ok, clean_env, run_launch, run_python

SCRIPT = "fsdp_ckpt.py"
LAYERS = ["--fsdp_transformer_layer_cls_to_wrap", "Block"]


def _fsdp(version: int, state_dict_type: str) -> list[str]:
    return [
        *("--use_fsdp", "--fsdp_version", str(version), *LAYERS),
        *("--fsdp_state_dict_type", state_dict_type),
    ]


def _run(
    out: Path, phase: str, nprocs: int, version: int = 2, state_dict_type: str = "", *, ddp=False
) -> None:
    """``fsdp_ckpt.py`` under FSDP (or DDP with ``ddp=True``) on ``nprocs`` processes."""
    flags = [] if ddp else _fsdp(version, state_dict_type)
    result = run_launch(
        SCRIPT, nprocs=nprocs, launch_args=flags, args=["--out", str(out), "--phase", phase]
    )
    assert_ok(result)
    assert f"PHASE DONE {phase} world={nprocs}" in result.stdout


@pytest.fixture(scope="module")
def sharded_fsdp2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of ``fsdp_ckpt.py``'s full FSDP2 run saving sharded state dicts on 2
    processes, launched once: each test below works on its own copy (``_copy``)."""
    out = tmp_path_factory.mktemp("fsdp2-sharded")
    _run(out, "full", 2, 2, "SHARDED_STATE_DICT")
    return out


@pytest.fixture(scope="module")
def ddp_full(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of the same full run under DDP (a whole-model save), launched once."""
    out = tmp_path_factory.mktemp("ddp-full")
    _run(out, "full", 2, ddp=True)
    return out


def _copy(saved: Path, tmp_path: Path) -> Path:
    """``tmp_path`` holding a copy of everything the full run wrote (its checkpoint, its
    save_fsdp_model folder, its weights at the save and at the end)."""
    shutil.copytree(saved, tmp_path, dirs_exist_ok=True)
    return tmp_path


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert sorted(a) == sorted(b)
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.mark.distributed
@pytest.mark.parametrize("version", [2, pytest.param(1, marks=pytest.mark.extended)])
def test_sharded_checkpoint_of_two_resumes_on_three(
    tmp_path: Path, version: int, request: pytest.FixtureRequest
) -> None:
    if version == 2:
        _copy(request.getfixturevalue("sharded_fsdp2"), tmp_path)
    else:
        _run(tmp_path, "full", 2, version, "SHARDED_STATE_DICT")
    files = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    # each process wrote only its own shards; nothing holds the whole model
    for stem in ("model_0", "optimizer_0"):
        assert {f"{stem}.rank0.safetensors", f"{stem}.rank1.safetensors"} <= set(files)
    assert "model_0.safetensors" not in files
    _run(tmp_path, "resume", 3, version, "SHARDED_STATE_DICT")
    full = torch.load(tmp_path / "full.pt")
    resumed = torch.load(tmp_path / "resume.pt")
    # the same global batches on 3 processes instead of 2: only summation order differs
    assert _max_diff(full, resumed) < 1e-6


@pytest.mark.distributed
def test_merge_weights_writes_the_full_model(tmp_path: Path, sharded_fsdp2: Path) -> None:
    _copy(sharded_fsdp2, tmp_path)
    out = tmp_path / "merged"
    result = subprocess.run(
        [sys.executable, "-m", "overdrive", "merge-weights", str(tmp_path / "ckpt"), str(out)],
        env=clean_env(),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    at_save = torch.load(tmp_path / "at_save.pt")
    merged = load_file(out / "model.safetensors")  # plain safetensors, no overdrive needed
    assert _max_diff(merged, at_save) == 0.0
    # Hugging Face Accelerate's spelling: save_fsdp_model's folder, merge_fsdp_weights, and its
    # command's --unsafe_serialization (a .bin that torch.load reads without unpickling code).
    folder = tmp_path / "fsdp_files" / "pytorch_model_fsdp_0"
    assert sorted(p.name for p in folder.iterdir()) == [
        f"model.rank{r}.{ext}" for r in (0, 1) for ext in ("json", "safetensors")
    ]
    assert merge_fsdp_weights(folder, tmp_path / "m1") == ["model.safetensors"]
    assert _max_diff(load_file(tmp_path / "m1" / "model.safetensors"), at_save) == 0.0
    args = merge_command_parser().parse_args(
        [str(folder), str(tmp_path / "m2"), "--unsafe_serialization"]
    )
    assert merge_command(args) == ["pytorch_model.bin"]
    unsafe = torch.load(tmp_path / "m2" / "pytorch_model.bin", weights_only=True)
    assert _max_diff(unsafe, at_save) == 0.0


@pytest.mark.distributed
def test_full_state_dict_checkpoint_resumes_bitwise(tmp_path: Path) -> None:
    _run(tmp_path, "full", 2, 2, "FULL_STATE_DICT")
    names = {p.name for p in (tmp_path / "ckpt").iterdir()}
    assert {"model_0.safetensors", "optimizer_0.safetensors"} <= names
    saved = load_file(tmp_path / "fsdp_files" / "pytorch_model_fsdp_0.safetensors")
    assert _max_diff(saved, torch.load(tmp_path / "at_save.pt")) == 0.0
    _run(tmp_path, "resume", 2, 2, "FULL_STATE_DICT")
    assert _max_diff(torch.load(tmp_path / "full.pt"), torch.load(tmp_path / "resume.pt")) == 0


@pytest.mark.distributed
def test_a_damaged_shard_file_is_refused_naming_it(tmp_path: Path, sharded_fsdp2: Path) -> None:
    _copy(sharded_fsdp2, tmp_path)
    shard = tmp_path / "ckpt" / "optimizer_0.rank1.safetensors"
    data = bytearray(shard.read_bytes())
    data[-3] ^= 0xFF  # a flipped byte inside the tensor data
    shard.write_bytes(bytes(data))
    flags = ["--use_fsdp", "--fsdp_version", "2", *LAYERS]
    flags += ["--fsdp_state_dict_type", "SHARDED_STATE_DICT"]
    args = ["--out", str(tmp_path), "--phase", "resume"]
    result = run_launch(SCRIPT, nprocs=3, launch_args=flags, args=args)
    assert result.returncode != 0
    text = result.stdout + result.stderr
    assert "optimizer_0.rank1.safetensors" in text and "CheckpointError" in text, text[-3000:]


@pytest.mark.distributed
def test_a_damaged_file_that_another_process_checks_restores_nothing_anywhere(
    tmp_path: Path, ddp_full: Path
) -> None:
    """Each file is checked by one process: the one that does not check the damaged model
    file (the optimizer's, larger, is its share) still restores nothing, and both fail."""
    _copy(ddp_full, tmp_path)
    weights = tmp_path / "ckpt" / "model_0.safetensors"
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0xFF  # inside the last tensor's last rows: process 1's shard under FSDP2
    weights.write_bytes(bytes(data))
    result = run_launch(
        SCRIPT,
        nprocs=2,
        launch_args=_fsdp(2, "SHARDED_STATE_DICT"),
        args=["--out", str(tmp_path), "--phase", "damaged"],
    )
    assert_ok(result)
    for rank in (0, 1):
        assert f"UNTOUCHED rank={rank}" in result.stdout, result.stdout
    refusals = [line for line in result.stdout.splitlines() if line.startswith("REFUSED")]
    assert len(refusals) == 2 and all("model_0.safetensors" in r for r in refusals), refusals


# --- one checkpoint, another layout ------------------------------------------------------
# The same global batches (split_batches) on any layout: only the order of summation differs,
# the measured difference of the 2 -> 3 resume above (1e-6) holds for these too. A continuation
# without the optimizer's state (AdamW's moments) ends about 1e-2 away.


@pytest.mark.distributed
def test_fsdp2_sharded_checkpoint_resumes_under_ddp_and_in_one_plain_process(
    tmp_path: Path, sharded_fsdp2: Path
) -> None:
    _copy(sharded_fsdp2, tmp_path)
    full = torch.load(tmp_path / "full.pt")
    _run(tmp_path, "resume", 2, ddp=True)
    assert _max_diff(full, torch.load(tmp_path / "resume.pt")) < 1e-6
    (tmp_path / "resume.pt").unlink()
    plain = run_python(SCRIPTS / SCRIPT, "--out", str(tmp_path), "--phase", "resume")
    assert_ok(plain)
    assert "PHASE DONE resume world=1" in plain.stdout
    assert "saved by 2 process(es) and is resumed by 1" in plain.stderr  # the RNG caveat
    assert _max_diff(full, torch.load(tmp_path / "resume.pt")) < 1e-6


def _tensor_bytes(path: Path, share_of: int = 1) -> int:
    """Bytes of a safetensors file's tensors; with ``share_of=N``, of the largest box a process
    holds when each tensor's rows are split over N (FSDP's Shard(0)), scalars whole."""
    from safetensors import safe_open

    total = 0
    with safe_open(str(path), framework="pt") as f:
        for name in f.keys():  # noqa: SIM118 (a safe_open handle is not iterable)
            t = f.get_slice(name)
            shape = t.get_shape()
            rows = -(-shape[0] // share_of) if shape else 1
            total += rows * math.prod(shape[1:]) * _ITEM_BYTES[t.get_dtype()]
    return total


_ITEM_BYTES = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "I64": 8, "I32": 4, "U8": 1, "BOOL": 1}


@pytest.mark.distributed
def test_ddp_checkpoint_resumes_under_fsdp2_sharded_on_three(
    tmp_path: Path, ddp_full: Path
) -> None:
    _copy(ddp_full, tmp_path)
    ckpt = tmp_path / "ckpt"
    assert (ckpt / "model_0.safetensors").is_file()  # a full, unsharded save
    _run(tmp_path, "resume", 3, 2, "SHARDED_STATE_DICT")
    full, resumed = torch.load(tmp_path / "full.pt"), torch.load(tmp_path / "resume.pt")
    assert _max_diff(full, resumed) < 1e-6
    # Each process read only its rows of the whole-model files (and process 0's own state
    # from the save by 2): never the whole model and optimizer (before, each read it all).
    parts = [ckpt / "model_0.safetensors", ckpt / "optimizer_0.safetensors"]
    whole = sum(_tensor_bytes(p) for p in parts)
    share = sum(_tensor_bytes(p, share_of=3) for p in parts)
    state = ckpt / "rank_0" / "state.safetensors"  # written only when it holds tensors
    own = _tensor_bytes(state) if state.exists() else 0
    assert share < whole * 0.5  # what the bound below tells apart
    for rank in range(3):
        read = int((tmp_path / f"read_bytes.rank{rank}").read_text())
        assert 0 < read <= share + own, (rank, read, share, own, whole)


@pytest.mark.distributed
@pytest.mark.deepspeed
def test_fsdp2_sharded_checkpoint_resumes_under_zero3(tmp_path: Path, sharded_fsdp2: Path) -> None:
    """The optimizer's state by name becomes DeepSpeed's (fp32 masters from the saved model,
    one step per group); DeepSpeed clips by its own setting, the loop's limit."""
    pytest.importorskip("deepspeed")
    from tests.helpers.deepspeed import DS_ENV

    _copy(sharded_fsdp2, tmp_path)
    zero3 = ["--use_deepspeed", "--zero_stage", "3", "--gradient_clipping", "1.0"]
    result = run_launch(
        SCRIPT,
        nprocs=2,
        env=DS_ENV,
        launch_args=zero3,
        args=["--out", str(tmp_path), "--phase", "resume"],
    )
    assert_ok(result)
    full, resumed = torch.load(tmp_path / "full.pt"), torch.load(tmp_path / "resume.pt")
    assert _max_diff(full, {k: v.float() for k, v in resumed.items()}) < 1e-6
