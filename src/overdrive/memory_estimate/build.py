"""A ModelSpec from a transformers config file or ``module:Class``, built on the meta device.

Nothing is downloaded and no weights are allocated: the model is constructed under
``torch.device("meta")`` and only its parameters' shapes are read.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from overdrive.errors import ConfigError
from overdrive.memory_estimate.spec import ModelSpec, TensorSpec

_NO_DOWNLOAD = (
    "overdrive builds the model from a local config and downloads nothing: save one with "
    "`transformers.AutoConfig.from_pretrained(NAME).save_pretrained(DIR)` and pass DIR/config.json"
)


def load_spec(
    model: str, *, library_name: str | None = None, trust_remote_code: bool = False
) -> ModelSpec:
    """Describe ``model``: a config.json (or a directory holding one), ``module:Class``,
    ``path/to/file.py:Class``, or with ``library_name="timm"`` a timm model name."""
    if library_name == "timm":
        return _from_timm(model)
    path = Path(model)
    if path.is_dir():
        path = path / "config.json"
        if not path.is_file():
            raise ConfigError(
                f"model {model}: the directory holds no config.json",
                key="model",
                fix="pass the config.json of a transformers model, or module:Class",
            )
    if path.is_file():
        return _from_config_file(path, trust_remote_code)
    if ":" in model and library_name != "transformers":
        return _from_class(model)
    if library_name == "transformers":
        raise ConfigError(
            f"model {model}: --library_name transformers needs a config.json (or a directory "
            "holding one); no such file",
            key="model",
            fix=f"pass the path of a local config.json; {_NO_DOWNLOAD}",
        )
    raise ConfigError(
        f"model {model}: no such file, and not module:Class",
        key="model",
        fix=f"pass a transformers config.json path, a directory holding one, or "
        f"module:Class (an nn.Module constructed with no arguments); {_NO_DOWNLOAD}",
    )


def _from_config_file(path: Path, trust_remote_code: bool) -> ModelSpec:
    if importlib.util.find_spec("transformers") is None:
        raise ConfigError(
            f"model {path}: a transformers config needs transformers installed",
            key="model",
            fix="pip install transformers",
        )
    try:
        json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"model {path}: not a JSON config file ({exc})",
            key="model",
            fix="pass the config.json a transformers model was saved with",
        ) from None
    import torch
    import transformers

    try:
        config = transformers.AutoConfig.from_pretrained(
            str(path), trust_remote_code=trust_remote_code
        )
        with torch.device("meta"):
            module = _model_from_config(transformers, config, trust_remote_code)
    except (
        ValueError,
        KeyError,
        OSError,
        ImportError,
        TypeError,
        AttributeError,
        RuntimeError,
    ) as exc:
        raise ConfigError(
            f"model {path}: transformers could not build a model from it: {exc}",
            key="model",
            fix="check the config's model_type/architectures (custom code needs "
            f"--trust_remote_code); {_NO_DOWNLOAD}",
        ) from None
    return spec_from_module(module, source=str(path), config=config)


def _model_from_config(transformers: Any, config: Any, trust_remote_code: bool) -> Any:
    """The architecture the config names, else a causal LM, else the base model."""
    for name in getattr(config, "architectures", None) or []:
        cls = getattr(transformers, name, None)
        if cls is not None:
            return cls(config)
    try:
        return transformers.AutoModelForCausalLM.from_config(
            config, trust_remote_code=trust_remote_code
        )
    except ValueError:
        return transformers.AutoModel.from_config(config, trust_remote_code=trust_remote_code)


def _import_class(target: str) -> Any:
    where, _, name = target.rpartition(":")
    fix = (
        "pass module:Class with the module importable from here (e.g. mypkg.models:Net) or "
        "path/to/file.py:Class"
    )
    try:
        if where.endswith(".py"):
            spec = importlib.util.spec_from_file_location(Path(where).stem, where)
            if spec is None or spec.loader is None or not Path(where).is_file():
                raise ImportError(f"no file {where}")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            if os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())
            module = importlib.import_module(where)
    except Exception as exc:  # the user's module may raise anything while importing
        raise ConfigError(
            f"model {target}: cannot import {where!r}: {type(exc).__name__}: {exc}",
            key="model",
            fix=fix,
        ) from None
    cls = getattr(module, name, None)
    if cls is None:
        raise ConfigError(f"model {target}: {where} has no {name!r}", key="model", fix=fix)
    return cls


def _from_class(target: str) -> ModelSpec:
    import torch

    cls = _import_class(target)
    try:
        with torch.device("meta"):
            module = cls()
    except Exception as exc:  # the user's constructor may raise anything
        raise ConfigError(
            f"model {target}: {target.rpartition(':')[2]}() failed on the meta device: "
            f"{type(exc).__name__}: {exc}",
            key="model",
            fix="pass a class whose constructor needs no arguments (wrap yours in a subclass "
            "that fills them in)",
        ) from None
    if not isinstance(module, torch.nn.Module):
        raise ConfigError(
            f"model {target}: {type(module).__name__} is not a torch.nn.Module",
            key="model",
            fix="pass an nn.Module class",
        )
    return spec_from_module(module, source=target, config=getattr(module, "config", None))


def _from_timm(name: str) -> ModelSpec:
    if importlib.util.find_spec("timm") is None:
        raise ConfigError(
            f"--library_name timm: timm is not installed (model {name})",
            key="library_name",
            fix="pip install timm",
        )
    import timm
    import torch

    try:
        with torch.device("meta"):
            module = timm.create_model(name, pretrained=False)
    except Exception as exc:  # timm's unknown-model error type varies between versions
        raise ConfigError(
            f"model {name}: timm cannot build it: {exc}",
            key="model",
            fix="pass a name from timm.list_models()",
        ) from None
    return spec_from_module(module, source=f"timm:{name}")


def _repeated_layers(module: Any) -> tuple[str | None, int]:
    """The ModuleList/Sequential of one class holding the most parameters: (name, count)."""
    import torch

    best: tuple[str | None, int, int] = (None, 0, 0)
    for name, child in module.named_modules():
        if not isinstance(child, torch.nn.ModuleList | torch.nn.Sequential):
            continue
        kids = list(child.children())
        if len(kids) < 2 or len({type(k) for k in kids}) != 1:
            continue
        size = sum(p.numel() for p in child.parameters())
        if size > best[2]:
            best = (name, len(kids), size)
    return best[0], best[1]


def _tp_dims(module: Any, plan: dict[str, str] | None, layers: str | None) -> dict[str, int]:
    """Parameter name -> the dim tp splits. With a plan: colwise splits dim 0 (weight and
    bias), rowwise the input dim of a Linear (its bias is replicated) and dim 0 of an
    Embedding (the vocabulary); other styles replicate. Without one: every nn.Linear weight
    inside the repeated layers, split on dim 0."""
    import torch

    dims: dict[str, int] = {}
    for mod_name, mod in module.named_modules():
        style = _plan_style(plan, mod_name) if plan else None
        if plan is None:
            inside = layers is not None and (layers == "" or mod_name.startswith(layers + "."))
            style = "colwise" if inside and isinstance(mod, torch.nn.Linear) else None
        if style is None:
            continue
        embedding = isinstance(mod, torch.nn.Embedding)
        for pname, _ in mod.named_parameters(recurse=False):
            full = f"{mod_name}.{pname}" if mod_name else pname
            if "colwise" in style or (embedding and "rowwise" in style):
                dims[full] = 0
            elif "rowwise" in style and pname == "weight":
                dims[full] = 1
    return dims


def _plan_style(plan: dict[str, str], name: str) -> str | None:
    for pattern, style in plan.items():
        regex = re.escape(pattern).replace(r"\*", r"[^.]+")
        if re.fullmatch(regex, name):
            return style
    return None


def _dim(config: Any, *names: str) -> int | None:
    for name in names:
        value = getattr(config, name, None) if config is not None else None
        if isinstance(value, int) and value > 0:
            return value
    return None


def spec_from_module(module: Any, *, source: str, config: Any = None) -> ModelSpec:
    """Describe a built (meta or real) nn.Module."""
    layers, count = _repeated_layers(module)
    raw_plan = getattr(module, "tp_plan", None) or getattr(module, "_tp_plan", None)
    plan = dict(raw_plan) if isinstance(raw_plan, dict) and raw_plan else None
    dims = _tp_dims(module, plan, layers)
    prefix = "" if layers in (None, "") else layers + "."
    keys: dict[int, str] = {}
    tensors = []
    seen_layers = False
    for name, param in module.named_parameters(remove_duplicate=False):
        layer = None
        if layers is not None and name.startswith(prefix):
            layer = int(name[len(prefix) :].split(".", 1)[0])
            seen_layers = True
        key = keys.setdefault(id(param), name)
        tensors.append(
            TensorSpec(
                name=name,
                shape=tuple(param.shape),
                key=key,
                layer=layer,
                before_layers=layer is None and not seen_layers,
                tp_dim=dims.get(key, dims.get(name)),
            )
        )
    if plan is not None:
        tp_words = "the model's own tp_plan (" + ", ".join(f"{k}: {v}" for k, v in plan.items())
        tp_words += "); every other parameter replicated on each tp rank"
    elif layers is not None:
        where = layers or "the top-level Sequential"
        tp_words = (
            f"no tp_plan on the model: assumed every nn.Linear weight in {where} split over tp; "
            "embeddings, norms, biases and everything outside the layers replicated"
        )
    else:
        tp_words = "no tp_plan and no repeated layers: nothing split by tp"
    return ModelSpec(
        source=source,
        class_name=type(module).__name__,
        tensors=tuple(tensors),
        num_layers=count,
        layers_name=layers,
        hidden_size=_dim(config, "hidden_size", "n_embd", "d_model"),
        num_heads=_dim(config, "num_attention_heads", "n_head"),
        num_kv_heads=_dim(config, "num_key_value_heads"),
        vocab_size=_dim(config, "vocab_size"),
        max_positions=_dim(config, "max_position_embeddings", "n_positions", "max_seq_len"),
        tp_plan=tp_words,
    )
