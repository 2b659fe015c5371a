"""Which ranks to simulate: ``--simulate_ranks 0,-1`` (negative counts from the end)."""

from __future__ import annotations

from overdrive.errors import LaunchError

DEFAULT_RANKS = "0,-1"


def choose_ranks(text: str | None, world_size: int) -> list[int]:
    """The distinct ranks ``text`` names in a world of ``world_size``, in the given order."""
    spec = DEFAULT_RANKS if text is None else text
    chosen: list[int] = []
    for item in (part.strip() for part in spec.split(",")):
        try:
            index = int(item)
        except ValueError:
            index = None
        if index is None or not -world_size <= index < world_size:
            raise LaunchError(
                f"--simulate_ranks {spec!r}: {item!r} is not a rank of this world of "
                f"{world_size} process(es)\n  fix: give ranks from 0 to {world_size - 1} "
                "(or -1 for the last), separated by commas"
            )
        rank = index % world_size
        if rank not in chosen:
            chosen.append(rank)
    return chosen
