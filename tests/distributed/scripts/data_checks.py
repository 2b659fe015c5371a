"""Process state, collectives and sharded data on 1, 2 or 3 processes (any launcher).

Every process runs every check; any failure raises (non-zero exit). Rank 0 prints
``ORDER <list>`` (the seeded shuffle of epochs 0 and 1) so the test can compare runs.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, IterableDataset

from overdrive.data import gather_for_metrics, prepare_data_loader, skip_first_batches
from overdrive.data.samplers import SeedableRandomSampler
from overdrive.processes import ops
from overdrive.processes.ops import CollectiveMismatchError
from overdrive.processes.random_state import set_seed
from overdrive.state import PartialState
from overdrive.training.loop_state import LoopState

STATE = PartialState()
W, RANK = STATE.num_processes, STATE.process_index
LOOP = LoopState()


class Items(Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        return {"i": i, "x": torch.full((3,), float(i)), "name": f"s{i}"}


class Stream(IterableDataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):
        return (Items(self.n)[i] for i in range(self.n))


def same_everywhere(value: object) -> None:
    everyone = ops.gather_object([value])
    assert all(v == everyone[0] for v in everyone), everyone


def prep(ds, batch_size, **kw):
    loader_kw = {k: kw.pop(k) for k in ("shuffle", "drop_last", "generator") if k in kw}
    dl = DataLoader(ds, batch_size=batch_size, **loader_kw)
    return prepare_data_loader(dl, state=STATE, loop_state=LOOP, device=STATE.device, **kw)


def epoch(dl) -> list[list[int]]:
    return [b["i"].tolist() for b in dl]


# --------------------------------------------------------------------------- state
def check_state() -> None:
    assert STATE.use_distributed == (W > 1)
    assert STATE.backend == ("gloo" if W > 1 else None)
    assert STATE.is_main_process == (RANK == 0)
    again = PartialState()  # reuses the group; no reset needed
    assert (again.process_index, again.num_processes) == (RANK, W)
    again.destroy_process_group()  # did not create it: must leave the group alone
    if W > 1:
        assert dist.is_initialized()
    STATE.wait_for_everyone()

    marker = Path(tempfile.gettempdir()) / f"overdrive-first-{STATE.process_env.master_port}"
    box = ops.broadcast_object_list([str(marker) + f"-{torch.randint(10**9, ()).item()}"])
    marker = Path(box[0])
    with STATE.main_process_first():
        if STATE.is_main_process:
            marker.write_text("main was here")
        else:
            assert marker.read_text() == "main was here"
    STATE.wait_for_everyone()
    if STATE.is_main_process:
        marker.unlink()

    ran = []
    STATE.on_main_process(lambda: ran.append("main"))()
    STATE.on_process(lambda: ran.append("last"), W - 1)()
    assert ran == (["main"] if RANK == 0 else []) + (["last"] if RANK == W - 1 else [])

    with STATE.split_between_processes(list(range(7))) as mine:
        shares = ops.gather_object([mine])
    assert [x for s in shares for x in s] == list(range(7))
    with STATE.split_between_processes({"a": list(range(5)), "b": torch.arange(5)}, True) as mine:
        assert len(mine["a"]) == len(mine["b"]) == -(-5 // W)
        assert mine["a"] == mine["b"].tolist()


# --------------------------------------------------------------------------- ops
def check_ops() -> None:
    data = {"a": torch.full((RANK + 1, 2), float(RANK)), "t": (torch.tensor(RANK), "keep")}
    got = ops.gather(data)
    assert got["a"].shape == (sum(range(1, W + 1)), 2)
    assert got["a"][:, 0].tolist() == [float(r) for r in range(W) for _ in range(r + 1)]
    assert got["t"][0].tolist() == list(range(W)) and got["t"][1] == "keep"

    assert ops.gather_object([RANK, f"r{RANK}"]) == [x for r in range(W) for x in (r, f"r{r}")]
    # more leaves than the size exchange's header holds, each its own first-dim size
    many = {f"k{i}": torch.full((RANK + i + 1,), float(i)) for i in range(ops.SIZE_SLOTS + 3)}
    wide = ops.gather(many)
    for i in range(ops.SIZE_SLOTS + 3):
        assert wide[f"k{i}"].tolist() == [float(i)] * sum(r + i + 1 for r in range(W)), i

    nested = [torch.tensor([1.0, RANK]), {"n": torch.tensor(RANK)}]
    summed = ops.reduce(nested, "sum", debug=True)
    assert summed[0].tolist() == [float(W), float(sum(range(W)))]
    assert summed[1]["n"].item() == sum(range(W))
    assert nested[0].tolist() == [1.0, float(RANK)]  # inputs untouched
    mean = ops.reduce({"v": torch.tensor([2.0 * RANK])}, "mean")
    assert abs(mean["v"].item() - (W - 1)) < 1e-6

    sent = ops.broadcast({"w": torch.full((2,), float(RANK + 5)), "s": "x"}, from_process=W - 1)
    assert sent["w"].tolist() == [float(W + 4)] * 2 and sent["s"] == "x"
    assert ops.broadcast_object_list([{"r": RANK}], from_process=0) == [{"r": 0}]

    padded = ops.pad_across_processes({"p": torch.ones(RANK + 1, 2)}, dim=0, pad_index=-1)
    assert padded["p"].shape == (W, 2)
    assert (padded["p"][RANK + 1 :] == -1).all() and (padded["p"][: RANK + 1] == 1).all()
    first = ops.pad_across_processes(torch.ones(2, RANK + 1), dim=1, pad_first=True)
    assert first.shape == (2, W) and (first[:, : W - RANK - 1] == 0).all()

    if W > 1:
        for call, shape, dtype in (
            (
                lambda: ops.reduce(torch.zeros(RANK + 2), debug=True),
                lambda r: [r + 2],
                lambda r: "float32",
            ),
            (
                lambda: ops.broadcast({"k": torch.zeros(2, RANK + 1)}, debug=True),
                lambda r: [2, r + 1],
                lambda r: "float32",
            ),
            # gather always checks: only dim 0 may differ between ranks
            (
                lambda: ops.gather(torch.zeros(3, RANK + 1)),
                lambda r: [3, r + 1],
                lambda r: "float32",
            ),
            # ... and the structure (another key on the last rank) and the dtypes
            (
                lambda: ops.gather({"a" if RANK < W - 1 else "b": torch.zeros(2)}),
                lambda r: [2],
                lambda r: "float32",
            ),
            (
                lambda: ops.gather(torch.zeros(2, dtype=torch.float32 if RANK else torch.int64)),
                lambda r: [2],
                lambda r: "float32" if r else "int64",
            ),
        ):
            try:
                call()
            except CollectiveMismatchError as exc:
                text = str(exc)
                for r in range(W):  # the message lists every rank's shape and dtype
                    assert f"rank {r}: " in text and f"{shape(r)} {dtype(r)}" in text, text
            else:
                raise AssertionError("a shape mismatch did not raise")
    STATE.wait_for_everyone()  # the group still works after the errors


# --------------------------------------------------------------------------- data
def check_metrics() -> None:
    sizes = sorted({4 * W, 4 * W + 1, 4 * W - 1, 13, 1})
    for n in sizes:
        for even in (True, False):
            for split in (False, True):
                per_mode = {}
                for mode in ("shard", "dispatch", "iterable", "iterable-dispatch"):
                    ds = Stream(n) if mode.startswith("iterable") else Items(n)
                    dl = prep(
                        ds,
                        2 * W if split else 2,
                        split_batches=split,
                        even_batches=even,
                        dispatch_batches=mode.endswith("dispatch"),
                    )
                    local, ids, names, ends = [], [], [], []
                    # even_batches=False: a rank whose share of the last round is empty gets
                    # one batch fewer, so per-batch collectives cannot run; gather at the end.
                    # (Hugging Face Accelerate's dispatcher pads its last round either way)
                    dispatching = mode in ("dispatch", "iterable-dispatch")
                    # an iterable dataset is sharded by sample and always completed
                    # (Hugging Face Accelerate's IterableDatasetShard ignores even_batches)
                    by_sample = mode == "iterable" and W > 1
                    uneven = not even and W > 1 and not dispatching and not by_sample
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")  # the one-batch-fewer warning
                        for batch in dl:
                            local.append(batch["i"].tolist())
                            ends.append(LOOP.end_of_dataloader)
                            if not uneven:
                                ids.append(gather_for_metrics(batch["i"], LOOP))
                                names += gather_for_metrics(batch, LOOP)["name"]
                            if not split and LOOP.batch_index < len(local) - 1:
                                raise AssertionError("batch_index out of step")
                    label = (n, W, even, split, mode)
                    if uneven:
                        counts = ops.gather_object([len(local)])
                        assert max(counts) - min(counts) <= 1, (label, counts)
                        everyone = ops.gather_object([i for b in local for i in b])
                        assert sorted(everyone) == list(range(n)), (label, everyone)
                    elif by_sample:
                        # gather_for_metrics keeps the completion from the first global
                        # batch, as under Hugging Face Accelerate
                        group = 2 * W
                        short = n % group
                        source = list(range(min(n, group)))
                        tail = [source[k % len(source)] for k in range(group - short)]
                        want = list(range(n)) + (tail if short else [])
                        assert torch.cat(ids).tolist() == want, (label, ids)
                        assert names == [f"s{i}" for i in want], (label, names)
                        mine = [want[k : k + 2] for k in range(2 * RANK, len(want), group)]
                        assert local == mine, (label, local)
                    else:
                        assert torch.cat(ids).tolist() == list(range(n)), (label, ids)
                        assert names == [f"s{i}" for i in range(n)], (label, names)
                        same_everywhere(len(local))  # every rank yields the same number
                    assert ends == ([False] * (len(local) - 1) + [True] if local else []), label
                    assert not LOOP.in_dataloader
                    if mode in ("shard", "dispatch"):
                        assert len(dl) == len(local), (label, len(dl), len(local))
                    per_rank = 2 if split else 2
                    assert all(len(b) == per_rank for b in local[:-1]), (label, local)
                    if dispatching and W > 1:
                        # Hugging Face Accelerate's dispatcher splits the last round
                        # ceil(samples / processes) each, padded from the first round
                        last_round = n - (len(local) - 1) * W * per_rank
                        assert len(local[-1]) == -(-last_round // W), (label, local)
                    elif (even or by_sample) and W > 1:
                        assert len(local[-1]) == per_rank, (label, local)
                    else:
                        seen = [i for b in ops.gather_object(local) for i in b]
                        assert sorted(seen) == list(range(n)), (label, seen)  # no duplicates
                    per_mode[mode] = local
                # iterable sharding gives the very same batches but for the last round's
                # completion; dispatch_batches too, but for its last round's padding (Hugging
                # Face Accelerate's dispatcher's split)
                whole = n // (2 * W)
                assert per_mode["iterable"][:whole] == per_mode["shard"][:whole], (n, even, split)
                assert per_mode["iterable-dispatch"] == per_mode["dispatch"], (n, even, split)
                full = len(per_mode["dispatch"]) - (1 if W > 1 and n % (W * per_rank) else 0)
                assert per_mode["dispatch"][:full] == per_mode["shard"][:full], (n, even, split)


def check_batch_sizes() -> None:
    per = prep(Items(8 * W), 4)
    assert (per.batch_size, per.total_batch_size, len(per)) == (4, 4 * W, 2)
    split = prep(Items(8 * W), 4 * W, split_batches=True)
    assert (split.batch_size, split.total_batch_size, len(split)) == (4, 4 * W, 2)
    assert epoch(per) == epoch(split)  # the documented effective batch: the same rounds
    if W > 1:
        try:
            prep(Items(10), 2 * W + 1, split_batches=True)
        except Exception as exc:  # noqa: BLE001 - the type is checked below
            assert type(exc).__name__ == "ConfigError" and "split_batches" in str(exc), exc
        else:
            raise AssertionError("an indivisible split_batches batch size was accepted")


def check_shuffle() -> list[list[int]]:
    set_seed(1234)
    n = 6 * W + 1
    dl = prep(Items(n), 2, shuffle=True, use_seedable_sampler=True)
    e0 = epoch(dl)
    e1 = epoch(dl)  # a new iteration is the next epoch: reshuffled
    for one in (e0, e1):
        everyone = [i for b in ops.gather_object(one) for i in b]
        assert sorted(set(everyone)) == list(range(n)), everyone  # disjoint shards, all seen
    assert e0 != e1
    dl.set_epoch(0)
    assert epoch(dl) == e0  # set_epoch chooses the shuffle
    order = [list(SeedableRandomSampler(range(n), seed=dl.seed)) for _ in range(2)]
    assert order[0] == order[1]
    # a user shuffle=True loader without the seedable option still agrees across ranks
    torch.manual_seed(RANK)  # deliberately different RNGs per rank
    plain = prep(Items(n), 2, shuffle=True)
    everyone = [i for b in ops.gather_object(epoch(plain)) for i in b]
    assert sorted(set(everyone)) == list(range(n)), everyone
    # so does a custom sampler that orders differently on every rank (rank 0's order is sent)
    custom = DataLoader(Items(n), batch_size=2, sampler=torch.randperm(n).tolist())
    mine = epoch(prepare_data_loader(custom, state=STATE, loop_state=LOOP))
    everyone = [i for b in ops.gather_object(mine) for i in b]
    assert sorted(set(everyone)) == list(range(n)), everyone
    return [order[0], list(SeedableRandomSampler(range(n), seed=dl.seed))]


def check_resume() -> None:
    n = 9 * W + 1
    dl = prep(Items(n), 2, shuffle=True, data_seed=7)
    full = [epoch(dl) for _ in range(2)]
    assert len(full[0]) >= 4
    dl.set_epoch(0)
    skipped = skip_first_batches(dl, 3)  # a view of epoch 0, counting its own epochs
    assert len(skipped) == len(full[0]) - 3
    assert epoch(skipped) == full[0][3:]  # skip_first_batches resumes at the right sample
    # ... and, as in Hugging Face Accelerate, the original stays at its own epoch
    assert epoch(dl) == full[0]

    for stop in (0, 2, len(full[0]) - 1):
        first = prep(Items(n), 2, shuffle=True, data_seed=7)
        for k, _ in enumerate(first):
            if k == stop:
                saved = json.loads(json.dumps(first.state_dict()))
                break
        other = prep(Items(n), 2, shuffle=True, data_seed=99)  # seed comes from the state
        other.load_state_dict(saved)
        other.set_epoch(saved["epoch"])  # a loop calling set_epoch keeps the resume position
        if stop == len(full[0]) - 1:  # saved at the last batch: the epoch counts as done
            assert (saved["epoch"], saved["batches_yielded"]) == (1, 0), saved
        else:
            assert epoch(other) == full[0][stop + 1 :], (stop, saved)
        assert epoch(other) == full[1], stop  # later epochs shuffle as uninterrupted

    done = prep(Items(n), 2, data_seed=7)
    epoch(done)
    assert done.state_dict()["epoch"] == 1 and done.state_dict()["batches_yielded"] == 0


def check_rng_types() -> None:
    """rng_types: the named RNGs start every epoch as rank 0's; unnamed ones stay per-rank."""

    def agree(values: list[float]) -> bool:
        everyone = ops.gather_object([values])
        return all(v == everyone[0] for v in everyone)

    for names in ([], ["torch", "generator", "python", "numpy"]):
        torch.manual_seed(100 + RANK)
        gen = torch.Generator().manual_seed(200 + RANK)
        dl = prep(Items(4 * W), 2, generator=gen, rng_types=names)
        for _ in dl:
            pass
        draws = [
            torch.rand(()).item(),
            torch.rand((), generator=gen).item(),
            random.random(),
            float(np.random.rand()),
        ]
        if names:
            assert agree(draws), "rng_types did not synchronise the named RNGs"
        elif W > 1:
            assert not agree(draws[:2]), "RNGs agreed without rng_types: the check is void"


def check_nested_loops() -> None:
    train, evaluate = prep(Items(4 * W), 2), prep(Items(3 * W + 1), 2)
    for k, _ in enumerate(train):
        ends = []
        for _ in evaluate:
            ends.append(LOOP.end_of_dataloader)
        assert ends[-1] and not any(ends[:-1])
        assert LOOP.end_of_dataloader == (k == len(train) - 1)  # back to the outer loader
        assert LOOP.batch_index == k


def main() -> None:
    check_state()
    check_ops()
    check_batch_sizes()
    check_metrics()
    order = check_shuffle()
    check_resume()
    check_nested_loops()
    check_rng_types()
    STATE.wait_for_everyone()
    if STATE.is_main_process:
        print("ORDER", json.dumps(order))
        print(f"ALL CHECKS PASSED on {W} process(es)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
