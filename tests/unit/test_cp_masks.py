"""Which attention masks a context-parallel block may drop: one that allows everything or
exactly causal attention; any other (padding, a window) is refused with the fix."""

from __future__ import annotations

import pytest
import torch

from overdrive.errors import ConfigError
from overdrive.parallel.cp_masks import asks_no_more_than_causal, refuse_strict_mask


def test_causal_and_open_masks_may_be_dropped_stricter_ones_may_not() -> None:
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    additive = torch.zeros(4, 4).masked_fill(~causal, float("-inf"))
    assert asks_no_more_than_causal(causal[None, None].expand(2, 1, 4, 4))
    assert asks_no_more_than_causal(additive)
    assert asks_no_more_than_causal(torch.ones(2, 1, 4, 4, dtype=torch.bool))
    padded = causal.clone()
    padded[:, 3] = False  # the last key is padding
    assert not asks_no_more_than_causal(padded)
    window = causal & torch.ones(4, 4, dtype=torch.bool).triu(-1)  # sliding window of 2
    assert not asks_no_more_than_causal(window)


def test_a_mask_stricter_than_causal_reaching_attention_is_refused_with_the_fix() -> None:
    padded = torch.ones(4, 4, dtype=torch.bool).tril()
    padded[:, 0] = False
    with pytest.raises(ConfigError, match="stricter than causal") as caught:
        refuse_strict_mask(padded, "LlamaAttention", None)
    assert "label -100" in str(caught.value)
    refuse_strict_mask(torch.ones(4, 4, dtype=torch.bool).tril(), "LlamaAttention", None)
