"""One simulated rank: ``python -m overdrive.simulate.worker RESULT.json STEPS DEVICE [-m]
target [args]``, started by ``overdrive launch --simulate`` with the rank's environment (``RANK``,
``WORLD_SIZE``, the settings), writes what the rank held and sent as JSON to RESULT.json;
DEVICE (``--simulate_device``) sizes its memory."""

from __future__ import annotations

import json
import os
import runpy
import sys
import time
from typing import Any

from overdrive.alias import install
from overdrive.processes.process_state import current_accelerator
from overdrive.simulate.checkpoint import checkpoint_files
from overdrive.simulate.comms import Snapshot, difference
from overdrive.simulate.device import DEFAULT_DEVICE
from overdrive.simulate.fake_world import SimulatedRank, fake_world
from overdrive.simulate.fp8_device import fp8_on_simulated_gpu
from overdrive.simulate.known_values import libraries_read_known_values
from overdrive.simulate.memory import training_state_bytes
from overdrive.simulate.stepper import Stepper, StepsDone


def _say(text: str) -> None:
    sys.stderr.write(f"overdrive: simulate: {text}\n")
    sys.stderr.flush()


def _run_script(target: str, args: list[str], is_module: bool) -> None:
    sys.argv = [target, *args]
    if is_module:
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        path = os.path.abspath(target)
        sys.path[0] = path if os.path.isdir(path) else os.path.dirname(path)
        runpy.run_path(target, run_name="__main__")


def _groups(members: dict[str, list[int]]) -> dict[str, dict[str, int]]:
    """Each group a collective ran on: its size, and the machines its ranks sit on (with
    ``LOCAL_WORLD_SIZE`` processes per machine)."""
    per_machine = int(os.environ.get("LOCAL_WORLD_SIZE") or os.environ["WORLD_SIZE"])
    return {
        name: {"size": len(ranks), "machines": len({r // per_machine for r in ranks})}
        for name, ranks in members.items()
    }


def simulate_rank(
    rank: int,
    world: int,
    steps: int,
    target: str,
    args: list[str],
    is_module: bool,
    device: str = DEFAULT_DEVICE,
) -> dict[str, Any]:
    """Run the script as ``rank`` of ``world`` for ``steps`` optimizer steps, its memory sized
    for ``device``; the report."""
    # deferred: torch's memory tracker loads torch.distributed._tools only where a rank is simulated
    from overdrive.simulate.peak import PeakTracker

    counter = SimulatedRank()
    tracker = PeakTracker(device)
    marks: list[Snapshot] = []
    flops: list[int] = []
    state: dict[str, int] = {}

    held: list[Any] = []  # the script's accelerator, kept alive for the checkpoint after it

    def on_step(optimizer: Any, n: int) -> None:
        held[:] = [current_accelerator()]
        marks.append(counter.snapshot())
        flops.append(counter.flops)
        state.update(training_state_bytes(stepper.optimizers))
        tracker.reset_mod_stats()  # the tracker follows one iteration's modules at a time
        _say(f"rank {rank} of {world}: step {n} of {steps} done")

    announced: set[tuple[int, str]] = set()

    def on_phase(phase: str) -> None:
        step = stepper.done + 1
        if step <= steps and (step, phase) not in announced:  # once a phase (recomputation
            announced.add((step, phase))  # and micro-batches flip between them)
            elapsed = time.monotonic() - started
            _say(f"rank {rank} of {world}: step {step} of {steps}: {phase} ({elapsed:.1f} s)")

    tracker.on_phase = on_phase
    stepper = Stepper(steps, on_step)
    started = time.monotonic()
    _say(f"rank {rank} of {world}: running the script up to its first forward")
    finished = "script ended"
    checkpoint: dict[str, Any] = {}
    try:
        with (
            fake_world(rank, world),
            counter,
            libraries_read_known_values(counter.known),
            fp8_on_simulated_gpu(device),
        ):
            with tracker:
                try:
                    _run_script(target, args, is_module)
                except StepsDone:
                    finished = f"stopped after {steps} optimizer step(s)"
            stepper.close()
            if held and held[0] is not None:
                _say(f"rank {rank} of {world}: measuring what save_state would write")
                checkpoint = _checkpoint(held[0])
    finally:
        stepper.close()
        tracker.close()
    if stepper.done < steps and not finished.startswith("stopped"):
        # a rank that took fewer steps than asked says so (it read no data, or ran out)
        finished = f"script ended after {stepper.done} of the {steps} optimizer step(s) asked"
    windows = [difference(b, a) for a, b in zip([{}, *marks], marks, strict=False)]
    return {
        "rank": rank,
        "world_size": world,
        "device": device,
        "steps": stepper.done,
        "finished": finished,
        "seconds": round(time.monotonic() - started, 2),
        "state_bytes": state,
        "setup_peak_bytes": tracker.setup_peak,
        "peak_bytes": tracker.step_peak(),
        "peak_moment": tracker.peak_moment(),
        "reserved_bytes": tracker.reserved_peaks(),
        "collectives_per_step": windows,
        "flops_per_step": [b - a for a, b in zip([0, *flops], flops, strict=False)],
        "groups": _groups(counter.members),
        "checkpoint": checkpoint,
    }


def _checkpoint(accelerator: Any) -> dict[str, Any]:
    """What this rank's ``save_state`` would write, or why it could not be measured (the
    report says so rather than leaving it out)."""
    try:
        return checkpoint_files(accelerator)
    except Exception as error:  # noqa: BLE001 - reported, the rest of the simulation stands
        return {"not_measured": f"{type(error).__name__}: {error}".splitlines()[0]}


def main(argv: list[str]) -> int:
    out, steps, device, rest = argv[0], int(argv[1]), argv[2], argv[3:]
    is_module = bool(rest) and rest[0] == "-m"
    if is_module:
        rest = rest[1:]
    install(asked_by=None, started_by="overdrive launch --simulate")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    report = simulate_rank(rank, world, steps, rest[0], rest[1:], is_module, device)
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(report, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
