"""The pipeline's loss and split points given in code: by ParallelismConfig whatever the
backend, or by MegatronLMPlugin under MEGATRON_LM, never by both."""

from __future__ import annotations

import os

import pytest

from overdrive import Accelerator, MegatronLMPlugin, ParallelismConfig
from overdrive.errors import ConfigError
from overdrive.setup.accelerator_setup import pipeline_from_code
from overdrive.state import AcceleratorState
from tests.helpers.env import forget_launcher


def mse(output, target):
    return ((output - target) ** 2).mean()


def test_parallelism_config_gives_the_loss_and_split_points_without_a_megatron_plugin() -> None:
    config = ParallelismConfig(pp_size=2, pp_loss_fn=mse, pp_split_points=[3])
    assert pipeline_from_code(config, None) == {"pp_loss_fn": mse, "pp_split_points": [3]}
    # code-only: nothing of them reaches the settings (their provenance is "code")
    assert not any("loss" in key or "split" in key for key in config.to_settings())


def test_megatron_plugin_still_gives_them_and_each_may_come_from_either() -> None:
    plugin = MegatronLMPlugin(pp_degree=2, pipeline_loss_fn=mse)
    config = ParallelismConfig(pp_split_points=[2])
    assert pipeline_from_code(config, plugin) == {"pp_loss_fn": mse, "pp_split_points": [2]}
    assert pipeline_from_code(None, None) == {"pp_loss_fn": None, "pp_split_points": None}


def test_the_same_one_given_by_both_is_refused_naming_both() -> None:
    plugin = MegatronLMPlugin(pp_degree=2, pipeline_loss_fn=mse)
    config = ParallelismConfig(pp_loss_fn=mse)
    with pytest.raises(ConfigError) as caught:
        pipeline_from_code(config, plugin)
    message = str(caught.value)
    assert "ParallelismConfig(pp_loss_fn=...)" in message
    assert "MegatronLMPlugin(pipeline_loss_fn=...)" in message
    assert "keep one" in message


def test_a_loss_without_a_pipeline_warns_that_it_cannot_take_effect(
    monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]
) -> None:
    forget_launcher(monkeypatch, tmp_path)
    AcceleratorState._reset_state(reset_partial_state=True)
    try:
        with pytest.warns(UserWarning, match="cannot take effect: there is no pipeline") as got:
            Accelerator(cpu=True, parallelism_config=ParallelismConfig(pp_loss_fn=mse))
        assert "ParallelismConfig(pp_loss_fn=..., pp_split_points=...)" in str(got[0].message)
        assert "parallelism_config_pp_size is 1" in str(got[0].message)
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
