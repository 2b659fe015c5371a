"""``overdrive launch --simulate``: each chosen rank of the planned world in its own process
(``overdrive.simulate.worker``), as many at once as this machine has cores, its output relayed
as the real launch relays it, then the report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from overdrive.errors import LaunchError
from overdrive.launch.plan import LaunchPlan
from overdrive.launch.relay import Relay
from overdrive.launch.relay import supported as relay_supported
from overdrive.simulate.checkpoint_total import whole_checkpoint
from overdrive.simulate.cost import estimate, load_cost
from overdrive.simulate.device import MODELS, check_device
from overdrive.simulate.offload_refusal import refuse_zero_offload
from overdrive.simulate.ranks import choose_ranks
from overdrive.simulate.report import text

DEFAULT_STEPS = 2
WORKER = "overdrive.simulate.worker"


def rank_environment(plan: LaunchPlan, rank: int) -> dict[str, str]:
    """The environment the real launch gives ``rank`` (on its machine), for one process."""
    per_machine = plan.nproc_per_node
    env = {**os.environ, **plan.shared_env(), **plan.rank_env(rank % per_machine)}
    env.update(RANK=str(rank), GROUP_RANK=str(rank // per_machine))
    env.pop("OMP_NUM_THREADS", None)
    return env


def simulate_plan(
    plan: LaunchPlan,
    ranks: str | None = None,
    steps: int = DEFAULT_STEPS,
    device: str | None = None,
) -> list[dict[str, Any]]:
    """Simulate the chosen ranks of ``plan``'s world, memory sized for ``device``
    (``--simulate_device``, cpu by default); one report per rank."""
    device = check_device(device)
    refuse_zero_offload(plan.settings, plan.decision.backend)
    if steps < 1:
        raise LaunchError(
            f"--simulate_steps must be 1 or more, got {steps}\n  fix: pass --simulate_steps 2"
        )
    entry = ["-m", plan.target] if plan.is_module else [plan.target]
    chosen = choose_ranks(ranks, plan.world_size)
    with tempfile.TemporaryDirectory(prefix="overdrive-simulate-") as folder:
        relay = _relay_output(plan, folder, chosen)

        def simulate_one(rank: int) -> tuple[int, str]:
            out = os.path.join(folder, f"rank_{rank}.json")
            command = [sys.executable, "-m", WORKER, out, str(steps), device, *entry]
            command += plan.script_args
            env = rank_environment(plan, rank)
            if relay is None:
                return subprocess.call(command, env=env), out
            streams = [os.path.join(folder, f"rank_{rank}.{name}") for name in ("out", "err")]
            with open(streams[0], "wb") as stdout, open(streams[1], "wb") as stderr:
                return subprocess.call(command, env=env, stdout=stdout, stderr=stderr), out

        try:
            with ThreadPoolExecutor(max_workers=parallel_ranks(len(chosen))) as pool:
                results = list(pool.map(simulate_one, chosen))
        finally:
            if relay is not None:
                relay.stop()
        reports = []
        for rank, (code, out) in zip(chosen, results, strict=True):
            if code != 0 or not os.path.exists(out):
                raise LaunchError(
                    f"the simulation of rank {rank} of {plan.world_size} failed (exit code "
                    f"{code}); its error is above\n  fix: the script must run its first "
                    "steps with tensors that hold no values; see docs/simulate.md"
                )
            with open(out, encoding="utf-8") as handle:
                reports.append(json.load(handle))
    return reports


def _relay_output(plan: LaunchPlan, folder: str, ranks: list[int]) -> Relay | None:
    """The real launch's relay of the ranks' output (whole lines, behind ``[rank N] `` unless
    ``--no_rank_prefix``), so ranks run at once never mix their lines; None where named pipes
    do not exist (the ranks then print directly)."""
    if not relay_supported():
        return None
    relay = Relay(prefix=plan.rank_prefix)
    for rank in ranks:
        relay.add_pipe(os.path.join(folder, f"rank_{rank}.out"), rank, to_err=False)
        relay.add_pipe(os.path.join(folder, f"rank_{rank}.err"), rank, to_err=True)
    relay.start()
    return relay


def parallel_ranks(count: int) -> int:
    """How many of ``count`` simulated ranks run at once: one per CPU core this process may
    use (each rank is one busy Python process of about 0.5 GiB)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(count, cores))


def run_simulation(
    plan: LaunchPlan,
    ranks: str | None,
    json_path: str | None,
    steps: int = DEFAULT_STEPS,
    cost_path: str | None = None,
    device: str | None = None,
) -> int:
    """Simulate, print the report (with each rank's estimated step time when ``cost_path``
    names a cost file, read before anything runs), write it as JSON when asked; the exit
    code. ``device`` (``--simulate_device``) sizes the memory."""
    device = check_device(device)
    cost = load_cost(cost_path) if cost_path else None
    reports = simulate_plan(plan, ranks, steps, device)
    if cost is not None:
        for report in reports:
            report["step_time"] = estimate(cost, report)
    whole = whole_checkpoint(
        {r["rank"]: r["checkpoint"] for r in reports if "own" in r.get("checkpoint", {})},
        plan.world_size,
    )
    layout = (
        f"{plan.world_size} processes ({plan.num_machines} machine(s) x {plan.nproc_per_node}), "
        f"layout {plan.decision.layout.describe()}"
    )
    print(text(layout, reports, whole, device))
    if json_path:
        with open(json_path, "w", encoding="utf-8") as handle:
            document = {
                "world_size": plan.world_size,
                "device": {"name": device, "memory": MODELS[device]},
                "ranks": reports,
                "checkpoint": whole,
            }
            json.dump(document, handle, indent=2)
    return 0
