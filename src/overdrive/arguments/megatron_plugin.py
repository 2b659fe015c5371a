"""``MegatronLMPlugin``: Hugging Face Accelerate's Megatron-LM parameters, run on overdrive's
engine where it has them and refused by name where they configure the Megatron-LM library."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, fields
from typing import Any, ClassVar

from overdrive.arguments.plugin_base import Plugin, refuse_fields


@dataclass
class MegatronLMPlugin(Plugin):
    """Tensor / pipeline parallel settings (docs/parallelism.md), with Hugging Face
    Accelerate's parameters in its order.

    overdrive runs ``tp_degree``, ``pp_degree``, ``num_micro_batches``, ``gradient_clipping``,
    ``sequence_parallelism``, ``recompute_activations`` and ``use_distributed_optimizer`` on
    its own engine; the other parameters configure NVIDIA's Megatron-LM library (its training
    loop, datasets, schedules and logging), which overdrive does not drive: each is refused
    by name when set away from its default. overdrive's own, keyword-only:
    ``pipeline_schedule``: ``"1F1B"`` (default) or ``"GPipe"``. ``pipeline_loss_fn`` (code
    only): ``loss_fn(output, target)`` computed on the last pipeline stage for a model that
    is not a transformers causal LM (the target is the ``labels=`` keyword of the call).
    ``pipeline_split_points`` (code only): the indices of the repeated layers that start
    stages 1, 2, ... (default: an even split).
    """

    tp_degree: int | None = None
    pp_degree: int | None = None
    use_custom_fsdp: bool | None = None
    overlap_cpu_optimizer_d2h_h2d: bool | None = None
    no_load_optim: bool | None = None
    eod_mask_loss: bool | None = None
    no_save_optim: bool | None = None
    optimizer_cpu_offload: bool | None = None
    use_precision_aware_optimizer: bool | None = None
    decoder_last_pipeline_num_layers: int | None = None
    recompute_granularity: str | None = None
    recompute_method: str | None = None
    recompute_num_layers: int | None = None
    attention_backend: Any = None
    expert_model_parallel_size: int | None = None
    context_parallel_size: int | None = None
    attention_dropout: float | None = None
    hidden_dropout: float | None = None
    attention_softmax_in_fp32: bool | None = None
    expert_tensor_parallel_size: int | None = None
    calculate_per_token_loss: bool | None = None
    use_rotary_position_embeddings: bool | None = None
    num_micro_batches: int | None = None
    gradient_clipping: float | None = None
    sequence_parallelism: bool | None = None
    recompute_activations: bool | None = None
    use_distributed_optimizer: bool | None = None
    pipeline_model_parallel_split_rank: int | None = None
    num_layers_per_virtual_pipeline_stage: int | None = None
    is_train_batch_min: bool = True
    train_iters: int | None = None
    train_samples: int | None = None
    weight_decay_incr_style: str = "constant"
    start_weight_decay: float | None = None
    end_weight_decay: float | None = None
    lr_decay_style: str = "linear"
    lr_decay_iters: int | None = None
    lr_decay_samples: int | None = None
    lr_warmup_iters: int | None = None
    lr_warmup_samples: int | None = None
    lr_warmup_fraction: float | None = None
    min_lr: float = 0
    consumed_samples: list[int] | None = None
    no_wd_decay_cond: Callable[..., Any] | None = None
    scale_lr_cond: Callable[..., Any] | None = None
    lr_mult: float = 1.0
    megatron_dataset_flag: bool = False
    seq_length: int | None = None
    encoder_seq_length: int | None = None
    decoder_seq_length: int | None = None
    tensorboard_dir: str | None = None
    set_all_logging_options: bool = False
    eval_iters: int = 100
    eval_interval: int = 1000
    return_logits: bool = False
    custom_train_step_class: Any = None
    custom_train_step_kwargs: dict[str, Any] | None = None
    custom_model_provider_function: Callable[..., Any] | None = None
    custom_prepare_model_function: Callable[..., Any] | None = None
    custom_megatron_datasets_provider_function: Callable[..., Any] | None = None
    custom_get_batch_function: Callable[..., Any] | None = None
    custom_loss_function: Callable[..., Any] | None = None
    other_megatron_args: dict[str, Any] | None = None
    _: KW_ONLY
    pipeline_schedule: str | None = None
    pipeline_loss_fn: Callable[[Any, Any], Any] | None = None
    pipeline_split_points: list[int] | None = None

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
    # Sizes overdrive's engine takes at 1 (none of that parallelism is available beyond it).
    _ONE_ALLOWED: ClassVar[tuple[str, ...]] = (
        "expert_model_parallel_size",
        "context_parallel_size",
        "expert_tensor_parallel_size",
    )

    def to_settings(self) -> dict[str, Any]:
        """Refuses the Megatron-LM library's own parameters set away from their defaults."""
        driven = {*self.KEYS, "pipeline_loss_fn", "pipeline_split_points"}
        defaults = {f.name: f.default for f in fields(self)}
        rules: dict[str, tuple[Any, str]] = {}
        for name, default in defaults.items():
            if name in driven:
                continue
            accepted = (default, 1) if name in self._ONE_ALLOWED else default
            rules[name] = (accepted, "it configures NVIDIA's Megatron-LM library, which "
                           "overdrive does not drive (docs/parallelism.md)")  # fmt: skip
        refuse_fields(self, rules)
        return super().to_settings()
