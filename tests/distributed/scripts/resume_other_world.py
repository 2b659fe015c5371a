"""``save DIR``: on 2 processes, stop 2 batches into an epoch (global batch 16) and save.
``load DIR``: on 1 process (global batch 8), load it; print what load_state said and whether
the model is untouched. The loader continues mid-epoch (use_stateful_dataloader)."""

import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

from overdrive import Accelerator, DataLoaderConfiguration

config = DataLoaderConfiguration(use_stateful_dataloader=True)
accelerator = Accelerator(cpu=True, dataloader_config=config)
torch.manual_seed(0)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(64, 2)), batch_size=8)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
if sys.argv[1] == "save":
    for step, (x,) in enumerate(loader):
        accelerator.backward(model(x).sum())
        optimizer.step()
        optimizer.zero_grad()
        if step == 1:
            accelerator.save_state(sys.argv[2])
            break
else:
    before = [p.detach().clone() for p in model.parameters()]
    try:
        accelerator.load_state(sys.argv[2])
    except Exception as error:  # noqa: BLE001 - the test reads the message
        print(f"REFUSED {type(error).__name__}: {error}", flush=True)
    same = all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    print(f"UNCHANGED {same}", flush=True)
