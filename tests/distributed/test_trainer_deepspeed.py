"""transformers' Trainer with ``TrainingArguments(deepspeed=...)`` on overdrive, on CPU
processes: ZeRO-2 and ZeRO-3 train to DDP's weights, resume mid-epoch exactly from DeepSpeed's
own checkpoints (Trainer drives the engine's save/load), and accumulate with a short last
window as one process does.

Measured on this host (2026-11-25): ZeRO-2 1.4e-7 and ZeRO-3 1.9e-6 (relative, weight sums)
from 2-process DDP; both resumes bitwise; ZeRO-2 accumulating 4 with a short window 1.3e-6
from one process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.distributed.test_trainer_backends import relative, resumed, train
from tests.helpers.deepspeed import DS_ENV

pytest.importorskip("deepspeed")
pytest.importorskip("transformers")

AUTO = "auto"


def _zero(stage: int) -> dict[str, Any]:
    """A DeepSpeed JSON as transformers' docs write them: Trainer fills every "auto"."""
    zero: dict[str, Any] = {"stage": stage}
    if stage == 3:
        zero.update(
            reduce_bucket_size=AUTO,
            stage3_prefetch_bucket_size=AUTO,
            stage3_param_persistence_threshold=AUTO,
            stage3_gather_16bit_weights_on_model_save=True,
        )
    return {
        "zero_optimization": zero,
        "gradient_clipping": AUTO,
        "gradient_accumulation_steps": AUTO,
        "train_micro_batch_size_per_gpu": AUTO,
        "train_batch_size": AUTO,
    }


@pytest.fixture(scope="module")
def zero2_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """ZeRO-2 from ``TrainingArguments(deepspeed=...)`` uninterrupted on 2 processes, 2
    samples each, 10 steps: launched once for the tests of this file that resume it."""
    spec = {"batch": 2, "deepspeed": _zero(2)}
    return train(tmp_path_factory.mktemp("trainer-zero2"), "whole", spec, nprocs=2, env=DS_ENV)


@pytest.mark.distributed
@pytest.mark.deepspeed
@pytest.mark.parametrize("stage", [2, pytest.param(3, marks=pytest.mark.extended)])
def test_zero_under_trainer_resumes_mid_epoch_and_trains_like_ddp(
    tmp_path: Path, stage: int, ddp_run: dict[str, Any], request: pytest.FixtureRequest
) -> None:
    spec = {"batch": 2, "deepspeed": _zero(stage)}
    uninterrupted = request.getfixturevalue("zero2_run") if stage == 2 else None
    whole, again, folder = resumed(tmp_path, spec, nprocs=2, whole=uninterrupted, env=DS_ENV)
    assert (folder / "global_step4").is_dir()  # DeepSpeed's own checkpoint, as Trainer writes it
    assert again["losses"] == whole["losses"]
    assert again["weights"] == whole["weights"]
    assert relative(whole["weights"], ddp_run["weights"]) < 1e-5  # 2-process DDP, {"batch": 2}


@pytest.mark.distributed
@pytest.mark.deepspeed
@pytest.mark.extended
def test_zero2_accumulation_with_a_short_last_window_is_one_process(tmp_path: Path) -> None:
    # 20 samples, 2 processes x 1: windows of 4, 4 and a short 2 micro-batches an epoch.
    # Trainer accumulates by itself; the JSON's "auto" gives the engine a window of 4 and
    # overdrive divides no loss a second time.
    spec = {"samples": 20, "accum": 4, "max_steps": 6}
    zero = train(tmp_path, "zero", {**spec, "batch": 1, "deepspeed": _zero(2)}, 2, env=DS_ENV)
    one = train(tmp_path, "one", {**spec, "batch": 2}, nprocs=1)
    assert zero["steps"] == list(range(1, 7))
    assert relative(zero["weights"], one["weights"]) < 1e-5


@pytest.mark.distributed
@pytest.mark.deepspeed
def test_a_deepspeed_config_file_under_trainer_checkpoints_every_partition(
    tmp_path: Path, zero2_run: dict[str, Any]
) -> None:
    """DeepSpeed from the launch's config file, with no ``deepspeed=`` in TrainingArguments:
    Trainer must still find the plugin (``state.deepspeed_plugin``) and checkpoint through the
    engine. Before, it saved rank 0's ``optimizer.pt``, a ZeRO-2 partition of the state, and
    resumed 0.11 (relative) away from the uninterrupted run.

    The uninterrupted run is the JSON's ZeRO-2 (its "auto" clipping is Trainer's 1.0): the
    same engine, so the interrupted and resumed runs from the config file must end exactly
    there (measured: bitwise the same losses and weights as the config file's own run)."""
    config = (
        "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\n"
        "  gradient_clipping: 1.0\nnum_processes: 2\n"
    )
    whole, again, folder = resumed(
        tmp_path, {"batch": 2}, nprocs=2, config=config, whole=zero2_run, env=DS_ENV
    )
    assert (folder / "global_step4").is_dir() and not (folder / "optimizer.pt").exists()
    assert again["losses"] == whole["losses"]
    assert again["weights"] == whole["weights"]
