"""Self-check of the collectives in ``overdrive.utils``: every process asserts the exact
values it receives. Run it alone (``python test_ops.py``), under ``overdrive launch``, or with
``debug_launcher(test_ops.main)``."""

from __future__ import annotations

from collections import namedtuple

import torch

from overdrive import PartialState
from overdrive.test_utils.scripts import check, check_close, check_equal
from overdrive.utils import (
    broadcast,
    broadcast_object_list,
    copy_tensor_to_devices,
    gather,
    gather_object,
    pad_across_processes,
    reduce,
)

Pair = namedtuple("Pair", "first second")


def _rows(start: int, count: int, state: PartialState) -> torch.Tensor:
    """``count`` consecutive floats from ``start`` on this process's device."""
    return torch.arange(start, start + count, dtype=torch.float32, device=state.device)


def check_gather(state: PartialState) -> None:
    r, n = state.process_index, state.num_processes
    check_equal(gather(_rows(3 * r, 3, state)), _rows(0, 3 * n, state), "gather of 3 values")
    scalar = torch.tensor(float(r), device=state.device)
    check_equal(gather(scalar), _rows(0, n, state), "gather of 0-dim tensors (one row each)")
    wide = _rows(4 * r, 4, state).view(2, 2).t()  # not contiguous
    want = torch.cat([_rows(4 * i, 4, state).view(2, 2).t() for i in range(n)])
    check_equal(gather(wide), want, "gather of a non-contiguous tensor")
    uneven = torch.full((r + 1,), float(r), device=state.device)
    want = torch.cat([torch.full((i + 1,), float(i)) for i in range(n)]).to(state.device)
    check_equal(gather(uneven), want, "gather of first dimensions that differ by process")


def check_gather_nested(state: PartialState) -> None:
    r, n = state.process_index, state.num_processes
    data = {"a": _rows(r, 1, state), "b": [_rows(2 * r, 2, state), Pair(_rows(r, 1, state), 7)]}
    out = gather(data)
    check(isinstance(out, dict) and isinstance(out["b"], list), f"containers kept: {out!r}")
    check(isinstance(out["b"][1], Pair), f"namedtuple kept: {type(out['b'][1]).__name__}")
    check_equal(out["a"], _rows(0, n, state), "gather of dict entry 'a'")
    check_equal(out["b"][0], _rows(0, 2 * n, state), "gather of dict entry 'b'[0]")
    check_equal(out["b"][1].first, _rows(0, n, state), "gather inside a namedtuple")
    check_equal(out["b"][1].second, 7, "a non-tensor leaf of gather")


def check_gather_object(state: PartialState) -> None:
    r, n = state.process_index, state.num_processes
    check_equal(gather_object([r, f"p{r}"]), [x for i in range(n) for x in (i, f"p{i}")], "lists")
    check_equal(gather_object({"rank": r}), [{"rank": i} for i in range(n)], "gather_object")


def check_broadcast(state: PartialState) -> None:
    r, n = state.process_index, state.num_processes
    check_equal(broadcast(_rows(10 * r, 3, state)), _rows(0, 3, state), "broadcast from 0")
    last = broadcast(_rows(10 * r, 3, state), from_process=n - 1)
    check_equal(last, _rows(10 * (n - 1), 3, state), "broadcast from the last process")
    nested = broadcast({"x": [_rows(r, 2, state)], "y": _rows(5 * r, 1, state)})
    check_equal(nested["x"][0], _rows(0, 2, state), "broadcast of a nested list")
    check_equal(nested["y"], _rows(0, 1, state), "broadcast of a nested dict entry")
    objects: list[object] = [r, f"p{r}", {"k": [r]}]
    returned = broadcast_object_list(objects)
    check_equal(objects, [0, "p0", {"k": [0]}], "broadcast_object_list fills in place")
    check(returned is objects, "broadcast_object_list returns the list it filled")
    from_last = broadcast_object_list([r], from_process=n - 1)
    check_equal(from_last, [n - 1], "broadcast_object_list from the last process")


def check_pad(state: PartialState) -> None:
    r, n = state.process_index, state.num_processes
    mine = torch.ones(r + 1, 2, device=state.device)
    padded = pad_across_processes(mine, pad_index=-1)
    want = torch.cat([torch.ones(r + 1, 2), -torch.ones(n - 1 - r, 2)]).to(state.device)
    check_equal(padded, want, "pad_across_processes (after)")
    first = pad_across_processes(mine, pad_index=-1, pad_first=True)
    want = torch.cat([-torch.ones(n - 1 - r, 2), torch.ones(r + 1, 2)]).to(state.device)
    check_equal(first, want, "pad_across_processes(pad_first=True)")
    cols = pad_across_processes(torch.ones(2, r + 1, device=state.device), dim=1)
    want = torch.cat([torch.ones(2, r + 1), torch.zeros(2, n - 1 - r)], dim=1).to(state.device)
    check_equal(cols, want, "pad_across_processes(dim=1)")
    nested = pad_across_processes({"a": [mine]})
    check_equal(nested["a"][0].shape, torch.Size([n, 2]), "pad_across_processes of a nest")


def check_reduce(state: PartialState) -> None:
    r, n = state.process_index, state.num_processes
    base = _rows(0, 3, state)
    mine = base + r
    offset = n * (n - 1) / 2  # 0 + 1 + ... + (n-1)
    check_close(reduce(mine, "sum"), base * n + offset, "reduce(sum)")
    check_close(reduce(mine), base + offset / n, "reduce() (mean by default)")
    check_close(reduce(mine, "max"), base + (n - 1), "reduce(max)")
    check_close(reduce(mine, "sum", scale=0.5), (base * n + offset) / 2, "reduce(scale=0.5)")
    check_equal(mine, base + r, "reduce leaves its input unchanged")
    nested = reduce({"a": [mine]}, "sum")
    check_close(nested["a"][0], base * n + offset, "reduce(sum) of a nest")


def check_copy_to_devices(state: PartialState) -> None:
    mine = _rows(1, 4, state) if state.is_main_process else None
    check_equal(copy_tensor_to_devices(mine), _rows(1, 4, state), "copy_tensor_to_devices")


CHECKS = (
    check_gather,
    check_gather_nested,
    check_gather_object,
    check_broadcast,
    check_pad,
    check_reduce,
    check_copy_to_devices,
)


def main() -> None:
    state = PartialState()
    for run_check in CHECKS:
        run_check(state)
        state.wait_for_everyone()
    state.print(f"test_ops: {len(CHECKS)} checks passed on {state.num_processes} process(es)")


if __name__ == "__main__":
    main()
