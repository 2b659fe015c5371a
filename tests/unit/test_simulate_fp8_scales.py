"""torchao's float8 scale from an amax in three operators on a simulated rank: the scale keeps
the dtype and shape torchao gives it, from fewer operators; torchao's own function is back
outside; ``fp8_on_simulated_gpu`` puts it in place only once fp8's hardware check runs."""

from __future__ import annotations

import pytest
import torch

from overdrive.precision import fp8
from overdrive.simulate.fp8_device import fp8_on_simulated_gpu
from overdrive.simulate.fp8_scales import float8_scales_in_three_operators
from tests.helpers.operator_count import OperatorCount

float8_utils = pytest.importorskip("torchao.float8.float8_utils")


def _scale_and_operators(amax: torch.Tensor) -> tuple[torch.Tensor, int]:
    with OperatorCount() as ops:
        scale = float8_utils.amax_to_scale(amax, torch.float8_e4m3fn)
    return scale, ops.count


@pytest.mark.parametrize("shape", [(), (4, 1)])  # tensor-wise and axis-wise amaxes
def test_the_scale_keeps_torchaos_dtype_and_shape_from_fewer_operators(shape: tuple) -> None:
    amax = torch.full(shape, 3.0, dtype=torch.bfloat16)
    expected, torchao_operators = _scale_and_operators(amax)
    original = float8_utils.amax_to_scale
    with float8_scales_in_three_operators():
        scale, operators = _scale_and_operators(amax)
    assert float8_utils.amax_to_scale is original
    assert (scale.dtype, scale.shape) == (expected.dtype, expected.shape) == (torch.float32, shape)
    assert operators == 3 < torchao_operators  # float64 copy and clamp as torchao, then float32


def test_it_is_put_in_place_by_fp8s_hardware_check_on_a_simulated_gpu() -> None:
    original = float8_utils.amax_to_scale
    with fp8_on_simulated_gpu("cuda"):
        assert float8_utils.amax_to_scale is original  # fp8 not used yet
        assert fp8.fp8_hardware_problem(torch.device("cpu")) is None
        assert float8_utils.amax_to_scale is not original
    assert float8_utils.amax_to_scale is original
    with fp8_on_simulated_gpu("cpu"):
        assert fp8.fp8_hardware_problem(torch.device("cpu")) is not None  # refused on a CPU
        assert float8_utils.amax_to_scale is original
