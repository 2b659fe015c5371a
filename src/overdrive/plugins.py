"""Backend plugins (seed 000, table 2). A field left at None falls through to the other sources.

``Accelerator(deepspeed_plugin=..., fsdp_plugin=..., megatron_lm_plugin=...)`` turns the set
fields into code-level settings, so they win over environment and config file and show up
with their origin in ``overdrive config show``-style reports.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any


class Plugin:
    """Base: maps dataclass fields to canonical setting keys."""

    SECTION: str = ""
    KEYS: dict[str, str] = {}
    SWITCH: str = ""

    def to_settings(self) -> dict[str, Any]:
        """Canonical setting key -> value for every field that was set, plus the backend switch."""
        out: dict[str, Any] = {self.SWITCH: True} if self.SWITCH else {}
        for f in fields(self):  # type: ignore[arg-type]
            key = self.KEYS.get(f.name)
            value = getattr(self, f.name)
            if key is not None and value is not None and not callable(value):
                out[key] = _plain(value)
        return out


def _plain(value: Any) -> Any:
    """A torch enum member (``ShardingStrategy.FULL_SHARD``, ``StateDictType...``) as its
    name, the spelling the settings take; other values as they are."""
    import enum

    return value.name if isinstance(value, enum.Enum) else value


@dataclass
class DeepSpeedPlugin(Plugin):
    """DeepSpeed ZeRO settings; ``hf_ds_config`` is a DeepSpeed JSON file path or a dict."""

    zero_stage: int | None = None
    offload_optimizer_device: str | None = None
    offload_param_device: str | None = None
    gradient_clipping: float | None = None
    gradient_accumulation_steps: int | None = None
    zero3_init_flag: bool | None = None
    zero3_save_16bit_model: bool | None = None
    hf_ds_config: str | dict[str, Any] | None = None

    SECTION = "deepspeed_config"
    SWITCH = "use_deepspeed"
    KEYS = {
        "zero_stage": "deepspeed_config.zero_stage",
        "offload_optimizer_device": "deepspeed_config.offload_optimizer_device",
        "offload_param_device": "deepspeed_config.offload_param_device",
        "gradient_clipping": "deepspeed_config.gradient_clipping",
        "gradient_accumulation_steps": "deepspeed_config.gradient_accumulation_steps",
        "zero3_init_flag": "deepspeed_config.zero3_init_flag",
        "zero3_save_16bit_model": "deepspeed_config.zero3_save_16bit_model",
    }

    def to_settings(self) -> dict[str, Any]:
        out = super().to_settings()
        if isinstance(self.hf_ds_config, str):
            out["deepspeed_config.deepspeed_config_file"] = self.hf_ds_config
        return out


@dataclass
class FullyShardedDataParallelPlugin(Plugin):
    """FSDP settings (both seed spellings resolve to the same keys).

    ``auto_wrap_policy`` may also be a callable, used as is by the FSDP strategy.
    """

    fsdp_version: int | None = None
    sharding_strategy: str | None = None
    reshard_after_forward: bool | None = None
    cpu_offload: bool | None = None
    auto_wrap_policy: str | Callable[..., Any] | None = None
    transformer_cls_names_to_wrap: list[str] | str | None = None
    min_num_params: int | None = None
    backward_prefetch: str | None = None
    forward_prefetch: bool | None = None
    state_dict_type: str | None = None
    cpu_ram_efficient_loading: bool | None = None
    sync_module_states: bool | None = None
    activation_checkpointing: bool | None = None
    use_orig_params: bool | None = None
    # torch's FullStateDictConfig / ShardedStateDictConfig, as the described system takes them:
    # they choose the state-dict type when state_dict_type is not given.
    state_dict_config: Any = None
    optim_state_dict_config: Any = None

    SECTION = "fsdp_config"
    SWITCH = "use_fsdp"
    KEYS = {
        "fsdp_version": "fsdp_config.fsdp_version",
        "sharding_strategy": "fsdp_config.fsdp_sharding_strategy",
        "reshard_after_forward": "fsdp_config.fsdp_reshard_after_forward",
        "cpu_offload": "fsdp_config.fsdp_offload_params",
        "auto_wrap_policy": "fsdp_config.fsdp_auto_wrap_policy",
        "transformer_cls_names_to_wrap": "fsdp_config.fsdp_transformer_layer_cls_to_wrap",
        "min_num_params": "fsdp_config.fsdp_min_num_params",
        "backward_prefetch": "fsdp_config.fsdp_backward_prefetch",
        "forward_prefetch": "fsdp_config.fsdp_forward_prefetch",
        "state_dict_type": "fsdp_config.fsdp_state_dict_type",
        "cpu_ram_efficient_loading": "fsdp_config.fsdp_cpu_ram_efficient_loading",
        "sync_module_states": "fsdp_config.fsdp_sync_module_states",
        "activation_checkpointing": "fsdp_config.fsdp_activation_checkpointing",
        "use_orig_params": "fsdp_config.fsdp_use_orig_params",
    }

    def __post_init__(self) -> None:
        kinds = {
            "FullStateDictConfig": "FULL_STATE_DICT",
            "ShardedStateDictConfig": "SHARDED_STATE_DICT",
        }
        for name in ("state_dict_config", "optim_state_dict_config"):
            given = getattr(self, name)
            if given is None:
                continue
            kind = kinds.get(type(given).__name__.replace("Optim", ""))
            chosen = _plain(self.state_dict_type) if self.state_dict_type is not None else None
            if kind is None or (chosen is not None and chosen != kind):
                from overdrive.errors import ConfigError

                raise ConfigError(
                    f"FullyShardedDataParallelPlugin({name}={type(given).__name__}(...)) "
                    + (
                        f"contradicts state_dict_type={chosen}"
                        if kind
                        else "is not a full or sharded state-dict config"
                    ),
                    key=name,
                    fix="pass FullStateDictConfig or ShardedStateDictConfig matching "
                    "state_dict_type, or state_dict_type alone",
                )
            self.state_dict_type = kind

    def set_auto_wrap_policy(self, model: Any) -> None:
        """Fill what the wrap policy needs from ``model``, as the described system does:
        TRANSFORMER_BASED_WRAP without layer classes takes the model's ``_no_split_modules``;
        a named layer class the model does not contain is an error."""
        from overdrive.errors import ConfigError

        policy = self.auto_wrap_policy
        if not isinstance(policy, str) or policy.upper() not in (
            "TRANSFORMER_BASED_WRAP",
            "TRANSFORMER_LAYER",
        ):
            return
        origin = "code: FullyShardedDataParallelPlugin(transformer_cls_names_to_wrap=...)"
        if self.transformer_cls_names_to_wrap is None:
            no_split = getattr(model, "_no_split_modules", None) or []
            self.transformer_cls_names_to_wrap = list(no_split)
            origin = f"the model's _no_split_modules ({type(model).__name__})"
        names = self.transformer_cls_names_to_wrap
        wanted = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
        present = {type(m).__name__ for m in model.modules()}
        missing = [n for n in wanted if n not in present]
        if missing:
            raise ConfigError(
                f"fsdp_config.fsdp_transformer_layer_cls_to_wrap ({origin}) names "
                f"{', '.join(missing)}, which the model ({type(model).__name__}) does not contain",
                key="fsdp_config.fsdp_transformer_layer_cls_to_wrap",
                fix="name a layer class the model has, e.g. "
                + (", ".join(sorted(present)[:5]) or "its decoder layer class"),
            )


@dataclass
class MegatronLMPlugin(Plugin):
    """Tensor / pipeline parallel settings (docs/parallelism.md).

    ``pipeline_schedule``: ``"1F1B"`` (default) or ``"GPipe"``. ``pipeline_loss_fn`` (code
    only): ``loss_fn(output, target)`` computed on the last pipeline stage for a model that
    is not a transformers causal LM (the target is the ``labels=`` keyword of the call).
    ``pipeline_split_points`` (code only): the indices of the repeated layers that start
    stages 1, 2, ... (default: an even split).
    """

    tp_degree: int | None = None
    pp_degree: int | None = None
    num_micro_batches: int | None = None
    pipeline_schedule: str | None = None
    pipeline_loss_fn: Callable[[Any, Any], Any] | None = None
    pipeline_split_points: list[int] | None = None
    sequence_parallelism: bool | None = None
    recompute_activations: bool | None = None
    use_distributed_optimizer: bool | None = None
    gradient_clipping: float | None = None

    SECTION = "megatron_lm_config"
    SWITCH = "use_megatron_lm"
    KEYS = {
        name: f"megatron_lm_config.{name}"
        for name in (
            "tp_degree",
            "pp_degree",
            "num_micro_batches",
            "pipeline_schedule",
            "sequence_parallelism",
            "recompute_activations",
            "use_distributed_optimizer",
            "gradient_clipping",
        )
    }


@dataclass
class GradientAccumulationPlugin(Plugin):
    """Gradient accumulation: ``num_steps`` micro-batches per optimizer step.

    ``adjust_scheduler``: the scheduler advances once per optimizer step (always true here).
    ``sync_with_dataloader``: the end of a dataloader closes a partial window.
    ``sync_each_batch``: synchronise gradients on every micro-batch (saves memory, costs time).
    """

    num_steps: int | None = None
    adjust_scheduler: bool = True
    sync_with_dataloader: bool = True
    sync_each_batch: bool = False

    KEYS = {"num_steps": "gradient_accumulation_steps"}


@dataclass
class DataLoaderConfiguration(Plugin):
    """How prepared dataloaders shard data (seed 000, table 5). None falls through."""

    split_batches: bool | None = None
    dispatch_batches: bool | None = None
    even_batches: bool | None = None
    use_seedable_sampler: bool | None = None
    non_blocking: bool | None = None
    data_seed: int | None = None
    # Prepared loaders always have state_dict()/load_state_dict() (exact resume), so the
    # described system's switch for torchdata's StatefulDataLoader is accepted as is.
    use_stateful_dataloader: bool = False

    KEYS = {
        name: name
        for name in (
            "split_batches",
            "dispatch_batches",
            "even_batches",
            "use_seedable_sampler",
            "non_blocking",
        )
    }


@dataclass
class ProjectConfiguration(Plugin):
    """Where outputs go and how checkpoints are named (seed 000, table 6)."""

    project_dir: str | None = None
    logging_dir: str | None = None
    automatic_checkpoint_naming: bool | None = None
    total_limit: int | None = None
    iteration: int = 0
    save_on_each_node: bool = False

    KEYS = {
        name: name
        for name in ("project_dir", "logging_dir", "automatic_checkpoint_naming", "total_limit")
    }


@dataclass
class ParallelismConfig(Plugin):
    """Sizes of the parallel layout's dimensions (the described system's ``ParallelismConfig``).

    ``dp_replicate_size`` x ``dp_shard_size`` processes form the data-parallel layout (HSDP
    with FSDP); ``tp_size`` processes form one tensor-parallel group (docs/parallelism.md);
    ``pp_size`` (overdrive's, not the described system's) splits the model into that many
    pipeline stages, each tensor-parallel and sharded (FSDP2) or replicated over the rest.
    ``tp_plan`` (code only) maps module-name patterns (``fnmatch``, ``*`` for any part) to
    ``"colwise"``, ``"rowwise"``, ``"colwise_rep"`` or ``"rowwise_rep"``; without it a
    transformers model's own plan is used. ``sequence_parallel`` (code only): run the norms
    between the split modules on slices of the sequence (as
    ``megatron_lm_config.sequence_parallelism`` does under MEGATRON_LM); a plan's own
    ``"sequence_parallel"`` entries do the same for the modules they name. ``pp_loss_fn``
    and ``pp_split_points`` (code only, overdrive's): the pipeline's ``loss_fn(output,
    target)`` for a model that is not a transformers causal LM, and the indices of the
    layers that start stages 1, 2, ... (as ``MegatronLMPlugin``'s ``pipeline_*`` give them
    under MEGATRON_LM, without choosing that backend). Sizes left unset
    read ``PARALLELISM_CONFIG_<NAME>`` from the environment. Context parallelism
    (``cp_size`` above 1) describes a mesh, but training with it is not available yet and is
    refused when an Accelerator is made with it.
    """

    dp_replicate_size: int | None = None
    dp_shard_size: int | None = None
    tp_size: int | None = None
    cp_size: int | None = None
    tp_plan: dict[str, str] | None = None
    sequence_parallel: bool = False
    pp_size: int | None = None
    pp_loss_fn: Callable[[Any, Any], Any] | None = None
    pp_split_points: list[int] | None = None

    KEYS = {
        "dp_replicate_size": "parallelism_config.parallelism_config_dp_replicate_size",
        "dp_shard_size": "parallelism_config.parallelism_config_dp_shard_size",
        "tp_size": "parallelism_config.parallelism_config_tp_size",
        "pp_size": "parallelism_config.parallelism_config_pp_size",
    }

    def __post_init__(self) -> None:
        import os

        # Sizes not given read the described system's PARALLELISM_CONFIG_* variables.
        for name in ("dp_replicate_size", "dp_shard_size", "tp_size", "cp_size", "pp_size"):
            value = os.environ.get(f"PARALLELISM_CONFIG_{name.upper()}")
            if getattr(self, name) is None and value is not None:
                setattr(self, name, int(value))
        if self.tp_plan is not None:
            from overdrive.parallel.tp_plan import check_plan

            check_plan(self.tp_plan, "ParallelismConfig(tp_plan=...)")

    def to_settings(self) -> dict[str, Any]:
        """Refuses context parallelism: describing a layout with it is fine (a mesh for
        another tool), training with it is not available yet."""
        from overdrive.errors import ConfigError

        if self.cp_size is not None and self.cp_size > 1:
            raise ConfigError(
                f"ParallelismConfig(cp_size={self.cp_size}): context parallelism is not "
                "available yet in this version of overdrive",
                key="cp_size",
                fix="drop cp_size (or set it to 1); tp_size, dp_shard_size and "
                "dp_replicate_size are available",
            )
        return super().to_settings()

    # --- the device mesh, named as the described system names it -------------------------
    def _sizes(self) -> dict[str, int]:
        return {
            "pp": self.pp_size or 1,
            "dp_replicate": self.dp_replicate_size or 1,
            "dp_shard": self.dp_shard_size or 1,
            "cp": self.cp_size or 1,
            "tp": self.tp_size or 1,
        }

    def _active(self, names: tuple[str, ...]) -> tuple[str, ...]:
        sizes = self._sizes()
        return tuple(n for n in names if sizes[n] > 1)

    @property
    def total_size(self) -> int:
        """Processes the layout needs."""
        total = 1
        for size in self._sizes().values():
            total *= size
        return total

    @property
    def dp_dim_names(self) -> tuple[str, ...]:
        return self._active(("dp_replicate", "dp_shard"))

    @property
    def dp_shard_cp_dim_names(self) -> tuple[str, ...]:
        return self._active(("dp_shard", "cp"))

    @property
    def dp_cp_dim_names(self) -> tuple[str, ...]:
        return self._active(("dp_replicate", "dp_shard", "cp"))

    @property
    def non_dp_dim_names(self) -> tuple[str, ...]:
        return self._active(("cp", "tp"))

    def _get_mesh(self) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """(dimension names, sizes) of the mesh: the dimensions above 1, outermost first."""
        names = self._active(("pp", "dp_replicate", "dp_shard", "cp", "tp"))
        return names, tuple(self._sizes()[n] for n in names)

    def build_device_mesh(self, device_type: str) -> Any:
        """The device mesh of this layout, with the flattened ``dp``, ``dp_shard_cp`` and
        ``dp_cp`` dimensions the described system adds; needs a process group."""
        from torch.distributed import device_mesh

        names, shape = self._get_mesh()
        mesh = device_mesh.init_device_mesh(device_type, shape, mesh_dim_names=names)
        for dims, flat in (
            (self.dp_dim_names, "dp"),
            (self.dp_shard_cp_dim_names, "dp_shard_cp"),
            (self.dp_cp_dim_names, "dp_cp"),
        ):
            if dims:
                mesh[dims]._flatten(flat)
        return mesh

    @property
    def tp_enabled(self) -> bool:
        return (self.tp_size or 1) > 1
