"""The README's example loop, kept runnable: `python examples/readme_loop.py` or under `overdrive launch`."""

import torch
from torch.utils.data import DataLoader, TensorDataset

from overdrive import Accelerator

accelerator = Accelerator(gradient_accumulation_steps=2)
data = TensorDataset(torch.randn(256, 8), torch.randint(0, 2, (256,)))
model = torch.nn.Linear(8, 2)
optimizer = torch.optim.AdamW(model.parameters())
model, optimizer, loader = accelerator.prepare(
    model, optimizer, DataLoader(data, batch_size=16, shuffle=True)
)
for inputs, targets in loader:
    with accelerator.accumulate(model):
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
accelerator.print(f"final loss {loss.item():.3f} on {accelerator.num_processes} processes")
