"""``get_logger``: a logger that writes on the main process only unless told otherwise."""

from __future__ import annotations

import logging
import os
from collections.abc import MutableMapping
from typing import Any

import torch.distributed as dist

from overdrive.environment.process_env import detect_process_env


def _rank_and_world() -> tuple[int, int, int]:
    """(rank, local rank, world size) from the process group, else from the launcher."""
    env = detect_process_env(os.environ)
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), env.local_rank, dist.get_world_size()
    return env.rank, env.local_rank, env.world_size


class MultiProcessAdapter(logging.LoggerAdapter[logging.Logger]):
    """Per call: ``main_process_only=True`` (default), ``in_order=False``, ``local=False``."""

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        main_only = kwargs.pop("main_process_only", True)
        in_order = kwargs.pop("in_order", False)
        local = kwargs.pop("local", False)
        # As in Hugging Face Accelerate a stacklevel counts from this method (default 2: its
        # caller, logging's own frames skipped); +1 for _emit, the frame that calls logging.
        kwargs["stacklevel"] = kwargs.get("stacklevel", 2) + 1
        if not self.isEnabledFor(level):
            return
        rank, local_rank, world = _rank_and_world()
        if in_order and world > 1 and dist.is_available() and dist.is_initialized():
            for turn in range(world):
                if turn == rank:
                    self._emit(level, msg, args, kwargs)
                dist.barrier()
            return
        if not main_only or (local_rank if local else rank) == 0:
            self._emit(level, msg, args, kwargs)

    def warning_once(self, *args: Any, **kwargs: Any) -> None:
        """``warning``, once per distinct arguments on this logger (TRL's trainers call it,
        as Hugging Face Accelerate's adapter has it)."""
        seen: set[Any] = self.__dict__.setdefault("_warned_once", set())
        key = (args, tuple(sorted(kwargs.items())))
        if key not in seen:
            seen.add(key)
            self.warning(*args, **kwargs)

    def _emit(self, level: int, msg: object, args: Any, kwargs: dict[str, Any]) -> None:
        msg, kwargs = self.process(msg, kwargs)
        self.logger.log(level, msg, *args, **kwargs)

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, Any]:
        return msg, kwargs


def get_logger(name: str, log_level: str | int | None = None) -> MultiProcessAdapter:
    """A logger for ``name`` that logs on the main process only by default.

    ``logger.info("...", main_process_only=False)`` logs on every process;
    ``in_order=True`` lets the processes log one after another.
    """
    logger = logging.getLogger(name)
    if log_level is not None:
        logger.setLevel(log_level.upper() if isinstance(log_level, str) else log_level)
        logger.root.setLevel(logger.level)
    return MultiProcessAdapter(logger, {})
