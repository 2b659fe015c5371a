"""transformers' ``from_pretrained(device_map="auto")`` through the alias: a model three
times its CPU budget loads with most of it on disk and generates the tokens, and the logits,
of the same model loaded whole."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

SCRIPT = """
import json, sys
from pathlib import Path
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

out = Path(sys.argv[1])
torch.manual_seed(0)
config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                     num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=4)
whole = LlamaForCausalLM(config).eval()
whole.save_pretrained(out / "model", max_shard_size="200KB")
size = sum(p.numel() * p.element_size() for p in whole.parameters())
model = AutoModelForCausalLM.from_pretrained(
    out / "model", device_map="auto", max_memory={"cpu": f"{size // 3000}KB"},  # a string, as users write it
    offload_folder=out / "offload",
)
ids = torch.tensor([[1, 5, 9, 3, 7]])
with torch.no_grad():
    same_logits = torch.equal(whole(ids).logits, model(ids).logits)
expected = whole.generate(ids, max_new_tokens=10, do_sample=False)
got = model.generate(ids, max_new_tokens=10, do_sample=False)
import accelerate, overdrive
print(json.dumps({
    "map": {k: str(v) for k, v in model.hf_device_map.items()},
    "same_logits": same_logits,
    "expected": expected.tolist(), "got": got.tolist(),
    "engine": accelerate.Accelerator.__module__,
    "meta": [n for n, p in model.named_parameters() if p.is_meta][:3],
}))
"""


def test_from_pretrained_over_budget_generates_the_whole_models_tokens(tmp_path: Path) -> None:
    script = tmp_path / "load.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "OVERDRIVE_"))}
    env["HF_HUB_OFFLINE"] = "1"
    done = subprocess.run(
        [sys.executable, "-m", "overdrive.run", str(script), str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["engine"].startswith("overdrive.")
    assert "disk" in result["map"].values(), result["map"]
    assert result["meta"], "offloaded weights sit on the meta device between forwards"
    assert result["same_logits"]
    assert result["got"] == result["expected"]
    assert len(result["got"][0]) == 15
