"""Backend plugins (Hugging Face Accelerate docs, Reference > Utilities, Plugins). A field
left at None falls through to the other sources.

``Accelerator(deepspeed_plugin=..., fsdp_plugin=..., megatron_lm_plugin=...)`` turns the set
fields into code-level settings, so they win over environment and config file and show up
with their origin in ``overdrive config show``-style reports.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from typing import Any

from overdrive.arguments.megatron_plugin import MegatronLMPlugin
from overdrive.arguments.parallel_handlers import (
    DeepSpeedSequenceParallelConfig,
    TorchContextParallelConfig,
)
from overdrive.arguments.plugin_base import Plugin, _plain, refuse_fields
from overdrive.errors import ConfigError
from overdrive.parallel.mesh import init_mesh
from overdrive.parallel.mesh_shape import mesh_shape
from overdrive.parallel.tp_plan import check_plan

__all__ = [
    "DataLoaderConfiguration",
    "DeepSpeedPlugin",
    "FullyShardedDataParallelPlugin",
    "GradientAccumulationPlugin",
    "MegatronLMPlugin",
    "ParallelismConfig",
    "Plugin",
    "ProjectConfiguration",
]


@dataclass
class DeepSpeedPlugin(Plugin):
    """DeepSpeed ZeRO settings; ``hf_ds_config`` is a DeepSpeed JSON file path or a dict.

    The parameters follow Hugging Face Accelerate's order. ``is_train_batch_min=False``,
    ``transformer_moe_cls_names`` and ``enable_msamp`` ask for what overdrive's DeepSpeed
    strategy does not do (it sizes the micro-batch from the first prepared loader, marks no
    MoE leaf modules, and runs fp8 through torchao, not MS-AMP): they are refused by name.
    """

    hf_ds_config: Any = None
    gradient_accumulation_steps: int | None = None
    gradient_clipping: float | None = None
    zero_stage: int | None = None
    is_train_batch_min: bool = True
    offload_optimizer_device: str | None = None
    offload_param_device: str | None = None
    offload_optimizer_nvme_path: str | None = None
    offload_param_nvme_path: str | None = None
    zero3_init_flag: bool | None = None
    zero3_save_16bit_model: bool | None = None
    transformer_moe_cls_names: str | None = None
    enable_msamp: bool | None = None
    msamp_opt_level: str | None = None

    SECTION = "deepspeed_config"
    SWITCH = "use_deepspeed"
    KEYS = {
        name: f"deepspeed_config.{name}"
        for name in (
            "zero_stage",
            "offload_optimizer_device",
            "offload_param_device",
            "offload_optimizer_nvme_path",
            "offload_param_nvme_path",
            "gradient_clipping",
            "gradient_accumulation_steps",
            "zero3_init_flag",
            "zero3_save_16bit_model",
        )
    }

    def to_settings(self) -> dict[str, Any]:
        refuse_fields(
            self,
            {
                "is_train_batch_min": (True, "overdrive takes the micro-batch size from the "
                                       "first prepared dataloader"),
                "transformer_moe_cls_names": (None, "ZeRO-3 MoE leaf modules are not "
                                              "available in overdrive"),
                "enable_msamp": ((None, False), "MS-AMP is not an overdrive backend; fp8 runs "
                                 "through torchao (mixed_precision='fp8')"),
                "msamp_opt_level": (None, "MS-AMP is not an overdrive backend"),
            },
        )  # fmt: skip
        out = super().to_settings()
        if isinstance(self.hf_ds_config, (str, os.PathLike)):
            out["deepspeed_config.deepspeed_config_file"] = os.fspath(self.hf_ds_config)
        return out


@dataclass
class FullyShardedDataParallelPlugin(Plugin):
    """FSDP settings (both documented spellings resolve to the same keys), in Hugging Face
    Accelerate's parameter order.

    ``auto_wrap_policy`` may also be a callable, used as is by the FSDP strategy;
    ``cpu_offload`` may be torch's ``CPUOffload`` / ``CPUOffloadPolicy`` object. Precision
    comes from ``mixed_precision`` (not ``mixed_precision_policy``), and ``ignored_modules``,
    ``param_init_fn`` and ``activation_checkpointing_offload`` are refused by name: overdrive's
    FSDP does not take them; ``limit_all_gathers=False`` warns that it changes nothing.
    """

    fsdp_version: int | None = None
    sharding_strategy: str | None = None
    reshard_after_forward: bool | None = None
    backward_prefetch: str | None = None
    mixed_precision_policy: Any = None
    auto_wrap_policy: str | Callable[..., Any] | None = None
    cpu_offload: Any = None
    ignored_modules: Any = None
    state_dict_type: str | None = None
    # torch's FullStateDictConfig / ShardedStateDictConfig, as Hugging Face Accelerate takes
    # them: they choose the state-dict type when state_dict_type is not given.
    state_dict_config: Any = None
    optim_state_dict_config: Any = None
    limit_all_gathers: bool = True
    use_orig_params: bool | None = None
    param_init_fn: Callable[..., Any] | None = None
    sync_module_states: bool | None = None
    forward_prefetch: bool | None = None
    activation_checkpointing: bool | None = None
    activation_checkpointing_offload: bool | None = None
    cpu_ram_efficient_loading: bool | None = None
    transformer_cls_names_to_wrap: list[str] | str | None = None
    min_num_params: int | None = None

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

    def to_settings(self) -> dict[str, Any]:
        refuse_fields(
            self,
            {
                "mixed_precision_policy": (None, "precision comes from mixed_precision; pass "
                                           "Accelerator(mixed_precision='bf16') instead"),
                "ignored_modules": (None, "every module is sharded"),
                "param_init_fn": (None, "overdrive fills a meta-device model from the main "
                                  "process itself (cpu_ram_efficient_loading)"),
                "activation_checkpointing_offload": ((None, False), "checkpointed "
                                                     "activations stay on the device"),
            },
        )  # fmt: skip
        if not self.limit_all_gathers:
            import warnings

            warnings.warn(
                "FullyShardedDataParallelPlugin(limit_all_gathers=False) has no effect: "
                "overdrive's FSDP1 keeps torch's rate limit and FSDP2 has none to switch off",
                UserWarning,
                stacklevel=3,
            )
        return super().to_settings()

    def __post_init__(self) -> None:
        offload = self.cpu_offload
        if offload is not None and not isinstance(offload, bool):
            # torch's CPUOffload(offload_params=...) (FSDP1) or CPUOffloadPolicy (FSDP2)
            self.cpu_offload = bool(getattr(offload, "offload_params", True))
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
        """Fill what the wrap policy needs from ``model``, as Hugging Face Accelerate does:
        TRANSFORMER_BASED_WRAP without layer classes takes the model's ``_no_split_modules``;
        a named layer class the model does not contain is an error."""
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
    # overdrive's exact scaling of a window the end of a dataloader closes early (k/m);
    # None falls through to the setting (off: Hugging Face Accelerate's 1/k).
    exact_accumulation: bool | None = None

    KEYS = {"num_steps": "gradient_accumulation_steps", "exact_accumulation": "exact_accumulation"}


@dataclass
class DataLoaderConfiguration(Plugin):
    """How prepared dataloaders shard data (``DataLoaderConfiguration``). None falls through."""

    split_batches: bool | None = None
    dispatch_batches: bool | None = None
    even_batches: bool | None = None
    use_seedable_sampler: bool | None = None
    data_seed: int | None = None
    non_blocking: bool | None = None
    # Hugging Face Accelerate's switch for torchdata's StatefulDataLoader: load_state then
    # continues each prepared loader mid-epoch, there and here.
    use_stateful_dataloader: bool = False
    # overdrive's mid-epoch continuation for plain loaders (None falls through to the
    # setting; off: Hugging Face Accelerate's restart, the script skipping by itself).
    exact_resume: bool | None = None

    KEYS = {
        name: name
        for name in (
            "split_batches",
            "dispatch_batches",
            "even_batches",
            "use_seedable_sampler",
            "non_blocking",
            "exact_resume",
        )
    }


@dataclass
class ProjectConfiguration(Plugin):
    """Where outputs go and how checkpoints are named (``ProjectConfiguration``)."""

    project_dir: str | None = None
    logging_dir: str | None = None
    automatic_checkpoint_naming: bool | None = None
    total_limit: int | None = None
    iteration: int = 0
    save_on_each_node: bool = False
    # overdrive's: "accelerate" makes save_state write Hugging Face Accelerate's layout (None
    # falls through to the checkpoint_format setting, "overdrive" by default).
    checkpoint_format: str | None = None

    KEYS = {
        name: name
        for name in (
            "project_dir",
            "logging_dir",
            "automatic_checkpoint_naming",
            "total_limit",
            "checkpoint_format",
        )
    }


@dataclass
class ParallelismConfig(Plugin):
    """Sizes of the parallel layout's dimensions (Hugging Face Accelerate's ``ParallelismConfig``).

    ``dp_replicate_size`` x ``dp_shard_size`` processes form the data-parallel layout (HSDP
    with FSDP); ``tp_size`` processes form one tensor-parallel group (docs/parallelism.md);
    ``pp_size`` (overdrive's, not Hugging Face Accelerate's) splits the model into that many
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
    under MEGATRON_LM, without choosing that backend). Sizes and backends left unset
    read ``PARALLELISM_CONFIG_<NAME>`` from the environment. ``cp_size`` processes split each
    sequence (context parallelism, under FSDP2; ``cp_handler``'s ``cp_comm_strategy`` says how
    they pass keys and values; the loop shards its batch in
    ``accelerator.maybe_context_parallel(...)``). Sequence parallelism (``sp_size`` above 1)
    describes a mesh, but training with it is not available yet and is refused when an
    Accelerator is made with it. The positional
    parameters are Hugging Face Accelerate's; overdrive's own (from ``tp_plan`` on) are
    keyword-only.
    """

    dp_replicate_size: int | None = None
    dp_shard_size: int | None = None
    tp_size: int | None = None
    cp_size: int | None = None
    cp_backend: str | None = None
    sp_size: int | None = None
    sp_backend: str | None = None
    tp_handler: Any = None
    cp_handler: Any = None
    sp_handler: Any = None
    _: KW_ONLY
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
        "cp_size": "parallelism_config.parallelism_config_cp_size",
    }

    def __post_init__(self) -> None:
        import os

        # Sizes not given read Hugging Face Accelerate's PARALLELISM_CONFIG_* variables.
        for name in ("dp_replicate_size", "dp_shard_size", "tp_size", "cp_size", "sp_size"):
            value = os.environ.get(f"PARALLELISM_CONFIG_{name.upper()}")
            if getattr(self, name) is None and value is not None:
                setattr(self, name, int(value))
        if self.pp_size is None and "PARALLELISM_CONFIG_PP_SIZE" in os.environ:
            self.pp_size = int(os.environ["PARALLELISM_CONFIG_PP_SIZE"])
        for name, default in (("cp_backend", "torch"), ("sp_backend", "deepspeed")):
            if getattr(self, name) is None:
                setattr(self, name, os.environ.get(f"PARALLELISM_CONFIG_{name.upper()}", default))
        self._default_handlers()
        if self.tp_plan is not None:
            check_plan(self.tp_plan, "ParallelismConfig(tp_plan=...)")

    def _default_handlers(self) -> None:
        """As Hugging Face Accelerate does: ``cp_size`` / ``sp_size`` above 1 get their
        backend's options object (read from ``PARALLELISM_CONFIG_*``) unless one is given."""
        if (self.cp_size or 1) > 1:
            if self.cp_handler is None:
                self.cp_handler = TorchContextParallelConfig()
            elif not isinstance(self.cp_handler, TorchContextParallelConfig):
                raise ValueError(
                    f"ParallelismConfig's cp_backend={self.cp_backend} requires "
                    f"TorchContextParallelConfig, but cp_handler was set to {type(self.cp_handler)}"
                )
        if (self.sp_size or 1) > 1 and self.sp_handler is None:
            self.sp_handler = DeepSpeedSequenceParallelConfig()

    def to_settings(self) -> dict[str, Any]:
        """The sizes, and the context-parallel backend and its ``cp_handler``'s
        ``cp_comm_strategy`` when ``cp_size`` is above 1. Refuses sequence parallelism:
        describing a layout with it is fine (a mesh for another tool), training with it is
        not available yet."""
        sp = self.sp_size
        if sp is not None and sp > 1:
            raise ConfigError(
                f"ParallelismConfig(sp_size={sp}): sequence (DeepSpeed Ulysses) parallelism "
                "is not available yet in this version of overdrive",
                key="sp_size",
                fix="drop sp_size (or set it to 1); tp_size, cp_size, dp_shard_size and "
                "dp_replicate_size are available",
            )
        out = super().to_settings()
        if (self.cp_size or 1) > 1:
            out["parallelism_config.parallelism_config_cp_backend"] = self.cp_backend
            strategy = getattr(self.cp_handler, "cp_comm_strategy", None)
            if strategy is not None:
                out["parallelism_config.parallelism_config_cp_comm_strategy"] = strategy
        return out

    # --- the device mesh, named as Hugging Face Accelerate names it -------------------------
    def _sizes(self) -> dict[str, int]:
        return {
            "pp": self.pp_size or 1,
            "dp_replicate": self.dp_replicate_size or 1,
            "dp_shard": self.dp_shard_size or 1,
            "cp": self.cp_size or 1,
            "sp": self.sp_size or 1,
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
        return self._active(("cp", "sp", "tp"))

    def _get_mesh(self) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """(dimension names, sizes) of the mesh: the dimensions above 1, outermost first
        (the order every overdrive mesh has: ``parallel/mesh_shape.py``)."""
        return mesh_shape(self._sizes())

    def build_device_mesh(self, device_type: str) -> Any:
        """The device mesh of this layout, with the flattened ``dp``, ``dp_shard_cp`` and
        ``dp_cp`` dimensions Hugging Face Accelerate adds; needs a process group. Built by the
        code that builds a strategy's mesh (``parallel/mesh.py``)."""
        mesh = init_mesh(device_type, self._sizes())
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

    @property
    def cp_enabled(self) -> bool:
        return (self.cp_size or 1) > 1


def plugin_aliases(
    deepspeed_plugin: Any,
    deepspeed_plugins: Any,
    torch_tp_plugin: Any,
    parallelism_config: ParallelismConfig | None,
    *,
    both_accumulations: bool = False,
) -> tuple[DeepSpeedPlugin | None, ParallelismConfig | None]:
    """The DeepSpeed plugin and parallelism config ``Accelerator(...)`` runs with, from
    Hugging Face Accelerate's other spellings of them: ``deepspeed_plugins`` (a plugin, or a
    dict of named plugins) and the deprecated ``torch_tp_plugin`` (its ``tp_size``).

    overdrive runs one DeepSpeed configuration per Accelerator: a dict of several plugins
    (Accelerate's switchable ones) is refused by name. ``both_accumulations``: both
    ``gradient_accumulation_steps`` and ``gradient_accumulation_plugin`` were given (refused).
    """
    if both_accumulations:
        raise ConfigError(
            "gradient accumulation is given twice: gradient_accumulation_steps and "
            "gradient_accumulation_plugin",
            key="gradient_accumulation_steps",
            fix="pass GradientAccumulationPlugin(num_steps=...) alone",
        )

    if deepspeed_plugin is not None and deepspeed_plugins is not None:
        raise ConfigError(
            "Accelerator got both deepspeed_plugin and deepspeed_plugins",
            key="deepspeed_plugins",
            fix="pass one of them",
        )
    given = deepspeed_plugin if deepspeed_plugin is not None else deepspeed_plugins
    argument = "deepspeed_plugin" if deepspeed_plugin is not None else "deepspeed_plugins"
    if isinstance(given, dict):
        if not all(isinstance(p, DeepSpeedPlugin) for p in given.values()):
            raise TypeError(f"`{argument}` must hold DeepSpeedPlugin objects.")
        if len(given) != 1:
            raise ConfigError(
                f"Accelerator({argument}={{{', '.join(map(repr, given))}}}): overdrive runs one "
                "DeepSpeed configuration per Accelerator and cannot switch between several",
                key=argument,
                fix="pass the DeepSpeedPlugin of the model you train",
            )
        given = next(iter(given.values()))
    if given is not None and not isinstance(given, DeepSpeedPlugin):
        raise TypeError(f"`{argument}` must be a DeepSpeedPlugin object.")
    if torch_tp_plugin is not None:
        import warnings

        warnings.warn(
            "`TorchTensorParallelPlugin` is deprecated (as in Hugging Face Accelerate): pass "
            "ParallelismConfig(tp_size=...) instead",
            FutureWarning,
            stacklevel=3,
        )
        if parallelism_config is None:
            parallelism_config = ParallelismConfig(tp_size=getattr(torch_tp_plugin, "tp_size", 1))
    return given, parallelism_config
