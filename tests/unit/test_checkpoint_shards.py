"""Sharded state files: pieces saved by several ranks, read back in any layout, no pickle.

Ranks are simulated in one process: each "rank" saves LocalShard leaves (the boxes a DTensor
would hold); tests/distributed/test_checkpoint_shards.py does the same with real DTensors.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from overdrive.checkpoint import CheckpointError
from overdrive.checkpoint.serialization import unflatten
from overdrive.checkpoint.shards import LocalShard, load_shards, merge_full, save_shards
from overdrive.cli.main import main
from tests.helpers.dist import REPO, clean_env

W = torch.arange(21.0).reshape(7, 3)
B = torch.arange(5, dtype=torch.bfloat16) / 3


def _rows(t: torch.Tensor, start: int, stop: int) -> LocalShard:
    return LocalShard(t[start:stop], tuple(t.shape), (start,) + (0,) * (t.dim() - 1))


def _optimizer_tree(rank: int) -> dict[str, Any]:
    """Rank ``rank`` of 2: rows 0-3 / 4-6 of W, elements 0-2 / 3-4 of B."""
    w_rows, b_rows = [(0, 4), (4, 7)][rank], [(0, 3), (3, 5)][rank]
    return {
        "state": {
            "layers.0.weight": {"exp_avg": _rows(W, *w_rows), "step": torch.tensor(3.0)},
            0: {"exp_avg_sq": _rows(B, *b_rows), "step": torch.tensor(3.0)},
        },
        "param_groups": [{"lr": 0.1, "betas": (0.9, 0.99), "params": ["layers.0.weight", 0]}],
    }


def _save_two(directory: Path, stem: str = "optimizer_0") -> None:
    for rank in (0, 1):
        save_shards(_optimizer_tree(rank), directory, stem, rank=rank, what="opt", world_size=2)


def _save_model(directory: Path, stem: str = "model_0") -> dict[str, torch.Tensor]:
    """A flat model state dict saved by 2 ranks (W split 4/3, B 3/2, a plain buffer)."""
    full = {"w": W, "b": B, "buf": torch.tensor([1, 2, 3])}
    for rank in (0, 1):
        (w0, w1), (b0, b1) = [(0, 4), (4, 7)][rank], [(0, 3), (3, 5)][rank]
        tree = {"w": _rows(W, w0, w1), "b": _rows(B, b0, b1), "buf": full["buf"]}
        save_shards(tree, directory, stem, rank=rank, what="model 0", world_size=2)
    return full


def _edit_table(path: Path, edit: Any) -> None:
    table = json.loads(path.read_text())
    edit(table)
    path.write_text(json.dumps(table))


def test_pieces_from_two_ranks_load_back_as_the_full_tree(tmp_path: Path) -> None:
    _save_two(tmp_path)
    back = load_shards(tmp_path, "optimizer_0", what="opt")
    state = back["state"]
    assert torch.equal(state["layers.0.weight"]["exp_avg"], W)
    assert state[0]["exp_avg_sq"].dtype == torch.bfloat16 and torch.equal(state[0]["exp_avg_sq"], B)
    assert torch.equal(state[0]["step"], torch.tensor(3.0))
    assert back["param_groups"] == [
        {"lr": 0.1, "betas": (0.9, 0.99), "params": ["layers.0.weight", 0]}
    ]
    # Plain JSON and plain safetensors; rank 1 holds only its own boxes.
    rank1 = json.loads((tmp_path / "optimizer_0.rank1.json").read_text())
    assert rank1["tree"] is None
    assert sorted(c["key"] for c in rank1["chunks"]) == [
        "state/0/exp_avg_sq",
        "state/layers.0.weight/exp_avg",
    ]
    only1 = load_file(str(tmp_path / "optimizer_0.rank1.safetensors"))
    assert torch.equal(only1["state/layers.0.weight/exp_avg"], W[4:])
    assert set(only1) == {"state/0/exp_avg_sq", "state/layers.0.weight/exp_avg"}


def test_any_box_is_assembled_from_the_chunks_of_other_ranks(tmp_path: Path) -> None:
    # Saved as a 2x2 grid of boxes (rows 4/3, columns 2/1) by 4 ranks.
    grid = [(r, c) for r in ((0, 4), (4, 7)) for c in ((0, 2), (2, 3))]
    for rank, ((r0, r1), (c0, c1)) in enumerate(grid):
        piece = LocalShard(W[r0:r1, c0:c1], (7, 3), (r0, c0))
        save_shards({"w": piece}, tmp_path, "m", rank=rank, what="m", world_size=4)
    boxes = [
        ((0, 0), (3, 3)),
        ((3, 0), (3, 3)),
        ((6, 0), (1, 3)),
        ((0, 1), (7, 1)),
        ((3, 1), (2, 2)),
    ]
    boxes.append(((2, 0), (0, 3)))  # an empty box (a rank that holds nothing)
    seen: list[torch.Tensor] = []

    def place(key: str, shape: torch.Size, dtype: torch.dtype, reader: Any) -> str:
        assert (key, shape, dtype) == ("w", torch.Size([7, 3]), torch.float32)
        seen.extend(reader.read(o, s) for o, s in boxes)
        return "placed"

    assert load_shards(tmp_path, "m", what="m", place=place) == {"w": "placed"}
    for ((r, c), (h, w)), got in zip(boxes, seen):
        assert torch.equal(got, W[r : r + h, c : c + w]), (r, c, h, w)


def test_a_box_inside_one_chunk_reads_only_that_chunks_file(tmp_path: Path) -> None:
    _save_model(tmp_path)
    (tmp_path / "model_0.rank1.safetensors").unlink()
    got = {}

    def place(key: str, shape: torch.Size, dtype: torch.dtype, reader: Any) -> None:
        got[key] = reader.read((0,) * len(shape), (2,) + tuple(shape[1:]))

    load_shards(tmp_path, "model_0", what="model 0", place=place)
    assert torch.equal(got["w"], W[:2]) and torch.equal(got["b"], B[:2])
    with pytest.raises(CheckpointError, match=r"model_0\.rank1\.safetensors is not a readable"):
        load_shards(tmp_path, "model_0", what="model 0")


def test_a_replicated_box_is_written_once(tmp_path: Path) -> None:
    for rank in (0, 1):
        tree = {"w": LocalShard(W, (7, 3), (0, 0), write=rank == 0)}
        save_shards(tree, tmp_path, "m", rank=rank, what="m", world_size=2)
    assert not (tmp_path / "m.rank1.safetensors").exists()
    assert json.loads((tmp_path / "m.rank1.json").read_text())["chunks"] == []
    assert torch.equal(load_shards(tmp_path, "m", what="m")["w"], W)


def test_a_missing_rank_file_is_named(tmp_path: Path) -> None:
    _save_model(tmp_path)
    (tmp_path / "model_0.rank1.json").unlink()
    with pytest.raises(CheckpointError) as info:
        load_shards(tmp_path, "model_0", what="model 0")
    assert "saved by 2 process(es), but model_0.rank1.json missing" in str(info.value)


def test_a_box_in_no_chunk_names_the_key_and_element(tmp_path: Path) -> None:
    _save_model(tmp_path)

    def drop_w(table: dict[str, Any]) -> None:
        table["chunks"] = [c for c in table["chunks"] if c["key"] != "w"]

    _edit_table(tmp_path / "model_0.rank1.json", drop_w)
    with pytest.raises(CheckpointError) as info:
        merge_full(tmp_path, "model_0", what="model 0")
    text = str(info.value)
    assert "model 0: 'w': element [4, 0]" in text and "is in no saved chunk" in text


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("dtype", "float64", "belongs to a torch.float64 tensor"),
        ("shape", [2, 3], "has shape (3, 3), but its table says (2, 3)"),
        ("dtype", "__class__", "is not a torch dtype"),
        ("offsets", [6, 0], "the box lies outside the tensor"),
    ],
)
def test_a_chunk_that_disagrees_is_refused_naming_the_file(
    tmp_path: Path, field: str, value: Any, expected: str
) -> None:
    _save_model(tmp_path)

    def change(table: dict[str, Any]) -> None:
        next(c for c in table["chunks"] if c["key"] == "w")[field] = value

    _edit_table(tmp_path / "model_0.rank1.json", change)
    with pytest.raises(CheckpointError, match="model_0.rank1") as info:
        merge_full(tmp_path, "model_0", what="model 0")
    assert expected in str(info.value)


class _Payload:
    """Unpickling this creates ``marker``: proof that a file's code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.marker), "w"))


def _check_payload_is_live(tmp_path: Path) -> None:
    probe = tmp_path / "probe"
    pickle.loads(pickle.dumps(_Payload(probe))).close()
    assert probe.exists()


def _plant(directory: Path, how: str, marker: Path) -> None:
    payload = pickle.dumps(_Payload(marker))
    if how == "json":
        (directory / "model_0.rank0.json").write_bytes(payload)
    elif how == "safetensors":
        (directory / "model_0.rank1.safetensors").write_bytes(payload)
    else:  # only pickle files: a torch.save per rank and DCP-style metadata
        for p in directory.iterdir():
            p.unlink()
        torch.save(_Payload(marker), directory / "model_0.rank0.pt")
        (directory / ".metadata").write_bytes(payload)


@pytest.mark.parametrize(
    ("how", "expected"),
    [
        ("json", "cannot read"),
        ("safetensors", "model_0.rank1.safetensors is not a readable safetensors file"),
        ("pt", "holds .metadata, model_0.rank0.pt: pickle files"),
    ],
)
def test_pickle_payloads_in_shard_files_never_run(tmp_path: Path, how: str, expected: str) -> None:
    _check_payload_is_live(tmp_path)
    ckpt, marker = tmp_path / "ckpt", tmp_path / "marker"
    ckpt.mkdir()
    _save_model(ckpt)
    _plant(ckpt, how, marker)
    with pytest.raises(CheckpointError) as info:
        load_shards(ckpt, "model_0", what="model 0")
    assert expected in str(info.value)
    assert not marker.exists()


def test_a_single_file_load_refuses_a_sharded_entry() -> None:
    with pytest.raises(CheckpointError, match="load it with overdrive.checkpoint.shards"):
        unflatten({"w": {"__sharded__": "w", "shape": [2], "dtype": "float32"}}, {}, what="x")


def _checkpoint(directory: Path, parts: list[dict[str, Any]]) -> None:
    manifest = {"format": "overdrive-checkpoint", "version": 1, "parts": parts}
    (directory / "overdrive_checkpoint.json").write_text(json.dumps(manifest))


def _model_part(index: int, **extra: Any) -> dict[str, Any]:
    return {"kind": "model", "index": index, "file": f"model_{index}", "class": "Net", **extra}


def _read_hf(directory: Path) -> dict[str, torch.Tensor]:
    index = directory / "model.safetensors.index.json"
    if not index.exists():
        return load_file(str(directory / "model.safetensors"))
    files = set(json.loads(index.read_text())["weight_map"].values())
    assert len(files) > 1
    return {k: v for f in sorted(files) for k, v in load_file(str(directory / f)).items()}


def test_merge_weights_writes_every_model_in_the_hf_layout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    ckpt.mkdir()
    full = _save_model(ckpt)
    plain = {"head": torch.randn(4, 2, dtype=torch.float16)}
    save_file(plain, str(ckpt / "model_1.safetensors"))
    (ckpt / "model_1.json").write_text(
        json.dumps({"tensors": True, "state": {"head": {"__tensor__": "head"}}})
    )
    parts = [_model_part(0, sharded=True), _model_part(1)]
    _checkpoint(ckpt, [*parts, {"kind": "optimizer", "index": 0, "file": "optimizer_0"}])
    code = main(["merge-weights", str(ckpt), str(out), "--max-shard-size", "64B"])
    assert code == 0, capsys.readouterr().err
    merged = _read_hf(out)  # 84 + 10 + 24 bytes: more than one 64-byte file
    assert merged.keys() == full.keys()
    assert all(torch.equal(merged[k], full[k]) and merged[k].dtype == full[k].dtype for k in full)
    second = load_file(str(out / "model_1" / "model.safetensors"))
    assert second.keys() == plain.keys() and torch.equal(second["head"], plain["head"])
    assert f"model_1: {out / 'model_1'} (model.safetensors)" in capsys.readouterr().out


def test_merge_weights_unsafe_serialization_and_remove_checkpoint_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    ckpt.mkdir()
    full = _save_model(ckpt)
    _checkpoint(ckpt, [_model_part(0, sharded=True)])
    argv = ["merge-weights", str(ckpt), str(out), "--unsafe_serialization"]
    assert main([*argv, "--remove_checkpoint_dir"]) == 0, capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["pytorch_model.bin"]
    merged = torch.load(out / "pytorch_model.bin", weights_only=True)
    assert merged.keys() == full.keys() and all(torch.equal(merged[k], full[k]) for k in full)
    assert not ckpt.exists()


def _cli_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["merge-weights", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("overdrive: error: ") and "Traceback" not in err
    return err


def test_merge_weights_user_errors_exit_2_with_one_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path / "out")
    assert "does not exist" in _cli_error(capsys, str(tmp_path / "nope"), out)
    project = tmp_path / "project" / "checkpoints" / "checkpoint_2"
    project.mkdir(parents=True)
    _checkpoint(project, [{"kind": "optimizer", "index": 0, "file": "optimizer_0"}])
    err = _cli_error(capsys, str(tmp_path / "project"), out)
    assert f"(it has no overdrive_checkpoint.json)\n  fix: did you mean {project}?" in err
    assert "holds no model" in _cli_error(capsys, str(project), out)
    assert "--max_shard_size 'big' is not a size" in _cli_error(
        capsys, str(project), out, "--max_shard_size", "big"
    )
    assert not Path(out).exists()


def test_merge_weights_never_unpickles_a_model_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _check_payload_is_live(tmp_path)
    ckpt, marker = tmp_path / "ckpt", tmp_path / "marker"
    ckpt.mkdir()
    torch.save(_Payload(marker), ckpt / "model_0.bin")
    _checkpoint(ckpt, [_model_part(0)])
    assert "is a pickle file" in _cli_error(capsys, str(ckpt), str(tmp_path / "out"))
    _checkpoint(ckpt, [_model_part(0, sharded=True)])
    assert "model_0.bin: pickle files" in _cli_error(capsys, str(ckpt), str(tmp_path / "out"))
    assert not marker.exists()


def test_the_installed_command_reports_without_a_traceback(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "overdrive", "merge-weights", str(tmp_path / "x"), str(tmp_path)],
        env=clean_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"overdrive: error: merge-weights: {tmp_path / 'x'} does not")
    assert "Traceback" not in done.stderr


def test_a_stored_dtype_that_differs_from_the_target_is_refused(tmp_path: Path) -> None:
    import torch.distributed as dist
    from torch.distributed.tensor import distribute_tensor, init_device_mesh

    from overdrive.checkpoint.shards import dtensor_like, save_shards

    owned = not dist.is_initialized()
    if owned:
        store = dist.FileStore(str(tmp_path / "store"), 1)
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        saved = distribute_tensor(torch.ones(4, 2), mesh)
        save_shards({"w": saved}, tmp_path, "model_0", rank=0, what="model 0")
        template = distribute_tensor(torch.zeros(4, 2, dtype=torch.bfloat16), mesh)

        def place(key: str, shape: torch.Size, dtype: torch.dtype, reader: Any) -> Any:
            return dtensor_like(template, reader)

        with pytest.raises(CheckpointError, match="stored as torch.float32.*does not cast"):
            load_shards(tmp_path, "model_0", what="model 0", place=place)
    finally:
        if owned:
            dist.destroy_process_group()


def test_whole_boxes_and_placeholders_save_and_load_per_stage(tmp_path: Path) -> None:
    """Pipeline stages: each rank writes the tensors it holds whole, placeholders (meta
    data) for the others; a template of the same kind reads its own tensors only."""
    from overdrive.checkpoint.shards import place_like

    def whole(t: torch.Tensor) -> LocalShard:
        return LocalShard(t, tuple(t.shape), (0,) * t.dim())

    def held_elsewhere(t: torch.Tensor) -> LocalShard:
        meta = torch.empty(0, dtype=t.dtype, device="meta")
        return LocalShard(meta, tuple(t.shape), (0,) * t.dim(), write=False)

    step = torch.tensor(4.0)
    trees = [
        {"w": whole(W), "b": held_elsewhere(B), "step": whole(step)},
        {"w": held_elsewhere(W), "b": whole(B), "step": held_elsewhere(step)},
    ]
    for rank, tree in enumerate(trees):
        save_shards(tree, tmp_path, "model_0", rank=rank, what="model 0", world_size=2)
    assert set(load_file(str(tmp_path / "model_0.rank1.safetensors"))) == {"b"}
    full = load_shards(tmp_path, "model_0", what="model 0")
    assert torch.equal(full["w"], W) and torch.equal(full["b"], B) and full["step"] == 4.0
    mine = load_shards(
        tmp_path, "model_0", what="model 0", place=place_like(trees[1], what="model 0")
    )
    assert mine["w"] is None and mine["step"] is None and torch.equal(mine["b"], B)
    wrong = {"b": whole(B.float())}
    with pytest.raises(CheckpointError, match="stored as torch.bfloat16"):
        load_shards(tmp_path, "model_0", what="model 0", place=place_like(wrong, what="m"))
