"""Run generated training programs with one engine and print what each observed.

    python tests/differential/program.py --lib accelerate|overdrive PROGRAMS.json

The programs (``grammar.py`` makes them) are written against Hugging Face Accelerate's public
API only; ``--lib`` is the import name, so the same file runs under the real package, under
overdrive answering to ``accelerate``, and under ``import overdrive``. Each program prints one
line of JSON per process (``ROOT/results_rank<r>.jsonl``) with every number it logged (losses, learning rates, gathered
metrics, the data each step saw, the final weights' bytes as a hash), or the error it ended in.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import importlib
import json
import math
import os
import sys
import traceback
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, IterableDataset, Sampler


class Points(Dataset):
    """A map-style dataset of (x, y, id); with ``noisy``, each read draws from torch's RNG."""

    def __init__(self, n: int, noisy: bool) -> None:
        g = torch.Generator().manual_seed(1234)
        self.x = torch.randn(n, 4, generator=g)
        self.y = torch.randn(n, 1, generator=g)
        self.noisy = noisy

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        x = self.x[i] + (0.01 * torch.rand(4) if self.noisy else 0)
        return {"x": x, "y": self.y[i], "id": torch.tensor(i)}


class Stream(IterableDataset):
    """The same points as an iterable dataset."""

    def __init__(self, n: int, noisy: bool) -> None:
        self.points = Points(n, noisy)

    def __iter__(self):  # type: ignore[no-untyped-def]
        for i in range(len(self.points)):
            yield self.points[i]


class EveryOther(Sampler):
    """A custom sampler: even indices, then odd ones."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __iter__(self):  # type: ignore[no-untyped-def]
        yield from range(0, self.n, 2)
        yield from range(1, self.n, 2)


class Uneven(BatchSampler):
    """A custom batch sampler: batches of 1, 2, 3, 1, 2, 3 ... samples."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.batch_size = None  # type: ignore[assignment]
        self.drop_last = False

    def _batches(self) -> list[list[int]]:
        out, i, size = [], 0, 1
        while i < self.n:
            out.append(list(range(i, min(self.n, i + size))))
            i, size = i + size, size % 3 + 1
        return out

    def __len__(self) -> int:
        return len(self._batches())

    def __iter__(self):  # type: ignore[no-untyped-def]
        yield from self._batches()


def noisy_collate(items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """A collator that draws from torch's global RNG, as a masking collator does."""
    batch = {k: torch.stack([it[k] for it in items]) for k in items[0]}
    batch["x"] = batch["x"] + 0.01 * torch.randn_like(batch["x"])
    return batch


def make_model(dropout: float) -> torch.nn.Module:
    torch.manual_seed(7)
    return torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.Dropout(dropout), torch.nn.Tanh(), torch.nn.Linear(8, 1)
    )


def bits(value: float) -> str:
    """A float exactly (hex), so results compare bitwise."""
    return float(value).hex() if math.isfinite(value) else str(value)


def digest(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


class Engine:
    """The library under its import name, and the reset between programs."""

    def __init__(self, lib: str) -> None:
        self.lib = importlib.import_module(lib)
        self.utils = importlib.import_module(f"{lib}.utils")
        self.state = importlib.import_module(f"{lib}.state")

    def reset(self) -> None:
        self.state.AcceleratorState._reset_state(True)
        self.state.GradientState._reset_state()


def build(engine: Engine, p: dict[str, Any], project: str | None) -> dict[str, Any]:
    """The Accelerator and the prepared objects of program ``p``."""
    lib, utils = engine.lib, engine.utils
    engine.reset()
    config = utils.DataLoaderConfiguration(
        split_batches=p["split_batches"],
        dispatch_batches=p["dispatch_batches"],
        even_batches=p["even_batches"],
        use_seedable_sampler=p["use_seedable_sampler"],
    )
    kwargs: dict[str, Any] = {}
    if project is not None:
        kwargs["project_config"] = utils.ProjectConfiguration(
            project_dir=project,
            automatic_checkpoint_naming=p["automatic_naming"],
            total_limit=p["total_limit"],
        )
    if p["tracker"]:
        kwargs["log_with"] = "tensorboard"
    # a collective one process misses fails in a minute instead of hanging for half an hour
    timeout = utils.InitProcessGroupKwargs(timeout=datetime.timedelta(seconds=60))
    acc = lib.Accelerator(
        cpu=True,
        kwargs_handlers=[timeout],
        mixed_precision=p["mixed_precision"],
        gradient_accumulation_steps=p["accum"],
        step_scheduler_with_optimizer=p["step_scheduler_with_optimizer"],
        dataloader_config=config,
        **kwargs,
    )
    utils.set_seed(p["seed"], device_specific=p["device_specific"])
    n, bs = p["n"], p["batch_size"]
    dataset = (
        Stream(n, p["noisy_data"]) if p["dataset"] == "iterable" else Points(n, p["noisy_data"])
    )
    collate = noisy_collate if p["noisy_collate"] else None
    if p["dataset"] == "iterable":
        loader = DataLoader(dataset, batch_size=bs, collate_fn=collate)
    elif p["sampler"] == "custom_sampler":
        loader = DataLoader(dataset, batch_size=bs, sampler=EveryOther(n), collate_fn=collate)
    elif p["sampler"] == "custom_batch_sampler":
        loader = DataLoader(dataset, batch_sampler=Uneven(n), collate_fn=collate)
    else:
        loader = DataLoader(
            dataset, batch_size=bs, shuffle=p["shuffle"], drop_last=p["drop_last"],
            collate_fn=collate,
        )  # fmt: skip
    model = make_model(p["dropout"])
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    objs: list[Any] = [model, opt, loader]
    if p["scheduler"]:
        objs.append(torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.7))
    prepared = acc.prepare(*objs)
    out = {"acc": acc, "model": prepared[0], "opt": prepared[1], "loader": prepared[2]}
    out["sched"] = prepared[3] if p["scheduler"] else None
    if p["tracker"]:
        acc.init_trackers("diff")
    return out


def train(p: dict[str, Any], run: dict[str, Any], log: dict[str, list[Any]], phase: str,
          start: tuple[int, int] = (0, 0), stop_at: int | None = None,
          on_step: Any = None) -> None:  # fmt: skip
    """Train ``p["epochs"]`` epochs from (epoch, batch) ``start``, logging every number."""
    acc, model, opt, loader, sched = (run[k] for k in ("acc", "model", "opt", "loader", "sched"))
    step = start[0] * 10_000 + start[1]
    for epoch in range(start[0], p["epochs"]):
        active = loader
        skip = start[1] if epoch == start[0] else 0
        if skip and p["resume_skip"] == "skip_first_batches":
            active = acc.skip_first_batches(loader, skip)
        for i, batch in enumerate(active):
            if skip and p["resume_skip"] == "manual" and i < skip:
                continue
            with acc.accumulate(model) if p["use_accumulate"] else _window(acc, model, p, i):
                pred = model(batch["x"])
                loss = torch.nn.functional.mse_loss(pred.float(), batch["y"].float())
                acc.backward(loss)
                if acc.sync_gradients and p["clip"] == "norm":
                    norm = acc.clip_grad_norm_(model.parameters(), 0.5)
                    log["norms"].append(bits(float(norm)))
                elif acc.sync_gradients and p["clip"] == "value":
                    acc.clip_grad_value_(model.parameters(), 0.05)
                opt.step()
                if sched is not None and p["scheduler"] == "per_batch":
                    sched.step()
                opt.zero_grad()
            log["losses"].append(bits(loss.item()))
            ids = acc.pad_across_processes(batch["id"], dim=0, pad_index=-1)
            log["ids"].append(acc.gather(ids).tolist())
            if p["metrics"]:
                whole = acc.gather_for_metrics(batch["id"])
                log["metrics"].append(whole.tolist())
                padded = acc.pad_across_processes(batch["id"], dim=0)
                log["metrics"].append(list(padded.shape))
                log["metrics"].append(bits(float(acc.reduce(loss.detach(), "mean"))))
            if p["tracker"]:
                acc.log({"loss": loss.item()}, step=len(log["losses"]))
            if sched is not None:
                log["lr"].append(bits(sched.get_last_lr()[0]))
            step += 1
            if on_step is not None:
                on_step(epoch, i + 1)
            if stop_at is not None and len(log["losses"]) >= stop_at:
                return
        if sched is not None and p["scheduler"] == "per_epoch":
            sched.step()
    log[f"weights_{phase}"] = [digest(acc.unwrap_model(model))]


class _window:
    """Accumulation by hand: ``no_sync`` on all but each k-th micro-batch."""

    def __init__(self, acc: Any, model: Any, p: dict[str, Any], i: int) -> None:
        last = (i + 1) % p["accum"] == 0
        self.ctx = acc.no_sync(model) if p["accum"] > 1 and not last else _nothing()

    def __enter__(self) -> None:
        self.ctx.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self.ctx.__exit__(*exc)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def run_program(engine: Engine, p: dict[str, Any], root: str) -> dict[str, Any]:
    """Run one program: train (saving once if it resumes), then resume in a new Accelerator."""
    log: dict[str, list[Any]] = {"losses": [], "ids": [], "norms": [], "lr": [], "metrics": []}
    project = os.path.join(root, "project") if p["project"] else None
    run = build(engine, p, project)
    acc = run["acc"]
    saved: dict[str, Any] = {}
    if p["resume_at"] is None:
        train(p, run, log, "full")
    else:

        def save(epoch: int, batch: int) -> None:
            if "where" not in saved and len(log["losses"]) == p["resume_at"]:
                where = acc.save_state(None if p["automatic_naming"] else os.path.join(root, "ck"))
                saved["where"] = os.path.relpath(str(where), root) if where else None
                saved["at"] = (epoch, batch)

        train(p, run, log, "first", stop_at=p["resume_at"] + p["steps_after_save"], on_step=save)
        if p["tracker"]:
            finish(acc)
        if "at" not in saved:  # the program ended before the step it saves at
            log["saved"] = ["never"]
            return log
        run = build(engine, p, project)
        acc = run["acc"]
        acc.load_state(None if p["automatic_naming"] else os.path.join(root, "ck"))
        log["saved"] = [saved.get("where")]
        epoch, batch = saved["at"]
        start = (epoch, batch) if p["resume_skip"] != "none" else (epoch, 0)
        train(p, run, log, "resumed", start=start)
    if p["tracker"]:
        finish(acc)
        log["events"] = [tensorboard_scalars(os.path.join(root, "project"))]
    if project is not None:
        log["checkpoints"] = sorted(
            os.listdir(os.path.join(project, "checkpoints"))
            if os.path.isdir(os.path.join(project, "checkpoints"))
            else []
        )
    return log


def finish(acc: Any) -> None:
    """``end_training``; with several processes, the trackers' files flushed instead: there
    it also destroys the process group, which the next program in this launch still needs."""
    if acc.num_processes == 1:
        acc.end_training()
    else:
        if acc.is_main_process:  # the other processes hold no tracker
            acc.get_tracker("tensorboard", unwrap=True).flush()
        acc.wait_for_everyone()


def tensorboard_scalars(folder: str) -> list[Any]:
    """Every scalar the TensorBoard event files under ``folder`` hold, read back: each file
    on its own (a resumed run writes a second one), in an order that does not depend on the
    files' names (they hold a time and a process id)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = []
    for dirpath, _, files in os.walk(folder):
        for name in files:
            if name.startswith("events.out.tfevents"):
                events = EventAccumulator(os.path.join(dirpath, name), purge_orphaned_data=False)
                events.Reload()
                for tag in events.Tags()["scalars"]:
                    out += [(tag, e.step, bits(e.value)) for e in events.Scalars(tag)]
    return sorted(out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lib", required=True, choices=["accelerate", "overdrive"])
    parser.add_argument("programs")
    parser.add_argument("--root", required=True, help="a folder every rank sees")
    args = parser.parse_args()
    engine = Engine(args.lib)
    with open(args.programs) as f:
        programs = json.load(f)
    rank = int(os.environ.get("RANK", "0"))
    for p in programs:
        root = os.path.join(args.root, f"p{p['id']}")
        os.makedirs(root, exist_ok=True)
        try:
            result: dict[str, Any] = {"id": p["id"], "log": run_program(engine, p, root)}
        except Exception as exc:  # the kind of failure is compared, not its words
            result = {"id": p["id"], "error": type(exc).__name__}
            result["detail"] = "".join(traceback.format_exception_only(type(exc), exc))[-500:]
            if os.environ.get("DIFFERENTIAL_TRACEBACK"):
                traceback.print_exc()
        result["rank"] = rank
        with open(os.path.join(args.root, f"results_rank{rank}.jsonl"), "a") as out:
            out.write(json.dumps(result) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
