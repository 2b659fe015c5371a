"""Read the stacks a hung job's ranks dumped, decide who never came, and say it.

A rank is *waiting* when its main thread is inside torch.distributed (a collective, a
barrier, the rendezvous) or inside DDP; when some rank waits, the ranks that do not, or that
are stopped, or that did not answer, are the ones that hung the job.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from overdrive.launch.rankfiles import in_torch_distributed, skipped_frame

_HEADER = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+)")
_FILE = re.compile(r'^\s*File "(.*)", line \d+')
_PREFIX = "overdrive: "


def thread_stacks(dump: str) -> tuple[dict[int, list[str]], int | None]:
    """Each thread's frame lines in one faulthandler dump, and the thread that was current."""
    stacks: dict[int, list[str]] = {}
    current: int | None = None
    ident: int | None = None
    for line in dump.splitlines():
        header = _HEADER.match(line)
        if header:
            ident = int(header.group(2), 16)
            stacks[ident] = []
            if header.group(1) == "Current thread":
                current = ident
        elif line.startswith("Stack (most recent call first)"):
            ident = 0
            stacks[ident] = []
        elif ident is not None and line.strip():
            stacks[ident].append(line.rstrip())
    return stacks, current


def main_stack(dump: str, main_ident: int | None) -> list[str] | None:
    """The main thread's frames (launcher plumbing left out), or None if the dump has none."""
    stacks, current = thread_stacks(dump)
    for key in (main_ident, current, next(iter(stacks), None)):
        if key is not None and key in stacks:
            return [line for line in stacks[key] if not _plumbing(line)]
    return None


def _plumbing(line: str) -> bool:
    match = _FILE.match(line)
    return match is not None and skipped_frame(match.group(1))


def in_collective(stack: list[str]) -> bool:
    """Whether these frames are inside torch.distributed, DDP or a backward pass."""
    for line in stack:
        match = _FILE.match(line)
        if match and (
            in_torch_distributed(match.group(1))
            or "/torch/autograd/" in match.group(1).replace("\\", "/")
        ):
            return True
    return False


@dataclass
class RankState:
    """What the launcher learnt about one rank when the job hung."""

    rank: int
    stack: list[str] | None = None  # None: it did not answer
    waiting: bool = False
    stopped: bool = False  # stopped by a signal (SIGSTOP), cannot run its handler
    timed_out: str | None = None  # its own collective timed out: the error's first line
    ended: str | None = None  # it had already exited: how (``exit code 0``)
    state: str = "?"  # the Linux process state letter when asked


@dataclass
class HangReport:
    """Why the launcher declared a hang, and each rank's stack and part in it."""

    reason: str
    ranks: list[RankState] = field(default_factory=list)

    @property
    def waiting(self) -> list[int]:
        return [r.rank for r in self.ranks if r.waiting]

    @property
    def culprits(self) -> list[int]:
        """Stopped ranks, and when someone waits, every rank not waiting with it."""
        if not self.waiting:
            return [r.rank for r in self.ranks if r.stopped]
        return [r.rank for r in self.ranks if not r.waiting]

    def detail(self) -> str:
        """Printed when the hang is found: every rank's stack, then who never came."""
        lines = [
            f"{_PREFIX}{self.reason}; the stack of every rank on this machine follows "
            "(most recent call first)."
        ]
        for state in sorted(self.ranks, key=lambda r: r.rank):
            lines += _rank_lines(state)
        return "\n".join(lines + self.verdict())

    def verdict(self) -> list[str]:
        """Who hung the job, one line per way of hanging it."""
        waiting, culprits = self.waiting, self.culprits
        if not culprits:
            if not waiting:
                return [f"{_PREFIX}no rank is inside a collective (see the stacks above)."]
            return [
                f"{_PREFIX}every rank waits inside a collective, maybe not the same one "
                "(compare the stacks above)."
            ]
        where = (
            f"the collective that {_ranks(waiting)} {'wait' if len(waiting) > 1 else 'waits'} in"
        )
        groups: dict[str, list[int]] = {}
        for state in self.ranks:
            if state.rank in culprits:
                groups.setdefault(_part(state), []).append(state.rank)
        lines = []
        for part, ranks in groups.items():
            many = len(ranks) > 1
            if part == "absent":
                text = f"never entered {where}" if waiting else "is not in a collective"
            elif part == "ended":
                text = f"ended without entering {where}" if waiting else "ended"
            elif part == "stopped":
                text = f"{'are' if many else 'is'} stopped (SIGSTOP) and cannot reach " + (
                    where if waiting else "any collective"
                )
            else:
                text = f"did not answer with {'their stacks' if many else 'its stack'}"
            lines.append(f"{_PREFIX}{_ranks(ranks)} {text}.")
        return lines + _checkpoint_hints(self.ranks, culprits)

    def headline(self) -> str:
        """The closing report's first line; the verdict follows it."""
        culprits = self.culprits
        if not culprits:
            who = "the job hung"
        elif all(r.ended for r in self.ranks if r.rank in culprits):
            who = f"{_ranks(culprits)} ended early"
        else:
            who = f"{_ranks(culprits)} hung"
        return f"{_PREFIX}{who}; the launcher stopped the job after {self.reason}."

    def tag(self, rank: int) -> str:
        """A rank's part in the hang, for its exit-status line ("" when none)."""
        state = next((r for r in self.ranks if r.rank == rank), None)
        if state is None or state.ended:
            return ""
        if rank in self.culprits:
            return "hung, stopped by SIGSTOP" if state.stopped else "hung"
        if state.timed_out:
            return "its collective timed out"
        return "waiting in a collective" if state.waiting else ""


def _part(state: RankState) -> str:
    """How a culprit hung the job: absent (running elsewhere), ended, stopped or unknown."""
    if state.stopped:
        return "stopped"
    if state.ended:
        return "ended"
    return "absent" if state.stack is not None else "unknown"


def _rank_lines(state: RankState) -> list[str]:
    if state.ended:
        return [f"{_PREFIX}rank {state.rank} had already ended ({state.ended})."]
    if state.stopped:
        return [f"{_PREFIX}rank {state.rank} is stopped (SIGSTOP) and cannot show its stack."]
    if state.stack is None:
        return [f"{_PREFIX}stack of rank {state.rank}: no answer (process state {state.state})."]
    if state.timed_out:
        where = f"its collective timed out: {state.timed_out}"
    else:
        where = "waiting in a collective" if state.waiting else "not in a collective"
    lines = [f"{_PREFIX}stack of rank {state.rank} ({where}):"]
    lines += [f"{_PREFIX}  {line}" for line in state.stack] or [f"{_PREFIX}    (no frames)"]
    return lines


def _ranks(ranks: list[int]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + ", ".join(str(r) for r in ranks)


def _checkpoint_hints(ranks: list[RankState], culprits: list[int]) -> list[str]:
    """A rank that hangs inside save_state / load_state while the others went on: the call
    was made on some processes only (``if accelerator.is_main_process:``)."""
    hints = []
    for state in ranks:
        if state.rank not in culprits or not state.stack:
            continue
        if any("in _final" in line or "in _await" in line for line in state.stack):
            hints.append(
                f"{_PREFIX}rank {state.rank} waits in save_state() for the main process to "
                "write the checkpoint, but the main process did not call it\n"
                f"{_PREFIX}  fix: call accelerator.save_state() on the main process too"
            )
            continue
        for op in ("save_state", "load_state"):
            if any(f"in {op}" in line for line in state.stack):
                hints.append(
                    f"{_PREFIX}rank {state.rank} waits in {op}() for processes that did not "
                    f"call it: with this backend every process holds part of the state and "
                    f"takes part in {op}\n"
                    f"{_PREFIX}  fix: call accelerator.{op}() on every process, not only "
                    "inside `if accelerator.is_main_process:`"
                )
                break
    return hints
