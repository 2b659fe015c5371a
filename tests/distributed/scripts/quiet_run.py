"""Worker: a clean run (prepared scheduler, two optimizer steps) that draws progress bars with
``\\r`` on stdout and stderr, the last one left unended."""

import sys

import torch

from overdrive import Accelerator

accelerator = Accelerator()
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
for _ in range(2):
    accelerator.backward(model(torch.ones(4, 2)).sum())
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
for i in range(1, 201):
    sys.stdout.write(f"\rtraining {i}/200 " + "#" * (i // 10))
    sys.stdout.flush()
sys.stdout.write("\n")
for i in range(1, 51):
    sys.stderr.write(f"\rsaving {i}/50")
    sys.stderr.flush()
sys.stderr.write("\n")
print("done", flush=True)
for i in range(1, 11):
    sys.stdout.write(f"\rtail {i}/10")
    sys.stdout.flush()
