"""Reading one item ahead to know the epoch's last batch, and the refusal of a second skip."""

from __future__ import annotations

from collections.abc import Iterator

from overdrive.data.loader_parts import InnerState
from overdrive.errors import ConfigError

# (batch, real samples of its round, share empty, is last or None, StatefulDataLoader state)
Share = tuple[object, int, bool, bool | None, InnerState | None]
_Marked = tuple[object, int, bool, bool, InnerState | None]


def mark_last(items: Iterator[Share]) -> Iterator[_Marked]:
    """(batch, real samples of the epoch's last round, this rank got one batch fewer, is
    last, the StatefulDataLoader's state after it), filling in an unknown "is last" by
    reading one item ahead.

    An item whose "is last" is unknown carries "its share is empty" instead: an empty share
    can only be the epoch's last round (even_batches=False), which this rank then skips, as
    Hugging Face Accelerate does, making the batch before it the last.
    """
    current = next(items, None)
    while current is not None:
        batch, real, flag, last, snap = current
        if last is not None:
            yield batch, real, flag, last, snap
            current = next(items, None)
            continue
        if flag:  # this rank's only batch would be an empty share: it gets none
            for _ in items:  # let the round's collectives (dispatch) finish
                pass
            return
        upcoming = next(items, None)
        if upcoming is not None and upcoming[2]:
            for _ in items:
                pass
            yield batch, -1, True, True, snap
            return
        yield batch, real, False, upcoming is None, snap
        current = upcoming


def skipped_twice(resumed_at: int, script_skip: str) -> ConfigError:
    """The refusal when a script skips batches after its loader continued mid-epoch."""
    return ConfigError(
        f"load_state continued this dataloader mid-epoch, after batch {resumed_at}, and "
        f"{script_skip} would skip the batches already trained on a second time",
        key="exact_resume",
        fix="drop the script's own skip (skip_first_batches, or counting steps) while "
        "exact_resume is on; or turn exact_resume off, and load_state leaves the loader to "
        "the script's skip, as Hugging Face Accelerate does (a loop that trains with "
        "loss.backward() directly: call accelerator.backward(loss))",
    )
