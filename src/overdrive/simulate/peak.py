"""Peak memory by kind (parameters, gradients, optimizer state, activations, temporaries and
communication buffers), from PyTorch's ``MemTracker``, split into the peak before the
script's first forward (building and preparing the model) and the peak during the training
steps."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch._guards import active_fake_mode
from torch.distributed._tools import mem_tracker, mod_tracker
from torch.distributed._tools.mem_tracker import MemTracker
from torch.distributed.tensor import DTensor
from torch.nn.modules.module import register_module_forward_pre_hook

from overdrive.simulate.comm_buffers import COMMUNICATION, communication_buffers
from overdrive.simulate.cuda_allocator import CachingAllocator
from overdrive.simulate.device import DEFAULT_DEVICE, allocation_bytes
from overdrive.simulate.device_query import fake_device
from overdrive.simulate.streams import DEFAULT_STREAM, StreamFollower


def _by_kind(snapshots: dict[Any, dict[Any, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for per_device in snapshots.values():
        for name, value in per_device.items():
            key = str(getattr(name, "value", name))
            out[key] = out.get(key, 0) + int(value)
    return out


def _tolerate_backward_inside_forward(tracker: Any) -> None:
    """A pipelined model runs its schedule, backward included, inside its forward: the
    backward has already closed the model when its forward returns, which ``ModTracker``
    takes for a broken hierarchy; that end of the forward is let through here."""
    original = tracker._get_pop_fn

    def get_pop_fn(w_mod: Any, name: str, is_bw: bool) -> Any:
        pop = original(w_mod, name, is_bw)

        def fn(*args: Any) -> None:
            if is_bw or tracker.is_bw or name in tracker.parents:
                pop(*args)

        return fn

    tracker._get_pop_fn = get_pop_fn


def _leaf_safe_multi_grad_hook(original: Any) -> Any:
    """``ModTracker`` waits for the gradients of all of a module's inputs; with a leaf among
    them (a pipeline stage's received input) PyTorch refuses that wait inside
    ``autograd.grad``, which a stage's shape inference runs. Such a module ends at its first
    input gradient instead (the same moment for one input)."""

    def register(tensors: Any, fn: Any, *, mode: str = "all") -> Any:
        if mode == "all" and any(t.grad_fn is None for t in tensors):
            mode = "any"
        return original(tensors, fn, mode=mode)

    return register


_UNCLAIMED = (mem_tracker._MemRefType.ACT, mem_tracker._MemRefType.TEMP)
"""The kinds a communication buffer is taken from: what no parameter, gradient, optimizer
state or module buffer holds."""


def _sized_for(device: str) -> type:
    """``MemTracker``'s record of a storage, sizing it as an allocation on ``device``
    (``overdrive.simulate.device``) whatever device the tensor sits on here."""

    class SizedRefInfo(mem_tracker._WeakRefInfo):
        def _calculate_mem_consumed(self) -> int:
            return allocation_bytes(device, self.size * self.element_size)

    return SizedRefInfo


FORWARD, BACKWARD, OPTIMIZER_STEP = "forward", "backward", "optimizer step"
"""The phases of a training step the tracker tells apart."""

_WAIT_TENSOR = torch.ops._c10d_functional.wait_tensor.default


def _output_tensors(out: Any) -> Iterator[torch.Tensor]:
    """The tensors an operator returned: itself, or those in its tuples and lists."""
    if isinstance(out, torch.Tensor):
        yield out
    elif isinstance(out, (tuple, list)):
        for item in out:
            yield from _output_tensors(item)


def _depth_then_name(name: str) -> tuple[int, str]:
    """Orders the modules running at a moment: the deepest last, ``Global`` (outside every
    module) first; names as deep by name, since a set's order changes with the process's
    string hashing."""
    return (-1 if name == "Global" else name.count("."), name)


class PeakTracker(MemTracker):
    """``MemTracker`` keeping only the process-wide peak: its per-module peaks walk every
    module on every operator, which for a 32-layer model costs more than the run itself.
    ``device`` sizes each allocation as that device's allocator would (``cpu``: the
    tensor's own bytes); with ``cuda`` the allocations and frees are also replayed through
    a model of CUDA's caching allocator, for its reserved peak."""

    def __init__(self, device: str = DEFAULT_DEVICE) -> None:
        super().__init__()
        # every snapshot's kinds: MemTracker's own and the communication buffers
        self._ref_class = (*mem_tracker._MemRefType, COMMUNICATION)  # type: ignore[assignment]
        self._record_class = mem_tracker._WeakRefInfo
        self.allocator = CachingAllocator() if device == "cuda" else None
        self._streams = StreamFollower() if self.allocator is not None else None
        self.setup_reserved = 0
        self.forward_seen = False
        if device != DEFAULT_DEVICE:
            # MemTracker builds its records through this module-level name
            setattr(mem_tracker, "_WeakRefInfo", _sized_for(device))  # noqa: B010
        _tolerate_backward_inside_forward(self._mod_tracker)
        if not hasattr(mod_tracker.register_multi_grad_hook, "__wrapped_original__"):
            register = _leaf_safe_multi_grad_hook(mod_tracker.register_multi_grad_hook)
            register.__wrapped_original__ = mod_tracker.register_multi_grad_hook
            mod_tracker.register_multi_grad_hook = register  # a simulated rank's own process
        self.setup_peak: dict[str, int] = {}
        self._peak_at: tuple[Any, bool, bool] | None = None
        self._first_forward = register_module_forward_pre_hook(self._on_first_forward)
        self._phase: str | None = None
        self.on_phase: Callable[[str], None] | None = None
        """Called with the phase (``FORWARD``, ``BACKWARD``, ``OPTIMIZER_STEP``) each time the
        operators tracked after the first forward move into another one."""

    def __enter__(self) -> PeakTracker:
        # the fake mode whose operators are this rank's memory (DTensor's shape propagation
        # runs in one of its own); torch 2.13's MemTracker sets it too, torch 2.11's does not
        self._fake_mode_on_entry = active_fake_mode()
        super().__enter__()
        if self._streams is not None:
            self._streams.__enter__()
        return self

    def __exit__(self, *args: Any) -> None:
        if self._streams is not None:
            self._streams.__exit__()
        super().__exit__(*args)

    def _phase_changed(self, phase: str) -> None:
        self._phase = phase
        if self.forward_seen and self.on_phase is not None:
            self.on_phase(phase)

    def _update_snap(self, u_type: Any, winfo: Any, *args: Any, **kwargs: Any) -> None:
        super()._update_snap(u_type, winfo, *args, **kwargs)
        allocator = self.allocator
        if allocator is None or u_type.name == "REF":
            return
        if u_type.name in ("DEL", "SIZE"):  # a resized storage takes a new block
            allocator.free(winfo)
        if u_type.name in ("ADD", "SIZE"):
            stream = self._streams.current() if self._streams is not None else DEFAULT_STREAM
            allocator.malloc(winfo, winfo.size * winfo.element_size, stream)

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        device = fake_device(func, args)
        if device is not None:
            return device
        # MemTracker's own dispatch, but walking the outputs without pytree (which builds a
        # result structure it throws away): a tenth of a simulated step's time went there.
        if self.forward_seen:  # prepare's broadcasts send parameters not yet claimed as such
            for tensor in communication_buffers(func, args):
                self._count_as_communication(tensor)
        if DTensor in types:  # its local operators come back here, and are tracked then
            return NotImplemented
        fake_mode = active_fake_mode()
        if func is _WAIT_TENSOR and fake_mode is not None:
            res = args[0]  # a fake wait returns a new tensor; a real one returns its input
        else:
            res = func(*args, **(kwargs or {}))
        # DTensor's shape propagation runs in a fake mode of its own: not this rank's memory
        if fake_mode is self._fake_mode_on_entry:
            backward = self._mod_tracker.is_bw
            if self._in_opt:
                reftype, phase = mem_tracker._MemRefType.OPT, OPTIMIZER_STEP
            elif backward:
                reftype = (
                    mem_tracker._MemRefType.ACT if self._in_ac else mem_tracker._MemRefType.TEMP
                )
                phase = BACKWARD
            else:
                reftype, phase = mem_tracker._MemRefType.ACT, FORWARD
            if phase is not self._phase:
                self._phase_changed(phase)
            for tensor in _output_tensors(res):
                self._track(reftype, tensor)
            peak_state = (
                mem_tracker._ModState.PEAK_BW if backward else mem_tracker._ModState.PEAK_FW
            )
            self._update_peak_stats(peak_state)
        return res

    def _count_as_communication(self, tensor: Any) -> None:
        """``tensor``'s storage counts as a communication buffer from now on, unless it holds
        a parameter, gradient, optimizer state or module buffer (``comm_buffers``)."""
        for storage in mem_tracker.get_untyped_storages(tensor):
            winfo, _ = self._WINFO.get(storage, (None, None))
            if winfo is None or winfo.reftype not in _UNCLAIMED:
                continue
            old = winfo.reftype
            winfo.reftype = COMMUNICATION
            self._update_snap(mem_tracker._UpdateType.REF, winfo, old_reftype=old)

    def _update_peak_stats(self, peak_state: Any) -> None:
        for device, snapshot in self._curr_mem_snap.items():
            if self._peak_mem.get(device, 0) < snapshot["Total"]:
                self._peak_mem[device] = snapshot["Total"]
                self._peak_mem_snap[device] = dict(snapshot)
                tracker = self._mod_tracker
                self._peak_at = (tuple(tracker.parents), tracker.is_bw, self._in_opt)

    def peak_moment(self) -> dict[str, str]:
        """Where the step's peak (``step_peak``) was reached: the innermost module running
        then (its qualified name, ``Global`` outside any) and the phase (``forward``,
        ``backward`` or ``optimizer step``); empty before any peak."""
        if self._peak_at is None:
            return {}
        parents, backward, optimizer = self._peak_at
        module = max(parents, key=_depth_then_name, default="Global")
        phase = OPTIMIZER_STEP if optimizer else BACKWARD if backward else FORWARD
        return {"module": module, "phase": phase}

    def _track_module_params_and_buffers(
        self, module: Any, install_grad_hooks: bool = True
    ) -> tuple[int, int]:
        # FSDP1 (use_orig_params) shows each parameter as a view of its flat parameter: a
        # view takes no post-accumulate hook; its gradient is counted where it is met.
        if any(not p.is_leaf for p in module.parameters()):
            install_grad_hooks = False
        tracked: tuple[int, int] = super()._track_module_params_and_buffers(
            module, install_grad_hooks
        )
        return tracked

    def _pre_fw_hook(self, module: Any, inputs: Any) -> None:
        # A module's later forward in the same step (a pipeline stage runs one per
        # micro-batch, outside any parent the tracker still follows) keeps nothing per module
        # here: the peak is process-wide. MemTracker would take it for a next iteration.
        if module in self.memory_tracking and not self._mod_tracker.is_bw:
            return
        super()._pre_fw_hook(module, inputs)

    def _on_first_forward(self, module: Any, args: Any) -> None:
        self._first_forward.remove()
        self.forward_seen = True
        self._phase = None  # the forward's first operator announces it
        self.setup_peak = _by_kind(self._peak_mem_snap)
        self._peak_mem, self._peak_mem_snap = {}, {}
        self._peak_at = None
        if self.allocator is not None:
            # Building the model is the script's CPU copy on a real machine: the steps' reserved
            # peak starts from the segments still in use at the first forward.
            self.setup_reserved = self.allocator.peak_reserved
            self.allocator.empty_cache()
            self.allocator.reset_peaks()

    def step_peak(self) -> dict[str, int]:
        """The peak since the first forward, by kind (with its "Total")."""
        return _by_kind(self._peak_mem_snap)

    def reserved_peaks(self) -> dict[str, int]:
        """CUDA's reserved peak before the first forward and since (the cache emptied there):
        ``{"setup", "steps"}``; empty unless sized for ``cuda``."""
        if self.allocator is None:
            return {}
        if not self.forward_seen:  # no forward ran: all of it counts as the steps'
            return {"setup": 0, "steps": self.allocator.peak_reserved}
        return {"setup": self.setup_reserved, "steps": self.allocator.peak_reserved}

    def close(self) -> None:
        self._first_forward.remove()
        setattr(mem_tracker, "_WeakRefInfo", self._record_class)  # noqa: B010
