"""The whole checkpoint's size from the simulated ranks' ``save_state`` files
(``simulate/checkpoint.py`` measures them in each rank); arithmetic only, so the launcher
that adds it up imports no torch."""

from __future__ import annotations

from collections.abc import Mapping


def whole_checkpoint(
    files_by_rank: Mapping[int, Mapping[str, Mapping[str, int]]], world: int
) -> dict[str, int]:
    """The whole checkpoint's file count and bytes from the simulated ranks' files (empty
    unless rank 0 is among them): the main process's files once; each rank's own files as
    the simulated rank nearest to it in number writes them (the simulated ranks are taken as
    typical: a sharded layout's ranks differ by a rounding of rows at most); the manifest,
    sized from rank 0's records."""
    if 0 not in files_by_rank:  # only the main process's own save says what it alone writes
        return {}
    main = files_by_rank[0]["main"]
    simulated = sorted(files_by_rank)
    count, size = len(main), sum(main.values())
    manifest = files_by_rank[0].get("manifest")
    for rank in range(world):
        nearest = min(simulated, key=lambda r: (abs(r - rank), r))
        own = files_by_rank[nearest]["own"]
        count += len(own)
        size += sum(own.values())
    if manifest:
        size += manifest["base"] + count * manifest["per_file"]
        count += 1
    return {"files": count, "bytes": size}
