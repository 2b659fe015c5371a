"""Accelerate's public names overdrive leaves out on purpose, each with its reason.

A key is ``module`` (the module and every name in it) or ``module:name``; either part may use
``*`` wildcards. ``docs/migrating.md`` prints this list (``python -m tests.surface.run
--write-docs``); the surface check fails on any gap not listed here, and on an entry that
no longer matches a missing name.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

HARDWARE = "hardware overdrive does not target"
TPU = f"{HARDWARE} (TPU through torch_xla)"
SCRIPTS = (
    "a script Accelerate's own test suite launches by path; overdrive ships the ones its "
    "`test` command and Accelerate's training-side tests run (test_script, test_ops, "
    "test_sync, test_cli)"
)
MEGATRON = (
    "glue to NVIDIA's Megatron-LM training loop (megatron-core's own model, optimizer and "
    "train steps); overdrive runs megatron_lm_config's switches on its own engine "
    "(docs/parallelism.md) and does not drive that library"
)
WIZARD = (
    "the terminal menu and question functions of Accelerate's `accelerate config` wizard; "
    "`overdrive config` asks its own questions (questionary)"
)
TRANSFORMER_ENGINE = (
    "NVIDIA TransformerEngine and MS-AMP fp8 backends; overdrive's fp8 runs through torchao "
    "(docs/precision.md)"
)
SAGEMAKER = "launching on Amazon SageMaker, which overdrive's launcher does not do"

ON_PURPOSE: dict[str, str] = {
    "accelerate.utils.torch_xla": TPU,
    "accelerate.commands.tpu:*": TPU,
    "accelerate.commands.launch:tpu_*": TPU,
    "accelerate.utils.launch:prepare_tpu": TPU,
    "accelerate.utils:prepare_tpu": TPU,
    "accelerate.utils:install_xla": TPU,
    "accelerate.test_utils.scripts.external_deps*": SCRIPTS,
    "accelerate.test_utils.scripts.test_ddp_comm_hook": SCRIPTS,
    "accelerate.test_utils.scripts.test_distributed_data_loop": SCRIPTS,
    "accelerate.test_utils.scripts.test_merge_weights": SCRIPTS,
    "accelerate.test_utils.scripts.test_notebook": SCRIPTS,
    "accelerate.utils.megatron_lm": MEGATRON,
    "accelerate.utils:*TrainStep": MEGATRON,
    "accelerate.utils:MegatronLMDummyDataLoader": MEGATRON,
    "accelerate.utils:avg_losses_across_data_parallel_group": MEGATRON,
    "accelerate.utils:add_model_config_to_megatron_parser": MEGATRON,
    "accelerate.utils.dataclasses:add_model_config_to_megatron_parser": MEGATRON,
    "accelerate.utils.dataclasses:MODEL_CONFIGS_TO_MEGATRON_PARSERS": MEGATRON,
    "accelerate.utils.dataclasses:parse_*_config": MEGATRON,
    "accelerate.commands.menu": WIZARD,
    "accelerate.commands.menu.*": WIZARD,
    "accelerate.commands.config.cluster": WIZARD,
    "accelerate.commands.config.sagemaker": WIZARD,
    "accelerate.commands.config.config_utils": WIZARD,
    "accelerate.utils.transformer_engine": TRANSFORMER_ENGINE,
    "accelerate.utils:apply_fp8_autowrap": TRANSFORMER_ENGINE,
    "accelerate.utils:contextual_fp8_autocast": TRANSFORMER_ENGINE,
    "accelerate.utils:convert_model": TRANSFORMER_ENGINE,
    "accelerate.utils:has_transformer_engine_layers": TRANSFORMER_ENGINE,
    "accelerate.commands.launch:sagemaker_launcher": SAGEMAKER,
    "accelerate.utils.launch:prepare_sagemager_args_inputs": SAGEMAKER,
    "accelerate.utils:prepare_sagemager_args_inputs": SAGEMAKER,
}


def _match(pattern: str, module: str, name: str | None) -> bool:
    module_part, _, name_part = pattern.partition(":")
    if not fnmatchcase(module, module_part):
        return False
    if not name_part:  # a whole module: itself and every name in it
        return True
    return name is not None and fnmatchcase(name, name_part)


def reason_for(on_purpose: dict[str, str], module: str, name: str | None) -> str | None:
    """Why ``module`` (``name`` None) or ``module.name`` is left out, or None."""
    for pattern, reason in on_purpose.items():
        if _match(pattern, module, name):
            return reason
    return None


def unused(on_purpose: dict[str, str], missing_on_purpose: list[str]) -> list[str]:
    """Entries that match no name the comparison set aside (stale: the name now exists, or
    never did)."""
    used = set()
    for dotted in missing_on_purpose:
        for pattern in on_purpose:
            module, _, name = dotted.rpartition(".")
            if _match(pattern, dotted, None) or _match(pattern, module, name):
                used.add(pattern)
    return [p for p in on_purpose if p not in used]
