"""save_state under DeepSpeed ZeRO 1/2 with two parameter groups, for
tests/distributed/test_deepspeed_resume.py.

AdamW with weight decay on the weights and none on the biases (the usual two groups), two
steps, then ``save_state`` to ``--out``; each rank prints whether the biases' (second group's)
optimizer state was saved, and saved non-zero.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from overdrive.accelerator import Accelerator


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    acc = Accelerator()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    groups = [
        {
            "params": [p for n, p in model.named_parameters() if "bias" not in n],
            "weight_decay": 0.1,
        },
        {"params": [p for n, p in model.named_parameters() if "bias" in n], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=1e-2)
    x = torch.randn(8 * acc.num_processes, 4, generator=torch.Generator().manual_seed(1))
    loader = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=4)
    model, opt, loader = acc.prepare(model, opt, loader)
    for inputs, targets in loader:
        acc.backward(F.mse_loss(model(inputs), targets))
        opt.step()
        opt.zero_grad()
    acc.save_state(args.out)
    acc.wait_for_everyone()
    saved = load_file(str(args.out / "optimizer_0.safetensors"))
    state = {k: float(v.abs().sum()) for k, v in saved.items() if k.startswith("state/")}
    print("RESULT " + json.dumps({"rank": acc.process_index, "state": state}), flush=True)


if __name__ == "__main__":
    main()
