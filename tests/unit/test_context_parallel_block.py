"""Context parallelism's block in one process: what ``maybe_context_parallel`` refuses in
the batch and the model before any process group is touched (the runs are distributed:
tests/distributed/test_context_parallel.py)."""

from __future__ import annotations

import pytest
import torch

from overdrive.config import load_settings
from overdrive.errors import ConfigError
from overdrive.parallel.context_parallel import check_model, context_parallel_block
from overdrive.parallel.cp_rules import CP_KEY, check_sequence_length

SMALL = {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2}
SMALL |= {"num_key_value_heads": 2, "num_hidden_layers": 1, "vocab_size": 64}


def _cp(cp: int):
    code = {"distributed_type": "FSDP", "fsdp_config.fsdp_version": 2, CP_KEY: cp}
    return load_settings(code=code, environ={})


def test_sequence_lengths_the_ring_cannot_split_are_refused() -> None:
    check_sequence_length(16, 2, "in code")
    with pytest.raises(ConfigError, match="multiple of 4") as caught:
        check_sequence_length(18, 2, "in code", "buffers[0]")
    assert "buffers[0] has a sequence of 18 tokens" in str(caught.value)
    assert "e.g. 20" in str(caught.value)


def test_the_block_refuses_a_bad_batch_before_touching_the_mesh() -> None:
    settings = _cp(2)

    def no_mesh():
        raise AssertionError("the mesh is not needed to refuse")

    ids = torch.zeros(2, 18, dtype=torch.long)
    for buffers, dims, match in (
        (None, None, "no buffers"),
        ([ids], [1, 1], "1 buffers and 2 buffer_seq_dims"),
        ([ids], [1], "sequence of 18 tokens"),
    ):
        block = context_parallel_block(2, no_mesh, settings, [], buffers, dims, None)
        with pytest.raises(ConfigError, match=match), block:
            pass


def test_models_ring_attention_cannot_run_are_refused() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM

    small = SMALL
    check_model(LlamaForCausalLM(LlamaConfig(**small)), 2, "in code")  # sdpa by default
    check_model(torch.nn.Linear(2, 2), 2, "in code")  # not a transformers model
    eager = LlamaForCausalLM(LlamaConfig(**small, attn_implementation="eager"))
    with pytest.raises(ConfigError, match="'eager'") as caught:
        check_model(eager, 2, "in code")
    assert 'attn_implementation="sdpa"' in str(caught.value)
    windowed = MistralForCausalLM(MistralConfig(**small, sliding_window=8))
    with pytest.raises(ConfigError, match="sliding_attention"):
        check_model(windowed, 2, "in code")


def test_inside_a_block_a_transformers_model_needs_its_position_ids(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    from overdrive.parallel import context_parallel

    small = SMALL
    model = LlamaForCausalLM(LlamaConfig(**small))
    context_parallel.hook_attention(model)
    ids = torch.zeros(1, 8, dtype=torch.long)
    positions = torch.arange(8)[None]
    model(ids)  # outside a block: as always
    monkeypatch.setattr(context_parallel, "_open_blocks", 1)
    with pytest.raises(ConfigError, match="without position_ids"):
        model(ids)
    model(ids, position_ids=positions)
    model(ids, None, positions)  # given by position


@pytest.mark.usefixtures("one_process_group")
def test_the_chain_readies_a_model_for_the_ring_when_it_is_prepared() -> None:
    """The chain's context-parallel step refuses at prepare, not at the first block, and
    hooks the attention modules of a model it accepts."""
    from torch.distributed.device_mesh import init_device_mesh
    from transformers import LlamaConfig, LlamaForCausalLM

    from overdrive.parallel.chain import Chain, parallelize
    from overdrive.parallel.context_parallel import ContextParallelStep

    chain = Chain(cp=ContextParallelStep(2, "Accelerator(parallelism_config=...)"))
    mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("cp",))
    eager = LlamaForCausalLM(LlamaConfig(**SMALL, attn_implementation="eager"))
    with pytest.raises(ConfigError, match="parallelism_config=") as caught:
        parallelize(eager, mesh, chain)
    assert 'attn_implementation="sdpa"' in str(caught.value)
    model = LlamaForCausalLM(LlamaConfig(**SMALL))
    assert parallelize(model, mesh, chain).module is model
    attention = model.model.layers[0].self_attn
    assert attention._forward_pre_hooks and model._forward_pre_hooks
