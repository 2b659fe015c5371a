"""bf16 and fp16 under 2-process DDP stay within a documented tolerance of fp32 over 20 steps.

Tolerances come from the formats' unit roundoff (bf16 2**-8 ~ 3.9e-3, fp16 2**-11 ~ 4.9e-4):
per-step losses within 1e-2 (bf16) / 2e-3 (fp16) relative, final parameters within 5e-3 /
1e-3 relative L2. Measured on CPU: ~7e-4 / ~1.3e-4 for losses, ~4e-4 / ~5e-5 for parameters.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.helpers.dist import assert_ok, run_launch

pytestmark = pytest.mark.distributed

# (loss rtol, params relative L2) against fp32: the rounding of a half-precision forward
# (bf16 keeps 8 significant bits, 4e-3 per op; fp16 11 bits, 5e-4). The run uses SGD, so a
# loss-scaling error (unscale by the wrong factor) moves the parameters in proportion.
# fp16's autocast and loss scaling on CPU processes (without it a CPU trains in fp32, as
# under Hugging Face Accelerate)
FP16_ON_CPU = ["--fp16_on_cpu", "true"]
TOLERANCE = {"bf16": (1e-2, 5e-3), "fp16": (2e-3, 1e-3)}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object]]:
    out = tmp_path_factory.mktemp("precision") / "results.json"
    assert_ok(run_launch("precision_ddp.py", nprocs=2, args=[str(out)], launch_args=FP16_ON_CPU))
    return json.loads(Path(out).read_text())  # type: ignore[no-any-return]


@pytest.mark.parametrize("mode", ["bf16", "fp16"])
def test_mixed_precision_ddp_tracks_fp32(results: dict[str, dict], mode: str) -> None:
    ref, run = results["no"], results[mode]
    assert ref["in_sync"] and run["in_sync"]  # DDP kept both replicas identical
    assert run["skipped"] == [[], []]
    losses, ref_losses = torch.tensor(run["losses"]), torch.tensor(ref["losses"])
    params, ref_params = torch.tensor(run["params"]), torch.tensor(ref["params"])
    assert len(losses) == 20
    loss_rtol, param_rtol = TOLERANCE[mode]
    torch.testing.assert_close(losses, ref_losses, rtol=loss_rtol, atol=0.0)
    drift = ((params - ref_params).norm() / ref_params.norm()).item()
    assert drift < param_rtol
    assert drift > 0.0  # the half-precision forward really ran: not bit-identical to fp32


def test_an_inf_on_one_rank_skips_that_step_on_every_rank(results: dict[str, dict]) -> None:
    run, clean = results["fp16_inf_on_rank1"], results["fp16"]
    assert run["skipped"] == [[5], [5]]  # DDP's all-reduce carries the inf to rank 0 too
    assert run["in_sync"]
    # the skipped step left the parameters as they were: the run lags the clean one by a step
    assert run["losses"][:5] == clean["losses"][:5]
    assert run["losses"][6] != clean["losses"][6]
