"""A small training script the simulation tests run (written to a file by each test)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from overdrive.cli.main import main

TRAIN_SCRIPT = """\
import torch
from overdrive import Accelerator

acc = Accelerator()
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model, opt = acc.prepare(model, opt)
for _ in range(10):
    acc.backward(model(torch.randn(16, 64)).sum())
    opt.step()
    opt.zero_grad()
"""


TINY_LLAMA_SCRIPT = """
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from overdrive import Accelerator

acc = Accelerator()
config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, vocab_size=64)
model = LlamaForCausalLM(config)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
model, opt = acc.prepare(model, opt)
print("linear:", type(acc.unwrap_model(model).model.layers[0].mlp.up_proj).__name__)
for _ in range(2):
    ids = torch.randint(0, 64, (2, 16))
    acc.backward(model(input_ids=ids, labels=ids).loss)
    opt.step()
    opt.zero_grad()
"""
"""A tiny transformers Llama trained for 2 steps with AdamW; prints the class of its first
MLP's up projection (``linear: Float8Linear`` under fp8)."""


def run_overdrive_ok(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python -m overdrive ARGV`` run with ``env``; it must exit 0 (its stderr shown if not)."""
    done = subprocess.run(
        [sys.executable, "-m", "overdrive", *argv], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done


def assert_simulate_refuses_as_launch(
    capsys: pytest.CaptureFixture[str], folder: Path, flags: list[str], *extra: list[str]
) -> str:
    """``overdrive launch --simulate`` refuses ``flags`` (then with each of ``extra`` added)
    word for word as ``overdrive launch --dry_run`` does, exit code 2 each, before a script
    that must not run starts; the message."""
    script = folder / "train.py"
    script.write_text("raise SystemExit('the script must not run')\n")
    argv = [*flags, str(script)]
    assert main(["launch", "--dry_run", *argv]) == 2
    refused = capsys.readouterr().err
    for more in ([], *extra):
        assert main(["launch", "--simulate", *more, *argv]) == 2
        assert capsys.readouterr().err == refused
    return refused
