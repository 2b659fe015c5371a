"""prepare_pippy on every process: the pipelined forward against the plain model's output.

Prints one ``RESULT {json}`` line per process (the worst absolute difference of each call
against the plain model, None where the process got no output, and the split points).
"""

from __future__ import annotations

import json

import torch
from torch import nn

import overdrive
from overdrive.inference import prepare_pippy


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 16)
        self.layers = nn.ModuleList(nn.Linear(16, 16) for _ in range(4))
        self.head = nn.Linear(16, 4)
        self.register_buffer("scale", torch.tensor(1.5))

    def forward(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        h = self.embed(x)
        for layer in self.layers:
            h = torch.tanh(layer(h))
        out = self.head(h) * self.scale
        return out if bias is None else out + bias


def _diff(got: torch.Tensor | None, want: torch.Tensor) -> float | None:
    if got is None:
        return None
    assert got.shape == want.shape, (got.shape, want.shape)
    return float((got - want).abs().max())


def main() -> None:
    state = overdrive.PartialState()
    torch.manual_seed(0)
    plain = Net()
    inputs = {n: torch.randn(n, 8) for n in (4, 3, 6)}
    bias = torch.randn(4, 4)
    with torch.no_grad():
        want = {n: plain(x) for n, x in inputs.items()}
        want_bias = plain(inputs[4], bias=bias)

    # Split automatically, traced on a micro-batch of 2: batch 4 runs as traced; batch 3 is
    # padded to 4 (and the padding row taken off); batch 6 has micro-batches of 3 (traced anew).
    auto = Net()
    auto.load_state_dict(plain.state_dict())
    auto = overdrive.prepare_pippy(auto, example_args=(inputs[4][:2],), num_chunks=2)
    diffs = {}
    with torch.no_grad():
        for n, x in inputs.items():
            diffs[n] = _diff(auto(x), want[n])
    traced = len(auto.pippy_pipeline.schedules)

    # Split by hand at a later layer, keyword inputs, the output on every process.
    manual = Net()
    manual.load_state_dict(plain.state_dict())
    manual = prepare_pippy(
        manual,
        split_points=["layers.3"],
        example_kwargs={"x": inputs[4][:2], "bias": bias[:2]},
        gather_output=True,
    )
    with torch.no_grad():
        gathered = _diff(manual(x=inputs[4], bias=bias), want_bias)
    row = {
        "rank": state.process_index,
        "diffs": {str(n): d for n, d in diffs.items()},
        "auto_points": auto.hf_split_points,
        "traced": traced,
        "gathered": gathered,
    }
    print("RESULT " + json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
