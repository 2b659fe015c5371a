"""Every public name of the pinned Hugging Face Accelerate is at its dotted path under
overdrive with a compatible call signature, or listed with its reason in on_purpose.py."""

from __future__ import annotations

import pytest

from tests.surface.compare import signature_gap
from tests.surface.on_purpose import ON_PURPOSE, unused
from tests.surface.run import DOC, END, START, docs_block, report


@pytest.fixture(scope="module")
def found():
    return report()


def test_every_public_name_is_present_or_listed(found) -> None:
    gaps = {**found.missing, **found.incompatible}
    shown = "\n".join(f"  {name}: {why}" for name, why in sorted(gaps.items())[:40])
    assert not gaps, f"{len(gaps)} names of Accelerate missing under overdrive:\n{shown}"


def test_no_stale_on_purpose_entries(found) -> None:
    assert unused(ON_PURPOSE, list(found.on_purpose)) == []


def test_docs_hold_the_current_count(found) -> None:
    text = DOC.read_text()
    assert START in text and END in text
    block = text.split(START, 1)[1].split(END, 1)[0].strip()
    assert block == docs_block(found), "run `python -m tests.surface.run --write-docs`"


@pytest.mark.parametrize(
    ("theirs", "mine", "gap"),
    [
        ([["a", "POSITIONAL_OR_KEYWORD", False]], [["a", "POSITIONAL_OR_KEYWORD", False]], None),
        (
            [["a", "POSITIONAL_OR_KEYWORD", False], ["b", "POSITIONAL_OR_KEYWORD", True]],
            [["a", "POSITIONAL_OR_KEYWORD", False]],
            "takes no positional parameter 1 ('b')",
        ),
        (
            [["a", "POSITIONAL_OR_KEYWORD", False], ["b", "KEYWORD_ONLY", True]],
            [["a", "POSITIONAL_OR_KEYWORD", False], ["kw", "VAR_KEYWORD", False]],
            None,
        ),
        (
            [["a", "POSITIONAL_OR_KEYWORD", False], ["b", "POSITIONAL_OR_KEYWORD", True]],
            [["b", "POSITIONAL_OR_KEYWORD", True], ["a", "POSITIONAL_OR_KEYWORD", False]],
            "positional parameter 0 is 'b', not 'a'",
        ),
        (
            [["a", "POSITIONAL_OR_KEYWORD", True]],
            [["a", "POSITIONAL_OR_KEYWORD", False]],
            "requires 'a', which Accelerate does not",
        ),
        (
            [["a", "POSITIONAL_OR_KEYWORD", True]],
            [["a", "POSITIONAL_OR_KEYWORD", True], ["extra", "KEYWORD_ONLY", False]],
            "requires 'extra', which Accelerate does not",
        ),
        ([["args", "VAR_POSITIONAL", False]], [], "takes no *args"),
    ],
)
def test_signature_rules(theirs, mine, gap) -> None:
    assert signature_gap(theirs, mine) == gap
