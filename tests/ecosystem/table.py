"""The ecosystem table in docs/ecosystem.md, between its two marker lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.ecosystem.cases import CASES
from tests.ecosystem.reasons import reason_for
from tests.helpers.markers import write_between

START = "<!-- ecosystem:start -->"
END = "<!-- ecosystem:end -->"
ENGINES = ("accelerate", "overdrive")


def _ran(run: dict[str, Any]) -> str:
    return "yes" if run.get("ok") else "no"


def backend(run: dict[str, Any]) -> str:
    """What rank 0's accelerator reported: type, processes, precision, the backend's plugin."""
    facts = run.get("facts", {}).get("rank0")
    if not facts:
        return "-"
    text = f"{facts['distributed_type']} x{facts['num_processes']}, {facts['mixed_precision']}"
    if facts.get("zero_stage") is not None:
        text += f", ZeRO-{facts['zero_stage']}"
    if facts.get("fsdp_version") is not None:
        text += f", FSDP{facts['fsdp_version']}"
    return text


def _diff(value: float | None) -> str:
    return "-" if value is None else f"{value:.1e}"


def losses(row: dict[str, Any]) -> str:
    found = row.get("losses")
    if not found:
        return "-"
    if found.get("equal"):
        return f"yes ({found['steps']} per rank)"
    return f"no ({found.get('note') or _diff(found.get('max_abs_diff'))})"


def weights(found: dict[str, Any] | None) -> str:
    if not found:
        return "-"
    if found.get("bitwise"):
        return "yes (bitwise)"
    if found.get("max_abs_diff") is None:
        return f"no ({found.get('note', 'not comparable')})"
    return f"no ({_diff(found['max_abs_diff'])})"


def _label(engine: str) -> str:
    return "Accelerate" if engine == "accelerate" else "overdrive"


def checkpoints(row: dict[str, Any]) -> str:
    """What each engine's checkpoints kept and held (the save hook's entries), the
    hook-written weights across the engines, and the resumed runs: across the engines, and
    each against its own uninterrupted run."""
    parts = []
    case = next((c for c in CASES if c.name == row["name"]), None)
    holds = ", ".join(case.checkpoint_holds) if case else ""
    kept = []
    for engine in ENGINES:
        report = row[engine].get("checkpoints")
        if report and row[engine].get("runs"):
            state = "" if report["ok"] else f" (wrong: missing {report['missing'] or 'the count'})"
            kept.append(f"{_label(engine)} {', '.join(report['kept']) or 'none'}{state}")
    if kept:
        parts.append("kept: " + " / ".join(kept) + (f", each with {holds}" if holds else ""))
    if row.get("checkpoint_weights"):
        parts.append(f"hook-written weights equal: {weights(row['checkpoint_weights'])}")
    resumed = [e for e in ENGINES if "resumed_vs_uninterrupted" in row[e]]
    if resumed:
        start = row[resumed[0]].get("resumed_from")
        text = f"resumed from {start}"
        if row.get("resumed_weights"):
            found = {"losses": row["resumed_losses"]}
            text += (
                f": losses equal {losses(found)}, weights equal {weights(row['resumed_weights'])}"
            )
        own = ", ".join(
            f"{_label(e)} {weights(row[e]['resumed_vs_uninterrupted'])}" for e in resumed
        )
        parts.append(f"{text}; resumed vs own uninterrupted run: {own}")
    return "; ".join(parts) or "-"


def notes(row: dict[str, Any]) -> str:
    """The recorded explanation of a row, else what a failed run said; for a config file,
    each engine's weights against its own DDP run of the same script."""
    text = reason_for(row["name"], row["processes"])
    errors = [f"{_label(e)}: {row[e]['error']}" for e in ENGINES if "error" in row[e] and not text]
    ddp = row.get("vs_ddp")
    against = (
        [
            "final weights vs the same engine's multi_gpu.yaml (DDP) run: "
            + ", ".join(f"{_label(e)} {weights(found)}" for e, found in ddp.items())
        ]
        if ddp
        else []
    )
    return "; ".join([t for t in [text] if t] + errors + against).replace("|", "\\|")


def table(results: dict[str, dict[str, Any]]) -> str:
    """One row per case and process count; the totals last."""
    lines = [
        "| case | processes | runs under Accelerate | runs under overdrive | backend reported "
        "(Accelerate / overdrive) | losses equal | final weights equal | checkpoints "
        "| notes |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    rows = sorted(results.values(), key=lambda r: (r["source"] != "trl", r["name"], r["processes"]))
    for row in rows:
        a, o = row["accelerate"], row["overdrive"]
        lines.append(
            f"| {row['name'].replace('|', '/')} | {row['processes']} | {_ran(a)} | {_ran(o)} "
            f"| {backend(a)} / {backend(o)} | {losses(row)} | {weights(row.get('weights'))} "
            f"| {checkpoints(row).replace('|', '/')} | {notes(row)} |"
        )
    both = [r for r in rows if r["accelerate"].get("ok") and r["overdrive"].get("ok")]
    same = sum(1 for r in both if r.get("weights", {}).get("bitwise"))
    equal = sum(1 for r in both if r.get("losses", {}).get("equal"))
    lines.append(
        f"| **all** | | **{sum(1 for r in rows if r['accelerate'].get('ok'))}** of {len(rows)} "
        f"| **{sum(1 for r in rows if r['overdrive'].get('ok'))}** of {len(rows)} | "
        f"| **{equal}** of the {len(both)} that run under both "
        f"| **{same}** of the {len(both)} | | |"
    )
    return "\n".join(lines)


def source_line(source: dict[str, str] | None) -> str:
    """Which diffusers scripts the table is for."""
    if not source:
        return "diffusers' scripts: not fetched."
    return (
        f"diffusers' scripts: ref `{source['ref']}`, commit `{source['commit']}` ({source['how']})."
    )


def write_table(results: dict[str, Any], doc: Path, source: dict[str, str] | None = None) -> None:
    """Replace the text between the markers in ``doc`` (appended with them when absent)."""
    write_between(doc, START, END, source_line(source) + "\n\n" + table(results))
