"""transformers' Trainer's ``max_grad_norm`` under DeepSpeed, as Hugging Face Accelerate 1.15
applies it (measured there with the same script): the engine clips by the config's
``gradient_clipping``, whose ``"auto"`` (the launch config file's default, or written in the
JSON) Trainer fills with max_grad_norm; a JSON without the key leaves DeepSpeed's own default;
``max_grad_norm=0`` fills 0 (no clipping). Trainer's clip_grad_norm_ refuses nothing. Real
DeepSpeed on one CPU process; one SGD step at lr 1, so the step's norm is the clipped one."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.helpers.dist import assert_ok, result_rows, run_launch

pytest.importorskip("transformers")
pytest.importorskip("deepspeed")
# Each case is a Trainer launch under DeepSpeed (minutes on 2 cores): make extended. The fast
# case in make test: tests/unit/test_deepspeed_clipping_default.py.
pytestmark = [
    pytest.mark.deepspeed,
    pytest.mark.distributed,
    pytest.mark.slow,
    pytest.mark.extended,
]

PRE_CLIP = 41.457698822021484  # the script's gradient norm before clipping
CONFIG = """\
compute_environment: LOCAL_MACHINE
deepspeed_config:
  zero_stage: 2
distributed_type: DEEPSPEED
mixed_precision: 'no'
num_machines: 1
num_processes: 1
"""


def _deepspeed_default() -> float:
    from deepspeed.runtime.constants import GRADIENT_CLIPPING_DEFAULT

    return float(GRADIENT_CLIPPING_DEFAULT)


def _run(tmp_path: Path, case: str, max_norm: str) -> dict[str, float]:
    launch_args = ["--as_accelerate"]
    if case == "file":
        config = tmp_path / "zero2.yaml"
        config.write_text(CONFIG)
        launch_args += ["--config_file", str(config)]
    done = run_launch(
        "ds_trainer_clipping.py",
        nprocs=1,
        args=[str(tmp_path / "out"), case, max_norm],
        launch_args=launch_args,
        env={"DS_ACCELERATOR": "cpu"},
        timeout=600,
    )
    assert_ok(done)
    rows = result_rows(done.stdout)
    assert len(rows) == 1, done.stdout[-2000:]
    return rows[0]


def _check(row: dict[str, float], clip: float) -> None:
    assert row["clip"] == clip
    assert row["norm"] == pytest.approx(PRE_CLIP, rel=1e-6)
    assert row["step"] == pytest.approx(clip if clip > 0 else PRE_CLIP, rel=1e-5)


def test_launch_config_file_clips_at_max_grad_norm(tmp_path: Path) -> None:
    _check(_run(tmp_path, "file", "0.3"), 0.3)


@pytest.mark.parametrize(
    ("case", "max_norm", "clip"),
    [
        ("auto", "0.3", 0.3),
        ("file", "0", 0.0),
        ("json", "0.3", math.nan),  # DeepSpeed's default: Trainer cannot fill a missing key
        ("json", "0", math.nan),
    ],
)
def test_other_cases_clip_as_accelerate(
    tmp_path: Path, case: str, max_norm: str, clip: float
) -> None:
    _check(_run(tmp_path, case, max_norm), _deepspeed_default() if math.isnan(clip) else clip)
