"""What a checkpoint holds, read off an Accelerator: one list of named parts, shared by save
and load so both agree on file names and order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from overdrive.checkpoint.errors import CheckpointError
from overdrive.checkpoint.records import Manifest, PartRecord

if TYPE_CHECKING:
    from overdrive.checkpoint.host import CheckpointHost


FORMAT = "overdrive-checkpoint"
VERSION = 2
"""2: the manifest lists every file with its size and checksum."""


class Stateful(Protocol):
    """A saved object: a model, an optimizer, a scheduler or a registered custom object."""

    def state_dict(self) -> object: ...

    # Untyped: each class takes what its own ``state_dict`` gives (a model a Mapping, an
    # optimizer a dict, a custom object whatever it saved).
    def load_state_dict(self, state: Any, /) -> object: ...


@dataclass(frozen=True)
class Part:
    """One saved object: its kind (``model``...), position, file stem and class name."""

    kind: str
    index: int
    obj: Stateful
    sharded: bool = False  # each process writes its own shards (SHARDED_STATE_DICT)

    @property
    def stem(self) -> str:
        return f"{self.kind}_{self.index}"

    @property
    def label(self) -> str:
        return f"{self.kind.replace('_', ' ')} {self.index} ({self.class_name})"

    @property
    def class_name(self) -> str:
        return type(self.obj).__name__


def raw_optimizer(opt: Stateful) -> Stateful:
    """The optimizer a prepared one wraps (``.optimizer``), or ``opt`` itself."""
    raw: Stateful = getattr(opt, "optimizer", opt)
    return raw


def raw_scheduler(sched: Stateful) -> Stateful:
    """The scheduler a prepared one wraps (``.scheduler``), or ``sched`` itself."""
    raw: Stateful = getattr(sched, "scheduler", sched)
    return raw


def main_parts(accelerator: CheckpointHost) -> list[Part]:
    """Models, optimizers, schedulers and custom objects: written once, by the main process."""
    sharded = accelerator.strategy.sharded_checkpoints
    parts = [
        Part("model", i, accelerator.unwrap_model(m), sharded)
        for i, m in enumerate(accelerator.prepared.models)
    ]
    parts += [
        Part("optimizer", i, raw_optimizer(o), sharded)
        for i, o in enumerate(accelerator.prepared.optimizers)
    ]
    parts += [
        Part("scheduler", i, raw_scheduler(s))
        for i, s in enumerate(accelerator.prepared.schedulers)
    ]
    parts += [
        Part("custom_object", i, obj) for i, obj in enumerate(accelerator.prepared.custom_objects)
    ]
    return parts


def describe(parts: list[Part]) -> list[PartRecord]:
    """The manifest's list of parts."""
    records: list[PartRecord] = []
    for p in parts:
        record: PartRecord = {
            "kind": p.kind,
            "index": p.index,
            "file": p.stem,
            "class": p.class_name,
        }
        if p.sharded:
            record["sharded"] = True
        records.append(record)
    return records


def has_prepared(accelerator: CheckpointHost) -> bool:
    """Whether anything was prepared or registered for checkpointing."""
    prepared = accelerator.prepared
    return any(
        (
            prepared.models,
            prepared.optimizers,
            prepared.schedulers,
            prepared.dataloaders,
            prepared.custom_objects,
        )
    )


def require_prepared(accelerator: CheckpointHost, op: str) -> None:
    if not has_prepared(accelerator):
        raise CheckpointError(
            f"{op}() was called before anything was prepared: there is no model, optimizer, "
            "scheduler, dataloader or registered object to "
            + ("restore" if op == "load_state" else "save")
            + f"\n  fix: call accelerator.prepare(model, optimizer, ...) first, then {op}()"
        )


def compare(manifest: Manifest, parts: list[Part], accelerator: CheckpointHost) -> list[str]:
    """Every difference between a checkpoint's parts and what this run prepared."""
    problems: list[str] = []
    saved = {(p["kind"], p["index"]): p for p in manifest.get("parts", [])}
    here = {(p.kind, p.index): p for p in parts}
    for key in sorted(saved.keys() - here.keys()):
        p = saved[key]
        problems.append(
            f"the checkpoint holds {key[0].replace('_', ' ')} {key[1]} ({p['class']}), "
            "but this run has no such object prepared/registered"
        )
    for key in sorted(here.keys() - saved.keys()):
        problems.append(f"this run has {here[key].label}, but the checkpoint holds none")
    for key in sorted(here.keys() & saved.keys()):
        part, old = here[key], saved[key]
        if part.kind in ("optimizer", "scheduler", "custom_object") and (
            old["class"] != part.class_name
        ):
            problems.append(f"{part.label} was saved from a {old['class']}")
    n_loaders = len(accelerator.prepared.dataloaders)
    if manifest.get("dataloaders", 0) != n_loaders:
        problems.append(
            f"the checkpoint holds the position of {manifest.get('dataloaders', 0)} prepared "
            f"dataloader(s), but this run prepared {n_loaders}"
        )
    saved_precision = manifest.get("precision", {})
    name = getattr(accelerator.precision, "name", "no")
    if saved_precision.get("has_state") and saved_precision.get("name") != name:
        problems.append(
            f"the checkpoint holds {saved_precision.get('name')} precision state (e.g. the "
            f"fp16 loss scale), but this run uses mixed_precision={name!r}"
        )
    elif not saved_precision.get("has_state") and accelerator.precision.state_dict():
        problems.append(
            f"this run's {name} precision has state (e.g. the fp16 loss scale), but the "
            f"checkpoint holds none (it was saved with {saved_precision.get('name')!r})"
        )
    return problems
