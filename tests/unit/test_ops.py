"""Collectives on one process are no-ops; nested-data helpers keep container types."""

from __future__ import annotations

from collections import namedtuple

import pytest
import torch

from overdrive.processes import ops

Pair = namedtuple("Pair", "a b")


def test_single_process_collectives_return_their_input() -> None:
    data = {"x": torch.ones(2), "s": "text"}
    assert ops.reduce(data) is data and ops.broadcast(data) is data
    assert ops.pad_across_processes(data) is data
    assert ops.gather(torch.tensor(3.0)).shape == (1,)  # like several processes: one row each
    assert ops.gather_object([1, 2]) == [1, 2] and ops.gather_object("a") == ["a"]
    assert ops.broadcast_object_list([5]) == [5]
    assert ops.reduce(data, "max") is data  # max/min/product too (Accelerate accepts max)
    with pytest.raises(ValueError, match="sum"):
        ops.reduce(data, "median")


def test_map_tensors_keeps_container_types() -> None:
    data = Pair(a=[torch.ones(1), (torch.zeros(1), 3)], b={"k": torch.ones(2)})
    out = ops.map_tensors(lambda t: t + 1, data)
    assert isinstance(out, Pair) and isinstance(out.a[1], tuple) and out.a[1][1] == 3
    assert out.b["k"].tolist() == [2.0, 2.0]
    paths = [p for p, _ in ops.tensor_leaves(data)]
    assert paths == ["[0][0]", "[0][1][0]", "[1]['k']"]


def test_non_tensor_leaves_are_detected() -> None:
    assert not ops.has_non_tensor_leaves({"a": [torch.ones(1)]})
    assert ops.has_non_tensor_leaves({"a": [torch.ones(1), "x"]})
    assert ops.has_non_tensor_leaves([])
