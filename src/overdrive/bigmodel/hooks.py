"""Hooks around a module's forward that see its arguments (PyTorch's own hooks do not get the
keyword arguments): the base class, chaining, attaching and removing them.

A hooked module runs its hook and forward for one thread at a time (``module_lock``): an
offloading hook loads the weights before the forward and takes them away after it, so a
second thread's forward in between would see another thread's weights, or none.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable
from typing import Any, cast

import torch
from torch import nn

# Methods ``dispatch_model`` wraps with a warning; removing hooks takes those off too.
ADDED_METHODS = ("to", "cuda", "npu", "xpu", "mlu", "sdaa", "musa")


class ModelHook:
    """Callbacks around a module's forward: override what you need. ``no_grad`` runs the
    forward itself under ``torch.no_grad()``."""

    no_grad = False

    def init_hook(self, module: nn.Module) -> nn.Module:
        """Called once when the hook is attached; returns the module."""
        return module

    def pre_forward(
        self, module: nn.Module, *args: object, **kwargs: object
    ) -> tuple[tuple[object, ...], dict[str, object]]:
        """Called before the forward with its arguments; returns the arguments to use."""
        return args, kwargs

    def post_forward(self, module: nn.Module, output: object) -> object:
        """Called after the forward with its output; returns the output to give back."""
        return output

    def detach_hook(self, module: nn.Module) -> nn.Module:
        """Called when the hook is removed; returns the module."""
        return module


class SequentialHook(ModelHook):
    """Several hooks, run in the order given at each event."""

    def __init__(self, *hooks: ModelHook) -> None:
        self.hooks = hooks

    def init_hook(self, module: nn.Module) -> nn.Module:
        for hook in self.hooks:
            module = hook.init_hook(module)
        return module

    def pre_forward(
        self, module: nn.Module, *args: object, **kwargs: object
    ) -> tuple[tuple[object, ...], dict[str, object]]:
        for hook in self.hooks:
            args, kwargs = hook.pre_forward(module, *args, **kwargs)
        return args, kwargs

    def post_forward(self, module: nn.Module, output: object) -> object:
        for hook in self.hooks:
            output = hook.post_forward(module, output)
        return output

    def detach_hook(self, module: nn.Module) -> nn.Module:
        for hook in self.hooks:
            module = hook.detach_hook(module)
        return module


# Kept beside the module rather than on it: a lock on the module would stop deepcopy and pickle.
_locks: weakref.WeakKeyDictionary[nn.Module, threading.RLock] = weakref.WeakKeyDictionary()
_locks_guard = threading.Lock()


def module_lock(module: nn.Module) -> threading.RLock:
    """The lock a hooked ``module``'s forward holds from its hook's ``pre_forward`` to its
    ``post_forward`` (reentrant: a module may call itself)."""
    with _locks_guard:
        lock = _locks.get(module)
        if lock is None:
            lock = _locks[module] = threading.RLock()
        return lock


def _hooked_forward(module: nn.Module, *args: object, **kwargs: object) -> object:
    with module_lock(module):
        hook: ModelHook = module._hf_hook  # type: ignore[assignment]
        args, kwargs = hook.pre_forward(module, *args, **kwargs)
        if hook.no_grad:
            with torch.no_grad():
                output = module._old_forward(*args, **kwargs)  # type: ignore[operator]
        else:
            output = module._old_forward(*args, **kwargs)  # type: ignore[operator]
        return hook.post_forward(module, output)


def _is_fx_graph_module(module: nn.Module) -> bool:
    # An fx GraphModule's forward is generated on its class; an instance attribute would freeze
    # the graph, so its hooked forward goes on the class (each GraphModule has its own class).
    return "GraphModuleImpl" in str(type(module))


def _set_forward(module: Any, forward: Callable[..., object]) -> None:
    if _is_fx_graph_module(module):
        type(module).forward = forward
    else:
        module.forward = forward


def add_hook_to_module(module: nn.Module, hook: ModelHook, append: bool = False) -> nn.Module:
    """Run ``hook`` around ``module``'s forward (replacing a hook already there, or chained
    after it when ``append``); the module is changed in place and returned."""
    previous = getattr(module, "_hf_hook", None)
    if append and previous is not None:
        remove_hook_from_module(module)
        hook = SequentialHook(previous, hook)
    target: Any = module  # the attributes set here are plain ones nn.Module does not declare
    if hasattr(target, "_hf_hook") and hasattr(target, "_old_forward"):
        original = target._old_forward
    else:
        original = target.forward
        target._old_forward = original
    target = hook.init_hook(target)
    target._hf_hook = hook
    wrapped = functools.update_wrapper(functools.partial(_hooked_forward, target), original)
    _set_forward(target, wrapped)
    return cast(nn.Module, target)  # what init_hook returned


def remove_hook_from_module(module: nn.Module, recurse: bool = False) -> nn.Module:
    """Take the hook off ``module`` (and its submodules when ``recurse``), restoring the
    forward it had and dropping the methods ``dispatch_model`` wrapped."""
    target: Any = module  # as in add_hook_to_module
    if hasattr(target, "_hf_hook"):
        target._hf_hook.detach_hook(target)
        delattr(target, "_hf_hook")
    if hasattr(target, "_old_forward"):
        original = target._old_forward
        delattr(target, "_old_forward")
        if _is_fx_graph_module(target):
            type(target).forward = original
        elif getattr(original, "__func__", None) is type(target).forward:
            target.__dict__.pop("forward", None)  # the class's own forward again
        else:
            target.forward = original
    for name in ADDED_METHODS:
        module.__dict__.pop(name, None)
    if recurse:
        for child in module.children():
            remove_hook_from_module(child, recurse)
    return module


def remove_hook_from_submodules(module: nn.Module) -> None:
    """Take the hooks off ``module`` and every module under it."""
    remove_hook_from_module(module, recurse=True)
