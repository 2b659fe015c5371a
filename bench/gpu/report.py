"""The GPU bench's table, and its section in ``bench/RESULTS.md`` between the markers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the table needs only the fields; the module loads on its own
    from timing import Summary

START, END = "<!-- gpu:start -->", "<!-- gpu:end -->"
RUN_HEADING = "### bench/gpu:"  # each recorded run's heading starts so; older runs are kept

HEADER = (
    "| variant | precision | raw ms/step | overdrive ms/step | ratio | raw p10 ms | "
    "overdrive p10 ms | p10 ratio | overdrive tokens/s | steps | note |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|"
)


@dataclass
class Row:
    """One variant: timings when it ran, else ``note`` says why not (``failed`` when it broke)."""

    variant: str
    precision: str
    raw: Summary | None = None
    overdrive: Summary | None = None
    tokens: int = 0
    note: str = ""
    failed: bool = False

    def cells(self) -> list[str]:
        if self.raw is None or self.overdrive is None:
            why = ("FAILED: " if self.failed else "not run: ") + self.note
            return [self.variant, self.precision, *["-"] * 8, why]
        r, o = self.raw, self.overdrive
        return [
            self.variant,
            self.precision,
            f"{r.median * 1e3:.3f}",
            f"{o.median * 1e3:.3f}",
            f"{o.median / r.median:.3f}",
            f"{r.p10 * 1e3:.3f}",
            f"{o.p10 * 1e3:.3f}",
            f"{o.p10 / r.p10:.3f}",
            f"{self.tokens / o.median:,.0f}",
            f"{min(r.count, o.count)}",
            self.note,
        ]


def table(rows: list[Row]) -> str:
    lines = [HEADER]
    for row in rows:
        cells = [c.replace("|", "/") for c in row.cells()]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def section(heading: str, command: str, body: str) -> str:
    """One run's section: heading, the command that made it, its table and notes."""
    return f"{RUN_HEADING} {heading}\n\n```\n{command}\n```\n\n{body.strip()}\n"


def insert(text: str, new_section: str) -> str:
    """``text`` (RESULTS.md) with ``new_section`` first between the markers; earlier runs stay
    below it, anything else between the markers (the "not run yet" line) goes. Without the
    markers, the block goes after the file's first heading line."""
    if START in text and END in text:
        head, rest = text.split(START, 1)
        inside, tail = rest.split(END, 1)
    else:
        first, _, after = text.partition("\n")
        head, inside, tail = first + "\n\n", "", "\n\n" + after.lstrip("\n")
    earlier = inside.split(RUN_HEADING)[1:]
    runs = [new_section.strip()] + [(RUN_HEADING + e).strip() for e in earlier]
    return head + START + "\n" + "\n\n".join(runs) + "\n" + END + tail


def write(path: Path, new_section: str) -> None:
    path.write_text(insert(path.read_text(), new_section))
