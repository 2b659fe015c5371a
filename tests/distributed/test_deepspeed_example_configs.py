"""Example DeepSpeed ZeRO-3 config files (optimizer offload, parameter offload, bf16,
zero3_init_flag) launch and train a tiny transformers Llama on 2 CPU processes, each setting
in force; with zero3_init_flag the model is born partitioned, and the model save_model writes
loads into a fresh Llama with plain safetensors."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.deepspeed import DS_ENV
from tests.helpers.dist import assert_ok, result_rows, run_launch

pytest.importorskip("deepspeed")
transformers = pytest.importorskip("transformers")
# Every file offloads the optimizer: CPU Adam compiles for minutes on a fresh machine, so
# these run in `make deepspeed`; `make test` keeps the ZeRO stages without offload.
pytestmark = [
    pytest.mark.distributed,
    pytest.mark.deepspeed,
    pytest.mark.slow,
    pytest.mark.extended,
]

CONFIGS = Path(__file__).parent / "configs"

# file -> (precision, accumulation, clipping, offload optimizer, offload params, born partitioned)
# A file that sets no gradient_clipping gets Hugging Face Accelerate's "auto": 1.0 at prepare.
EXPECTED = {
    "deepspeed_zero3_offload_bf16.yaml": ("bf16", 8, 1.0, "cpu", "none", True),
    "deepspeed_large_llm.yaml": ("bf16", 4, 1.0, "cpu", "none", True),
    "deepspeed_zero3_cpu_offload.yaml": ("no", 1, 1.0, "cpu", "cpu", False),
}


@pytest.mark.parametrize("config", list(EXPECTED))
def test_deepspeed_example_config_trains_a_llama(
    config: str, tmp_path: Path, cpu_adam_built: None
) -> None:
    precision, accumulation, clipping, offload_opt, offload_param, born = EXPECTED[config]
    args = ["--out", str(tmp_path)] + (["--max_norm", str(clipping)] if clipping else [])
    # The files ask for 8 GPUs; the flag (above the file) makes it a 2-process rehearsal.
    result = run_launch(
        "ds_example_llama.py",
        env=DS_ENV,
        nprocs=2,
        launch_args=["--config_file", str(CONFIGS / config)],
        args=args,
        timeout=420,
    )
    assert_ok(result)
    (row,) = result_rows(result.stdout)
    assert row["type"] == "DEEPSPEED" and row["stage"] == 3
    assert (row["mixed_precision"], row["accumulation"], row["clipping"]) == (
        precision,
        accumulation,
        clipping,
    )
    assert (row["offload_optimizer"], row["offload_param"]) == (offload_opt, offload_param)
    assert row["optimizer"] == "DeepSpeedCPUAdam"  # the AdamW, mapped for ZeRO-Offload
    assert row["born_partitioned"] is born  # zero3_init_flag: built already partitioned
    assert row["plain_born_partitioned"] is born  # nn.Module in cpu_ram_efficient_init()
    assert row["last"] < 0.5 * row["first"], row  # it trained
    assert row["saved_equals_state"]
    if "loss_scale_window" in (CONFIGS / config).read_text():
        assert "loss_scale_window" in result.stderr and "has no effect" in result.stderr

    from safetensors.torch import load_file

    from tests.distributed.scripts.ds_example_llama import CONFIG

    saved = load_file(str(tmp_path / "model" / "model.safetensors"))
    fresh = transformers.LlamaForCausalLM(CONFIG)
    fresh.load_state_dict(saved, strict=True)  # every weight, full shape, no DeepSpeed
    assert all(t.dtype.is_floating_point and t.numel() > 0 for t in saved.values())
