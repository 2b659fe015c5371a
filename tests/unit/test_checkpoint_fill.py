"""Saved tensors copied straight into the live tensors they restore: only when the whole part
fits, with every check done before the first byte is written, and the same numbers as a read
into fresh memory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from overdrive.checkpoint import io_threads
from overdrive.checkpoint.errors import CheckpointError
from overdrive.checkpoint.fill import fill_all, plan_fill, read_or_fill
from overdrive.checkpoint.shards import LocalShard, save_shards
from overdrive.checkpoint.unread import load_unread

SAVED = torch.arange(48, dtype=torch.float32).reshape(12, 4)


def _two_shards(tmp_path: Path) -> dict:
    """``{"w": SAVED, "b": ..., "lr": 0.1}`` saved by two processes, rows split 5 / 7."""
    splits = [(0, 5), (5, 12)]
    for rank, (lo, hi) in enumerate(splits):
        tree = {
            "w": LocalShard(SAVED[lo:hi].clone(), (12, 4), (lo, 0)),
            "b": LocalShard(torch.full((hi - lo,), float(rank), dtype=torch.float64), (12,), (lo,)),
            "lr": 0.1,
        }
        save_shards(tree, tmp_path, "m", rank=rank, what="m", world_size=2)
    return load_unread(tmp_path, "m", what="m", sharded=True)


def _live() -> dict:
    return {"w": torch.zeros(12, 4), "b": torch.zeros(12, dtype=torch.float64), "lr": 0.5}


def test_a_part_that_fits_is_copied_into_the_live_tensors_across_chunks(tmp_path: Path) -> None:
    live = _live()
    tree, fill = read_or_fill(_two_shards(tmp_path), live)
    assert fill is not None and fill.nbytes == 12 * 4 * 4 + 12 * 8
    assert tree["w"] is live["w"] and tree["lr"] == 0.1  # the saved value, not the live one
    assert not live["w"].any()  # planning wrote nothing
    fill_all([fill])
    assert torch.equal(live["w"], SAVED)
    assert live["b"].tolist() == [0.0] * 5 + [1.0] * 7


def test_a_box_of_another_layout_is_filled_from_the_chunks_it_straddles(tmp_path: Path) -> None:
    mine = torch.zeros(4, 4)  # rows 3..6 of a 3-process layout: straddles rows 5 / 7 of 2
    template = {
        "w": LocalShard(mine, (12, 4), (3, 0)),
        "b": LocalShard(torch.empty(4, dtype=torch.float64, device="meta"), (12,), (3,)),
        "lr": 0.0,
    }
    tree, fill = read_or_fill(_two_shards(tmp_path), template)
    assert fill is not None and tree["b"] is None  # a placeholder reads nothing
    fill_all([fill])
    assert torch.equal(mine, SAVED[3:7])


@pytest.mark.parametrize(
    "change",
    [
        lambda live: live.update(w=torch.zeros(12, 5)),  # another shape
        lambda live: live.update(b=torch.zeros(12, dtype=torch.float32)),  # another dtype
        lambda live: live.pop("lr"),  # another set of keys
        lambda live: live.update(extra=torch.zeros(1)),
    ],
)
def test_a_part_that_differs_anywhere_is_read_the_old_way_and_nothing_is_written(
    tmp_path: Path, change
) -> None:
    live = _live()
    change(live)
    tree, fill = read_or_fill(_two_shards(tmp_path), live)
    assert fill is None
    assert not live["w"].any()  # read into fresh memory: the live tensors are untouched
    assert torch.equal(tree["w"], SAVED)


def test_a_damaged_table_is_refused_while_planning_before_any_write(tmp_path: Path) -> None:
    tree = _two_shards(tmp_path)
    (tmp_path / "m.rank1.safetensors").unlink()
    live = _live()
    with pytest.raises(CheckpointError, match="m.rank1.safetensors"):
        plan_fill(tree, live)
    assert not live["w"].any()


def test_copies_spread_over_threads_give_the_same_bytes(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(io_threads, "io_threads", lambda: 4)
    lives = [_live() for _ in range(3)]
    fills = []
    for live in lives:
        fill = plan_fill(_two_shards(tmp_path), live)
        assert fill is not None
        fills.append(fill)
    fill_all(fills)
    assert all(torch.equal(live["w"], SAVED) for live in lives)


def test_io_threads_take_this_process_share_of_the_cores(monkeypatch) -> None:
    monkeypatch.setattr(io_threads.os, "sched_getaffinity", lambda _: set(range(8)), raising=False)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert io_threads.io_threads() == 8
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert io_threads.io_threads() == 2
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "16")
    assert io_threads.io_threads() == 1


def _trained(tmp_path: Path) -> tuple[Any, Any, Any, Path]:
    from overdrive.accelerator import Accelerator

    torch.manual_seed(0)
    acc = Accelerator(cpu=True)
    model = torch.nn.Linear(4, 3)
    model, opt = acc.prepare(model, torch.optim.AdamW(model.parameters()))

    def step() -> None:
        acc.backward(model(torch.randn(5, 4)).pow(2).sum())
        opt.step()
        opt.zero_grad()

    step()
    path = acc.save_state(tmp_path / "ckpt")
    step()  # the live state moves on from the saved one
    return acc, model, opt, path


def _live_tensors(model: Any, opt: Any) -> list[torch.Tensor]:
    state = opt.optimizer.state
    return [*model.parameters(), *(t for p in model.parameters() for t in state[p].values())]


def test_a_load_mid_training_writes_into_the_live_parameters_and_state(tmp_path: Path) -> None:
    acc, model, opt, path = _trained(tmp_path)
    live = _live_tensors(model, opt)
    pointers = [t.data_ptr() for t in live]
    acc.load_state(path)
    after = _live_tensors(model, opt)
    assert [t.data_ptr() for t in after] == pointers  # the same memory, not new tensors
    saved = load_unread(path, "model_0", what="m", sharded=False)
    for name, p in model.named_parameters():
        assert torch.equal(p, saved[name].reader.read_full())


def test_a_part_restored_the_old_way_is_restored_first(tmp_path: Path) -> None:
    """A part that is not filled may still be refused by its own ``load_state_dict``; the
    filled parts (the model, the optimizer) are written only after it went through."""
    acc, model, opt, path = _trained(tmp_path)

    class Refuses:
        def state_dict(self) -> dict:
            return {"n": 1}

        def load_state_dict(self, state: dict) -> None:
            raise ValueError("not this one")

    acc.register_for_checkpointing(Refuses())
    path = acc.save_state(tmp_path / "ckpt2")
    before = [t.clone() for t in model.parameters()]
    acc.backward(model(torch.randn(5, 4)).pow(2).sum())
    opt.step()
    moved = [t.clone() for t in model.parameters()]
    assert not all(torch.equal(a, b) for a, b in zip(before, moved))
    with pytest.raises(CheckpointError, match="not this one"):
        acc.load_state(path)
    assert all(torch.equal(a, b) for a, b in zip(moved, model.parameters()))
