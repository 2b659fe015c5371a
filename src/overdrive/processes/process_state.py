"""Who am I: rank, world size, device and process group, held by one explicit object.

There is no singleton. Several ``PartialState`` objects may live in one process; when a
default process group already exists the later ones reuse it, and only the object that
created the group may destroy it.

The current Accelerator, for code that asks for "the" state without holding one (Hugging
Face Accelerate's ``AcceleratorState()``, a hand-built ``AcceleratedOptimizer``), is recorded
here too: ``set_current`` / ``current_accelerator`` / ``current_partial_state``.
"""

from __future__ import annotations

import atexit
import builtins
import os
import sys
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta
from functools import wraps
from typing import Any, ClassVar, TypeVar

import torch
import torch.distributed as dist

from overdrive.arguments.kwargs_handlers import InitProcessGroupKwargs
from overdrive.config import Settings, load_settings
from overdrive.config.backend import requested_backend
from overdrive.config.types import DistributedType
from overdrive.environment.process_env import DEFAULT_MASTER_PORT, ProcessEnv, detect_process_env
from overdrive.environment.rank_logging import get_logger
from overdrive.errors import ConfigError
from overdrive.launch.group_teardown import destroy_all_groups, destroy_at_exit
from overdrive.launch.suggest import suggest_command
from overdrive.parallel.decide import Decision, decide_layout
from overdrive.processes import ops, state_reset

F = TypeVar("F", bound=Callable[..., Any])

# Backends that need a process group even when a single process runs.
_GROUP_EVEN_ALONE = (DistributedType.FSDP, DistributedType.DEEPSPEED, DistributedType.MEGATRON_LM)
logger = get_logger(__name__)


class PartialState:
    """Rank, world size, device and process group of this process.

    ``settings`` defaults to ``overdrive.config.load_settings()``; ``environ`` (default
    ``os.environ``) is only read to learn how the process was launched.

    ``PartialState._shared_state`` answers Hugging Face Accelerate's question "has a state
    been configured in this process?": empty until a ``PartialState`` is made and again after
    ``_reset_state()``, else the latest one's device, backend and world (a record, not shared
    state: each object keeps its own).
    """

    _shared_state: ClassVar[dict[str, Any]] = {}
    _reset_state: ClassVar[Callable[..., None]]  # set below the module's functions

    def __init__(
        self,
        cpu: bool = False,
        *,
        settings: Settings | None = None,
        init_kwargs: InitProcessGroupKwargs | None = None,
        environ: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        state_reset.track(self)
        state_reset.revive((state_reset.PARTIAL,))  # as Hugging Face Accelerate refills its state
        self._environ: Mapping[str, str] = os.environ if environ is None else environ
        # cpu and **kwargs (backend, timeout, init_method): Hugging Face Accelerate's form,
        # which transformers' TrainingArguments uses; settings/init_kwargs/environ: overdrive's.
        code = {"use_cpu": True} if cpu else None
        self._settings = (
            settings
            if settings is not None
            else load_settings(code=code, code_label="PartialState({}=...)", environ=environ)
        )
        init_kwargs = _init_kwargs_from(init_kwargs, kwargs)
        self._init_kwargs = init_kwargs or InitProcessGroupKwargs()
        self._env = detect_process_env(self._environ)
        self._created_group = False
        self._debug: bool | None = None  # set through the ``debug`` property
        self._check_requested_world()
        self._decision = self._decide()
        self._distributed_type = self._decision.backend  # what is reported (see the setter)
        self._device = self._pick_device()
        self._backend: str | None = None
        if self._env.world_size > 1 or self._distributed_type in _GROUP_EVEN_ALONE:
            self._setup_process_group()
        if self.debug:
            ops.set_debug_default(True)
        PartialState._shared_state = {
            "_cpu": bool(self._settings["use_cpu"]),
            "device": self._device,
            "backend": self._backend,
            "distributed_type": self._distributed_type,
            "num_processes": self._env.world_size,
            "process_index": self._env.rank,
        }

    # ------------------------------------------------------------------ set-up
    def _check_requested_world(self) -> None:
        """Compare num_processes/num_machines from the settings with the world that runs."""
        s, world = self._settings, self._env.world_size
        asked = s["num_processes"]
        machines = s["num_machines"] or 1
        if (asked is None or asked == world) and machines <= self._env.num_nodes:
            return
        want = asked if asked is not None else world
        if self._env.launcher == "none" and world == 1:
            source = s.source("num_processes") if asked is not None else s.source("num_machines")
            warnings.warn(
                f"the settings ask for num_processes={want}, num_machines={machines} ({source}) "
                "but this script was started with plain `python`, so it runs as 1 process. "
                f"To run {want} processes: {suggest_command(s, sys.argv)}",
                UserWarning,
                stacklevel=3,
            )
            return
        if asked is not None and asked != world:
            message = (
                f"`num_processes` = {asked} ({s.source('num_processes')}) but {world} processes "
                f"are running (started by {self._env.launcher})"
            )
            if s.source("num_processes").kind == "code":
                raise ConfigError(
                    message,
                    key="num_processes",
                    fix=f"launch {asked} processes ({suggest_command(s, sys.argv)}) or "
                    "remove num_processes from the code",
                )
            warnings.warn(f"{message}; the running world wins", UserWarning, stacklevel=3)

    def _decide(self) -> Decision:
        """This process's one decision (``parallel/decide.py``), once the backend asked for
        is known to run here."""
        s, world = self._settings, self._env.world_size
        cuda = torch.cuda.is_available() and not s["use_cpu"]
        dtype = requested_backend(s)
        where = s.source("distributed_type")
        if dtype == DistributedType.MULTI_GPU and not cuda:
            why = (
                f"`use_cpu` is on ({s.source('use_cpu')})"
                if s["use_cpu"]
                else "no CUDA GPU is available"
            )
            raise ConfigError(
                f"`distributed_type` = MULTI_GPU ({where}) but {why}",
                key="distributed_type",
                fix="set distributed_type to MULTI_CPU (or remove it to choose automatically), "
                "or run on a machine with GPUs",
            )
        if dtype == DistributedType.NO and world > 1:
            raise ConfigError(
                f"`distributed_type` = NO ({where}) but {world} processes are running",
                key="distributed_type",
                fix="remove distributed_type (automatic) or set it to MULTI_CPU / MULTI_GPU",
            )
        return decide_layout(s, world, cuda=cuda)

    def _pick_device(self) -> torch.device:
        s = self._settings
        if s["torch_device"] is not None:
            try:
                return torch.device(s["torch_device"])
            except RuntimeError as err:
                raise ConfigError(
                    f"torch_device {s['torch_device']!r} ({s.source('torch_device')}) is not "
                    f"a torch device: {err}",
                    key="torch_device",
                    fix="set ACCELERATE_TORCH_DEVICE to a device such as 'cpu' or 'cuda:0'",
                ) from err
        if s["use_cpu"] or self._distributed_type == DistributedType.MULTI_CPU:
            return torch.device("cpu")
        if torch.cuda.is_available():
            count = torch.cuda.device_count()
            local = self._env.local_rank
            if local < count:
                return torch.device("cuda", local)
            if count == 1:  # one GPU made visible per process (e.g. srun --gpus-per-task=1)
                return torch.device("cuda", 0)
            raise ConfigError(
                f"{self._env.local_world_size} processes run on this machine but only {count} "
                "GPUs are visible",
                key="num_processes",
                fix=f"launch at most {count} processes per machine, or set use_cpu",
            )
        mps = getattr(torch.backends, "mps", None)
        if self._env.world_size == 1 and mps is not None and mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")

    def _init_method(self) -> str:
        if self._init_kwargs.init_method is not None:
            return self._init_kwargs.init_method
        env = self._env
        if env.launcher in ("overdrive", "torchrun") and self._environ is os.environ:
            return "env://"  # torchrun's agent store is reused through the environment
        addr = env.master_addr
        if addr is None:
            if env.num_nodes > 1:
                raise ConfigError(
                    f"{env.world_size} processes on {env.num_nodes} machines were started by "
                    f"{env.launcher} but MASTER_ADDR is not set",
                    key="main_process_ip",
                    fix="export MASTER_ADDR=<address of the rank-0 machine> (and MASTER_PORT)",
                )
            addr = "127.0.0.1"
        return f"tcp://{addr}:{env.master_port or DEFAULT_MASTER_PORT}"

    def _setup_process_group(self) -> None:
        world = self._env.world_size
        if dist.is_available() and dist.is_initialized():
            if dist.get_world_size() != world:
                raise ConfigError(
                    f"a process group of size {dist.get_world_size()} already exists but the "
                    f"launcher started {world} processes",
                    key="num_processes",
                    fix="destroy the other process group first or launch a matching world",
                )
            self._backend = str(dist.get_backend())
            return
        backend = self._init_kwargs.backend or ("nccl" if self._device.type == "cuda" else "gloo")
        if self._device.type == "cuda":
            torch.cuda.set_device(self._device)  # before init, so NCCL binds the right GPU
        kwargs: dict[str, Any] = {"backend": backend}
        if self._init_kwargs.timeout is not None:
            kwargs["timeout"] = self._init_kwargs.timeout
        if world == 1:
            # A one-process group for backends that always need one; no port needed.
            dist.init_process_group(store=dist.HashStore(), rank=0, world_size=1, **kwargs)
        else:
            dist.init_process_group(
                init_method=self._init_method(), rank=self._env.rank, world_size=world, **kwargs
            )
        self._created_group = True
        self._backend = backend
        atexit.unregister(destroy_at_exit)  # registered once however many groups
        atexit.register(destroy_at_exit)

    # ------------------------------------------------------------------ properties
    @property
    def settings(self) -> Settings:
        return self._settings

    @property
    def process_env(self) -> ProcessEnv:
        return self._env

    @property
    def process_index(self) -> int:
        return self._env.rank

    rank = process_index

    @property
    def local_process_index(self) -> int:
        return self._env.local_rank

    @property
    def num_processes(self) -> int:
        return self._env.world_size

    @property
    def num_machines(self) -> int:
        return self._env.num_nodes

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def backend(self) -> str | None:
        return self._backend

    @property
    def decision(self) -> Decision:
        """How this process runs (layout, backend, chain, precision owner): decided once."""
        return self._decision

    @property
    def distributed_type(self) -> DistributedType:
        return self._distributed_type

    @distributed_type.setter
    def distributed_type(self, value: DistributedType | str) -> None:
        # Hugging Face Accelerate's tests flip it to test warnings; the backend stays as built.
        chosen = DistributedType(str(getattr(value, "value", value)))
        if chosen != self._distributed_type:
            warnings.warn(
                f"state.distributed_type = {chosen} changes only what is reported; the "
                f"backend in use stays {self._distributed_type} (it is chosen when the "
                "Accelerator is created)",
                UserWarning,
                stacklevel=2,
            )
        self._distributed_type = chosen

    @property
    def is_main_process(self) -> bool:
        return self._env.rank == 0

    @property
    def is_local_main_process(self) -> bool:
        return self._env.local_rank == 0

    @property
    def is_last_process(self) -> bool:
        return self._env.rank == self._env.world_size - 1

    @property
    def use_distributed(self) -> bool:
        """True when collectives go through a process group (always when world size > 1)."""
        return self._backend is not None

    @property
    def debug(self) -> bool:
        """Collectives check that every process sends alike shapes (then raise, not hang)."""
        return bool(self._settings["debug"]) if self._debug is None else self._debug

    @debug.setter
    def debug(self, value: bool) -> None:
        self._debug = bool(value)
        ops.set_debug_default(self._debug)  # module-level collectives follow, as in Accelerate

    @property
    def timeout(self) -> timedelta | None:
        return self._init_kwargs.timeout

    def __repr__(self) -> str:
        return (
            f"PartialState(rank={self.process_index}/{self.num_processes}, "
            f"local_rank={self.local_process_index}, device={self.device}, "
            f"backend={self.backend}, distributed_type={self.distributed_type}, "
            f"launcher={self._env.launcher})"
        )

    # ------------------------------------------------------------------ process control
    def wait_for_everyone(self) -> None:
        """Block until every process reaches this point (no-op for one process)."""
        if self.use_distributed and self.num_processes > 1:
            dist.barrier()

    @contextmanager
    def main_process_first(self) -> Iterator[None]:
        """Run the block on the main process first, then on all the others."""
        yield from self._first(self.is_main_process)

    @contextmanager
    def local_main_process_first(self) -> Iterator[None]:
        """Run the block on each machine's local main process first, then on the others."""
        yield from self._first(self.is_local_main_process)

    def _first(self, leader: bool) -> Iterator[None]:
        if not leader:
            self.wait_for_everyone()
        yield
        if leader:
            self.wait_for_everyone()

    def on_main_process(self, function: F) -> F:
        """Decorator: run ``function`` on the main process only (others get None)."""
        return self.on_process(function, process_index=0)

    def on_local_main_process(self, function: F) -> F:
        """Decorator: run ``function`` on each machine's local main process only."""

        @wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return function(*args, **kwargs) if self.is_local_main_process else None

        return wrapper  # type: ignore[return-value]

    def on_last_process(self, function: F) -> F:
        """Decorator: run ``function`` on the last process only."""
        return self.on_process(function, process_index=self.num_processes - 1)

    def on_process(self, function: F | None = None, process_index: int = 0) -> Any:
        """Decorator: run ``function`` on process ``process_index`` only.

        Usable as ``state.on_process(fn, 1)`` or ``@state.on_process(process_index=1)``.
        """
        if function is None:
            return lambda fn: self.on_process(fn, process_index)

        @wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return function(*args, **kwargs) if self.process_index == process_index else None

        return wrapper

    @contextmanager
    def split_between_processes(self, inputs: Any, apply_padding: bool = False) -> Iterator[Any]:
        """Yield this process's contiguous share of a list, tuple, tensor or dict of those.

        The first ``len % num_processes`` processes get one extra item; with
        ``apply_padding`` the shorter shares repeat the last input so all have equal length.
        """
        yield split_for_process(inputs, self.num_processes, self.process_index, apply_padding)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on the main process only."""
        if self.is_main_process:
            builtins.print(*args, **kwargs)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_environ"] = dict(self._environ)  # os.environ itself does not pickle
        return state

    def __getattr__(self, name: str) -> Any:
        # Hugging Face Accelerate's words, after a reset too; an Accelerator's state also
        # answers its precision and plugins, as Accelerate's AcceleratorState does.
        return state_reset.attribute(self, name, current_accelerator)

    def destroy_process_group(self) -> None:
        """Destroy the default process group if this object created it."""
        if self._created_group and dist.is_initialized():
            destroy_all_groups()
        self._created_group = False
        self._backend = None


def _reset_partial_state(reset_partial_state: bool = False) -> None:
    """``PartialState._reset_state``: views forget the current Accelerator, and every
    ``PartialState`` made so far refuses its attributes until a new one is made."""
    _forget_current(reset_partial_state)
    PartialState._shared_state = {}
    state_reset.forget_all((state_reset.PARTIAL,))


def _init_kwargs_from(
    given: InitProcessGroupKwargs | None, kwargs: dict[str, Any]
) -> InitProcessGroupKwargs | None:
    """``PartialState(**kwargs)``'s process-group arguments as one InitProcessGroupKwargs."""
    kwargs.pop("_use_sagemaker_dp", None)  # SageMaker data parallel: never in overdrive
    known = ("backend", "init_method", "timeout")
    unknown = sorted(set(kwargs) - set(known))
    if unknown:
        raise ConfigError(
            f"PartialState got {', '.join(unknown)}, which overdrive does not pass to "
            "torch.distributed.init_process_group",
            key=unknown[0],
            fix="pass backend=, init_method= or timeout= (or InitProcessGroupKwargs to the "
            "Accelerator)",
        )
    given_here = {k: v for k, v in kwargs.items() if v is not None}
    if not given_here:
        return given
    if given is not None:
        raise ConfigError(
            f"PartialState got init_kwargs and {', '.join(sorted(given_here))} at once",
            key=next(iter(given_here)),
            fix="pass the process-group arguments one way",
        )
    return InitProcessGroupKwargs(**given_here)


def _share(n: int, world: int, rank: int) -> tuple[int, int]:
    base, extra = divmod(n, world)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def _split_one(seq: Any, world: int, rank: int, pad: bool) -> Any:
    n = len(seq)
    start, stop = _share(n, world, rank)
    part = seq[start:stop]
    want = -(-n // world) if pad else 0
    if n == 0 or len(part) >= want:
        return part
    missing = want - len(part)
    # Like Hugging Face Accelerate: repeat this share's own last item (the input's, if empty).
    last = part if len(part) else seq
    if isinstance(seq, torch.Tensor):
        return torch.cat([part, last[-1:].expand(missing, *seq.shape[1:])])
    filler = [last[-1]] * missing
    return type(seq)([*part, *filler]) if isinstance(seq, tuple) else [*part, *filler]


def split_for_process(inputs: Any, world: int, rank: int, apply_padding: bool = False) -> Any:
    """Process ``rank``'s contiguous share of ``inputs`` (see ``split_between_processes``)."""
    if world == 1:
        return inputs
    if isinstance(inputs, Mapping):
        lengths = {len(v) for v in inputs.values() if isinstance(v, (list, tuple, torch.Tensor))}
        if len(lengths) > 1:
            raise ValueError(
                f"split_between_processes needs every list in the dict to have one length, "
                f"got lengths {sorted(lengths)}"
            )
        return {
            k: _split_one(v, world, rank, apply_padding)
            if isinstance(v, (list, tuple, torch.Tensor))
            else v
            for k, v in inputs.items()
        }
    if isinstance(inputs, (list, tuple, torch.Tensor)):
        return _split_one(inputs, world, rank, apply_padding)
    if callable(getattr(inputs, "select", None)) and hasattr(inputs, "__len__"):
        # A datasets.Dataset (or alike): share row indices, select them.
        rows = _split_one(list(range(len(inputs))), world, rank, apply_padding)
        return inputs.select(rows)
    raise TypeError(
        f"split_between_processes takes a list, tuple, tensor, dict of those or a "
        f"datasets.Dataset, not "
        f"{type(inputs).__name__}"
    )


# --- the current Accelerator -----------------------------------------------------------------
RESET_MESSAGE = (
    "`AcceleratorState` object has no attribute `distributed_type`. This happens if "
    "`AcceleratorState._reset_state()` was called and an `Accelerator` or `PartialState` "
    "was not reinitialized."
)

_current: weakref.ReferenceType[Any] | None = None
_partial: PartialState | None = None  # made for views taken before any Accelerator
# Hugging Face Accelerate's ``AcceleratorState._shared_state``: empty until a state is
# configured in this process, and again after ``_reset_state()``.
configured: dict[str, Any] = {}


def set_current(accelerator: Any) -> None:
    """Called as an ``Accelerator`` is made: views now show this accelerator."""
    global _current, configured
    _current = weakref.ref(accelerator)
    configured = {"accelerator": _current}
    state_reset.own(accelerator.state)
    state_reset.revive()


def current_accelerator() -> Any:
    """The most recently created live ``Accelerator``, or None."""
    return _current() if _current is not None else None


def current_partial_state() -> PartialState:
    """The current accelerator's ``PartialState``, else one made from the environment."""
    global _partial
    accelerator = current_accelerator()
    if accelerator is not None:
        return accelerator.state
    if _partial is None:
        _partial = PartialState()
    return _partial


def set_configured(marker: dict[str, Any]) -> None:
    """Replace ``configured`` (``AcceleratorState._shared_state = ...``)."""
    global configured
    configured = marker


def reset_state(reset_partial_state: bool = False) -> None:
    """``AcceleratorState._reset_state``: forget the current accelerator (it refuses to prepare
    afterwards, and its state its attributes until a new state is made); with
    ``reset_partial_state``, every state made so far refuses them."""
    accelerator = current_accelerator()
    if accelerator is not None:
        state_reset.forget(accelerator.state)
    _forget_current(reset_partial_state)
    if reset_partial_state:
        state_reset.forget_all()


def _forget_current(reset_partial_state: bool) -> None:
    global _current, _partial, configured
    accelerator = current_accelerator()
    if accelerator is not None:
        accelerator._state_was_reset = True
    _current = None
    configured = {}
    if reset_partial_state:
        _partial = None
        PartialState._shared_state = {}


# Hugging Face Accelerate's reset, as ``state._reset_state()`` and as the reads it refuses.
PartialState._reset_state = state_reset.ResetState(  # type: ignore[assignment]
    reset_state, _reset_partial_state
)
for _name in state_reset.GUARDED:
    setattr(PartialState, _name, state_reset.guarded(_name, getattr(PartialState, _name)))
