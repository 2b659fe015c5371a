"""Generated programs give Hugging Face Accelerate's numbers under overdrive, bitwise.

Each world size runs one list per engine (the real package from ``.compat/site``, overdrive
answering to ``import accelerate``, and ``import overdrive``): the named cases below, a fixed
slice of the grammar's programs, and every kept regression. ``make differential`` runs
hundreds more (``python -m tests.differential.run``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.differential import grammar, runner

HERE = Path(__file__).resolve().parent
REGRESSIONS = HERE / "regressions"


def _named(pid: int, **choices: Any) -> dict[str, Any]:
    return dict(grammar.DEFAULTS, id=pid, **choices)


# Cases a user met where the same script trained differently (ids 9000+).
NAMED = {
    # resume mid-epoch with the usual skip idioms and with none, shuffled, dropout on
    "manual skip after load_state": _named(
        9001, n=12, epochs=2, shuffle=True, dropout=0.2, resume_at=3, resume_skip="manual"
    ),
    "skip_first_batches after load_state": _named(
        9002,
        n=12,
        epochs=2,
        shuffle=True,
        resume_at=4,
        steps_after_save=1,
        resume_skip="skip_first_batches",
    ),  # fmt: skip
    "the data order after load_state": _named(
        9003, n=12, epochs=2, shuffle=True, resume_at=3, steps_after_save=2
    ),
    # a collator and a dataset that draw from the global generator, and dropout in the body
    "when the loader draws": _named(
        9004, n=10, epochs=2, shuffle=True, noisy_data=True, noisy_collate=True, dropout=0.2
    ),
    # 5 batches, 3 per window: the last window is short
    "the short last accumulation window": _named(9005, n=10, accum=3, clip="norm"),
    "the short last window, by hand": _named(9006, n=10, accum=3, use_accumulate=False),
    # fp16 asked for on a CPU: Hugging Face Accelerate trains in fp32 there
    "fp16 on a CPU": _named(9007, n=10, accum=2, clip="norm", mixed_precision="fp16"),
}

# Cases where 2 processes trained differently (ids 9100+).
NAMED_2 = {
    # every process reads the stream and collates only its own samples of each global batch
    "an iterable dataset without dispatch_batches": _named(
        9101,
        n=10,
        batch_size=3,
        epochs=2,
        dataset="iterable",
        noisy_data=True,
        noisy_collate=True,
        dropout=0.2,
        accum=3,
        dispatch_batches=False,
        metrics=True,
    ),  # fmt: skip
    # the dispatcher's read-ahead already sees that drop_last drops the next round
    "split_batches, drop_last and dispatch_batches": _named(
        9102,
        n=18,
        batch_size=4,
        epochs=2,
        shuffle=True,
        drop_last=True,
        noisy_data=True,
        dropout=0.2,
        split_batches=True,
        dispatch_batches=True,
    ),  # fmt: skip
}

FIXED = {1: range(0, 20), 2: range(0, 8)}


def _regressions(nprocs: int) -> list[dict[str, Any]]:
    found = []
    for path in sorted(REGRESSIONS.glob("*.json")):
        case = json.loads(path.read_text())
        if case["nprocs"] == nprocs:
            found.append(dict(case["program"], id=10_000 + len(found)))
    return found


# resumed at the end of epoch 0 with skip_first_batches: Hugging Face Accelerate's dispatcher
# broadcasts a batch it never read; overdrive hands out an empty epoch 0 (run with the
# 2-process list, held apart from the comparison)
WHOLE_DISPATCHED_EPOCH = _named(
    9201, epochs=2, split_batches=True, dispatch_batches=True, resume_at=4,
    steps_after_save=1, resume_skip="skip_first_batches",
)  # fmt: skip


def _programs(nprocs: int) -> list[dict[str, Any]]:
    named = list(NAMED.values()) if nprocs == 1 else list(NAMED_2.values())
    generated = [dict(grammar.generate(s, nprocs), id=s) for s in FIXED[nprocs]]
    return named + generated + _regressions(nprocs)


@pytest.fixture(scope="module")
def runs() -> dict[int, dict[str, Any]]:
    """Each world size's results, run once for the tests below."""
    return {}


def _results(runs: dict[int, dict[str, Any]], nprocs: int) -> dict[str, Any]:
    if nprocs not in runs:
        extra = [WHOLE_DISPATCHED_EPOCH] if nprocs == 2 else []
        runs[nprocs] = runner.run_all(_programs(nprocs) + extra, nprocs)
    return runs[nprocs]


@pytest.mark.distributed
@pytest.mark.parametrize("nprocs", [1, 2])
def test_generated_programs_give_accelerates_numbers(
    runs: dict[int, dict[str, Any]], nprocs: int
) -> None:
    programs = _programs(nprocs)
    results = _results(runs, nprocs)
    reference = results["accelerate"]
    ids = {int(p["id"]) for p in programs}
    broken = [
        e
        for pid, r in reference.items()
        if int(pid) in ids
        for e in runner.errors(r)
        if "run ended" in e
    ]
    assert not broken, f"Hugging Face Accelerate's own run ended early: {broken[0]}"
    divergent = {}
    for p in programs:
        found = runner.differences(results, int(p["id"]))
        if found:
            choices = {k: v for k, v in p.items() if grammar.DEFAULTS.get(k) != v}
            divergent[p["id"]] = (choices, found)
    assert not divergent, json.dumps(divergent, indent=1)[:6000]
    # the programs trained: each logged losses, and the resumed ones resumed
    ran = [
        r["ranks"]["0"]
        for pid, r in reference.items()
        if int(pid) in ids and "log" in r["ranks"]["0"]
    ]
    assert len(ran) >= len(programs) - 2
    assert any(r["log"].get("weights_resumed") for r in ran)


@pytest.mark.distributed
def test_a_skip_over_a_whole_dispatched_epoch_fails_under_accelerate_and_runs_here(
    runs: dict[int, dict[str, Any]],
) -> None:
    results = _results(runs, 2)
    assert runner.accelerate_fault(results, 9201) == "empty dispatched epoch"
    for engine in runner.ENGINES[1:]:
        ranks = results[engine][9201]["ranks"]
        assert all(r["log"]["weights_resumed"] for r in ranks.values()), engine
