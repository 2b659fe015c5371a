"""The tensor-parallel and pipeline settings a strategy runs with: the degrees of the layout
(decided once, ``parallel/layout.py``) with what the settings and the code say about them.

Each says once what was given for a dimension the layout does not have (a plan without a
tensor-parallel degree, a pipeline loss without a pipeline): it cannot take effect. The
warnings point at the code that made the ``Accelerator`` (called as
``select_strategy`` <- ``strategy_for`` <- ``Accelerator.__init__``).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from overdrive.parallel.layout import pp_key, pp_micro_batches, tp_setting
from overdrive.parallel.tp_settings import TPSettings

if TYPE_CHECKING:
    from overdrive.config.settings import Settings
    from overdrive.parallel.decide import Decision
    from overdrive.strategies.options import StrategyOptions
    from overdrive.strategies.pipeline import PPSettings

_STACKLEVEL = 4  # this function, select_strategy, strategy_for, Accelerator.__init__


def _sequence_setting(
    settings: Settings, decision: Decision, in_code: bool
) -> tuple[bool, str, str]:
    """(asked for, key, source) of sequence parallelism: in code, or (under MEGATRON_LM)
    ``megatron_lm_config.sequence_parallelism``."""
    key = "megatron_lm_config.sequence_parallelism"
    if in_code:
        return True, "sequence_parallel", "ParallelismConfig(sequence_parallel=True), in code"
    return decision.chain.sequence_parallel, key, str(settings.source(key))


def tp_settings(
    settings: Settings, decision: Decision, options: StrategyOptions
) -> TPSettings | None:
    """The tensor-parallel settings when the layout's degree is above 1, else None (saying
    what a plan or sequence parallelism given without a degree cannot do)."""
    degree = decision.layout.tp
    _, key = tp_setting(settings)
    sp, sp_key, sp_source = _sequence_setting(settings, decision, options.sequence_parallel)
    if degree <= 1:
        for what, given in (
            ("ParallelismConfig(tp_plan=...)", options.tp_plan is not None),
            (f"sequence parallelism ({sp_key}, from {sp_source})", sp),
        ):
            if given:
                warnings.warn(
                    f"{what} cannot take effect: the tensor-parallel degree is 1 ({key}, "
                    f"from {settings.source(key)}); set tp_size to split the model",
                    UserWarning,
                    stacklevel=_STACKLEVEL,
                )
        return None
    return TPSettings(
        degree=degree,
        key=key,
        source=str(settings.source(key)),
        plan=options.tp_plan,
        sequence_parallel=sp,
        sp_key=sp_key,
        sp_source=sp_source,
    )


def pp_settings(
    settings: Settings, decision: Decision, options: StrategyOptions
) -> PPSettings | None:
    """The pipeline settings when the layout's degree is above 1, else None (saying that
    a loss or split points given in code cannot take effect)."""
    degree = decision.layout.pp
    # where a pipeline's loss and split points are given in code: the plugin that chose
    # MEGATRON_LM, else ParallelismConfig (which chooses no backend)
    owner, prefix = (
        ("MegatronLMPlugin", "pipeline") if decision.chain.megatron else ("ParallelismConfig", "pp")
    )
    if degree <= 1:
        if options.pp_loss_fn is not None or options.pp_split_points is not None:
            warnings.warn(
                f"a pipeline loss or split points given in code ({owner}({prefix}_loss_fn=..., "
                f"{prefix}_split_points=...)) cannot take effect: there is no pipeline "
                f"({pp_key(settings)} is 1)",
                UserWarning,
                stacklevel=_STACKLEVEL,
            )
        return None
    # Loads torch.distributed.pipelining, needed only under a pipeline degree above 1.
    # deferred: heavy (about 150 ms at every start otherwise)
    from overdrive.strategies.pipeline import PPSettings

    return PPSettings(
        degree=degree,
        micro_batches=pp_micro_batches(settings, degree),
        schedule=str(settings["megatron_lm_config.pipeline_schedule"]),
        loss_fn=options.pp_loss_fn,
        split_points=options.pp_split_points,
        key=pp_key(settings),
        loss_fn_owner=owner,
        loss_fn_key=f"{prefix}_loss_fn",
    )
