"""Regenerated tables in the docs: the text between two marker lines."""

from __future__ import annotations

from pathlib import Path


def write_between(doc: Path, start: str, end: str, body: str) -> None:
    """Replace the text between ``start`` and ``end`` in ``doc`` with ``body`` (appended
    with the markers when they are absent)."""
    text = doc.read_text()
    block = f"{start}\n{body}\n{end}"
    if start in text and end in text:
        head, rest = text.split(start, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    doc.write_text(text)
