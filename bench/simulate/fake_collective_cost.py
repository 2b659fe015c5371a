"""What one operator costs a simulated rank under ``FakeTensorMode`` with the fake process
group: a functional all-reduce (never cached by the fake mode), the same followed by its wait,
and two cached operators for comparison (``empty_like``, ``abs``), on a 1024 x 1024 tensor.

    .venv/bin/python bench/simulate/fake_collective_cost.py [--calls 5000]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.testing._internal.distributed.fake_pg import FakeStore


def per_call_us(operator: Callable[[], object], calls: int) -> float:
    for _ in range(calls // 10):  # the fake mode's cache filled first
        operator()
    started = time.perf_counter()
    for _ in range(calls):
        operator()
    return (time.perf_counter() - started) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=5000)
    calls = parser.parse_args().calls
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=8)
    functional = torch.ops._c10d_functional
    with FakeTensorMode():
        x = torch.empty(1024, 1024)
        operators: dict[str, Callable[[], object]] = {
            "empty_like": lambda: torch.empty_like(x),
            "abs": lambda: torch.abs(x),
            "all_reduce": lambda: functional.all_reduce(x, "sum", "0"),
            "all_reduce + wait_tensor": lambda: functional.wait_tensor(
                functional.all_reduce(x, "sum", "0")
            ),
        }
        for name, operator in operators.items():
            print(f"{name}: {per_call_us(operator, calls):.1f} us a call ({calls} calls)")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
