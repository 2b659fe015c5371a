"""Small FSDP2 pieces that code written for Hugging Face Accelerate calls by hand: which modules
a wrap policy picks, parameters of named modules, clean parameter names, re-pointing an
optimizer, re-tying weights after an init function, loading a full state dict into a sharded
model, and activation checkpointing of the chosen layers.

The faces (``overdrive.utils.fsdp_utils``) adapt Accelerate's arguments to these functions;
the FSDP strategy itself uses ``wrap.py`` / ``fill_from_main.py``.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

import torch
from torch import nn

from overdrive.errors import OverdriveError

WRAPPED_INFIXES = ("._checkpoint_wrapped_module", "._orig_mod")

V = TypeVar("V")
R = TypeVar("R")


def canonical_names(named: Mapping[str, V]) -> dict[str, V]:
    """``named`` with the names activation-checkpoint and ``torch.compile`` wrappers add taken
    out (``layers.0._checkpoint_wrapped_module.w`` -> ``layers.0.w``; ``_orig_mod.`` leading)."""
    out: dict[str, V] = {}
    for name, value in named.items():
        if name.startswith("_orig_mod."):
            name = name[len("_orig_mod.") :]
        for infix in WRAPPED_INFIXES:
            name = name.replace(infix, "")
        out[name] = value
    return out


def modules_bottom_up(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Every module of ``model`` with its path, children before their parent (root last)."""
    order: list[tuple[str, nn.Module]] = []

    def visit(prefix: str, module: nn.Module) -> None:
        for name, child in module.named_children():
            visit(f"{prefix}.{name}" if prefix else name, child)
        order.append((prefix, module))

    visit("", model)
    return order


def parameters_of(
    modules: Iterable[nn.Module] | str | None,
    model: nn.Module,
    device: torch.device | str | int | None,
) -> set[nn.Parameter]:
    """The parameters of ``modules``: given as modules, or as a regular expression that the
    whole module path must match (those modules are moved to ``device`` first)."""
    if modules is None:
        return set()
    if isinstance(modules, str):
        pattern = re.compile(modules)
        chosen = [m for name, m in model.named_modules() if pattern.fullmatch(name)]
        for module in chosen:
            module.to(device)
        modules = chosen
    return {p for module in modules for p in module.parameters()}


def _is_torch_policy(fn: object, name: str) -> bool:
    inner = fn.func if isinstance(fn, functools.partial) else fn
    return (
        callable(inner)
        and getattr(inner, "__name__", "") == name
        and (getattr(inner, "__module__", "") or "").startswith("torch.distributed.fsdp")
    )


def wrap_predicate(
    policy: object,
    model: nn.Module,
    layer_names: str | Iterable[str] | None,
    min_num_params: int | None,
) -> Callable[[nn.Module], bool] | None:
    """Whether a module becomes its own FSDP unit, for a plugin's ``auto_wrap_policy``.

    Layer-class wrapping (``TRANSFORMER_BASED_WRAP`` or torch's ``transformer_auto_wrap_policy``)
    picks instances of ``layer_names`` (a list or a comma list; default: the model's
    ``_no_split_modules``), looking through activation-checkpoint wrappers; size wrapping
    (``SIZE_BASED_WRAP`` or torch's ``size_based_auto_wrap_policy``) picks a module with more
    than ``min_num_params`` parameters. Any other callable is asked as the FSDP strategy asks
    it (``fn(module=, recurse=False, nonwrapped_numel=)``). None: no policy, nothing wrapped.
    """
    kind = policy.upper() if isinstance(policy, str) else None
    if kind in ("TRANSFORMER_BASED_WRAP", "TRANSFORMER_LAYER") or _is_torch_policy(
        policy, "transformer_auto_wrap_policy"
    ):
        classes = _layer_classes(model, layer_names)

        def by_class(module: nn.Module) -> bool:
            module = getattr(module, "_checkpoint_wrapped_module", module)
            return bool(classes) and isinstance(module, classes)

        return by_class
    if kind == "SIZE_BASED_WRAP" or _is_torch_policy(policy, "size_based_auto_wrap_policy"):
        limit = 100_000_000 if min_num_params is None else int(min_num_params)
        return lambda module: sum(p.numel() for p in module.parameters()) > limit
    if callable(policy):

        def asked(module: nn.Module) -> bool:
            numel = sum(p.numel() for p in module.parameters())
            return bool(policy(module=module, recurse=False, nonwrapped_numel=numel))

        return asked
    return None


def _layer_classes(model: nn.Module, layer_names: str | Iterable[str] | None) -> tuple[type, ...]:
    if layer_names is None:
        names = list(getattr(model, "_no_split_modules", None) or [])
    elif isinstance(layer_names, str):
        names = [n.strip() for n in layer_names.split(",") if n.strip()]
    else:
        names = list(layer_names)
    by_name = {type(m).__name__: type(m) for m in model.modules()}
    for name in names:
        if name not in by_name:
            raise ValueError(
                f"the layer class {name} to wrap is not in the model ({type(model).__name__}); "
                f"its classes: {', '.join(sorted(by_name))}"
            )
    return tuple(by_name[n] for n in names)


def switch_optimizer_params(
    optimizer: torch.optim.Optimizer, mapping: Mapping[int, torch.Tensor]
) -> None:
    """Replace every parameter of ``optimizer``'s groups by ``mapping[address]``, the address
    being its ``data_ptr`` (an int left on a placeholder tensor, or the tensor's own).

    A parameter without an entry is an error: an optimizer stepping tensors the model no
    longer uses would train nothing.
    """

    def address(p: torch.Tensor) -> int:
        ptr: object = p.data_ptr
        return ptr if isinstance(ptr, int) else int(p.data_ptr())

    try:
        for group in optimizer.param_groups:
            group["params"] = [mapping[address(p)] for p in group["params"]]
    except KeyError as exc:
        raise KeyError(
            "a parameter of the optimizer has no sharded counterpart in the mapping; "
            "stepping the old one would leave the model untrained (the mapping must hold "
            "every parameter's data_ptr)"
        ) from exc


def retie_after_init(
    param_init_fn: Callable[[nn.Module], R], model: nn.Module
) -> Callable[[nn.Module], R]:
    """``param_init_fn`` made to keep tied weights tied: the parameters named in the model's
    ``_tied_weights_keys`` are re-tied to the first one initialised; unchanged without ties."""
    tied = getattr(model, "_tied_weights_keys", None)
    if not tied:
        return param_init_fn
    shared: dict[int, nn.Parameter | None] = {}
    for key in tied:
        path, _, attr = str(key).rpartition(".")
        try:
            param = getattr(model.get_submodule(path), attr)
        except AttributeError:
            continue  # a pattern or a name this model does not have
        shared[id(param)] = None

    def init_keeping_ties(module: nn.Module) -> R:
        to_tie: dict[int, list[str]] = defaultdict(list)
        for name, param in module.named_parameters(recurse=False):
            if id(param) in shared:
                to_tie[id(param)].append(name)
        result = param_init_fn(module)
        target = result if isinstance(result, nn.Module) else module
        for key, names in to_tie.items():
            for name in names:
                first = shared[key]
                if first is None:
                    shared[key] = getattr(target, name)
                else:
                    setattr(target, name, first)
        return result

    return init_keeping_ties


def load_full_state(
    model: nn.Module,
    full_state: Mapping[str, torch.Tensor],
    device: torch.device,
    *,
    is_main: bool,
    cpu_offload: bool = False,
) -> nn.Module:
    """Give a sharded (possibly meta) ``model`` the main process's ``full_state``: each tensor is
    broadcast from the main process and every process keeps its shard; collective.

    Other processes may pass ``{}``. Values take the dtype of the model's tensors (float8
    ones excepted); with ``cpu_offload`` the shards end on the CPU (FSDP2's CPU offload).
    """
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor, distribute_tensor

    template = model.state_dict()
    grouped = dist.is_available() and dist.is_initialized()
    missing = [k for k in template if k not in full_state] if is_main else []
    if grouped:
        box: list[list[str]] = [missing]
        dist.broadcast_object_list(box, src=0)
        missing = box[0]
    if missing:
        raise KeyError(
            f"the full state dict lacks {len(missing)} of the model's entries, e.g. "
            f"{missing[:3]}; it must come from the same model (its state_dict())"
        )
    loaded: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for name, current in template.items():
            mesh = current.device_mesh if isinstance(current, DTensor) else None
            where = torch.device(mesh.device_type) if mesh is not None else device
            if is_main:
                full = full_state[name].detach()
                full = full.to_local() if isinstance(full, DTensor) else full
                full = full.to(where).contiguous()
            else:
                full = torch.empty(current.shape, dtype=current.dtype, device=where)
            if grouped:
                dist.broadcast(full, src=0)
            value: torch.Tensor = full
            if mesh is not None:
                value = distribute_tensor(full, mesh, current.placements, src_data_rank=None)
            if current.dtype.is_floating_point and full.dtype != getattr(
                torch, "float8_e4m3fn", None
            ):
                value = value.to(current.dtype)
            loaded[name] = value.to("cpu") if cpu_offload else value
    model.load_state_dict(loaded, assign=True)
    return model


def checkpoint_layers(
    model: nn.Module, chosen: Callable[[nn.Module], bool] | None, *, offload: bool = False
) -> int:
    """Recompute the activations of the modules ``chosen`` picks (bottom-up, the root aside; the
    root itself when nothing is picked); returns how many. PyTorch's composable ``checkpoint``
    adds hooks, so module paths and state-dict keys stay as they were. ``offload``: what the
    checkpoint keeps for its recompute goes to host memory (``save_on_cpu``)."""
    from torch.distributed._composable import checkpoint

    units = [m for _, m in modules_bottom_up(model)[:-1] if chosen is not None and chosen(m)]
    for module in units or [model]:
        if offload:
            _save_on_cpu_around(module)
        checkpoint(module)
    return len(units or [model])


def _save_on_cpu_around(module: nn.Module) -> None:
    """Run ``module``'s forward inside ``save_on_cpu``: entered before any other pre-hook,
    left after every other hook, so it wraps the checkpoint's own context. Not during the
    checkpoint's recompute in backward, which must save exactly what the forward saved."""
    stack: list[contextlib.ExitStack] = []
    pin = torch.cuda.is_available()

    def enter(_module: nn.Module, _args: tuple[object, ...]) -> None:
        context = contextlib.ExitStack()
        if torch._C._current_graph_task_id() == -1:  # not inside a backward pass
            context.enter_context(torch.autograd.graph.save_on_cpu(pin_memory=pin))
        stack.append(context)

    def leave(_module: nn.Module, _args: tuple[object, ...], _output: object) -> None:
        if stack:
            stack.pop().close()

    module.register_forward_pre_hook(enter, prepend=True)
    module.register_forward_hook(leave, always_call=True)


def device_of(accelerator: object) -> torch.device:
    """The accelerator's device, refusing an object that has none."""
    device = getattr(accelerator, "device", None)
    if device is None:
        raise OverdriveError(
            "expected an Accelerator (it has no device)\n  fix: pass the Accelerator"
        )
    return torch.device(device)
