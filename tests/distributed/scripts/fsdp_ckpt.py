"""FSDP checkpoints for tests/distributed/test_fsdp_checkpoint.py.

full:   train 8 optimizer steps (global batch 6, split between the processes, so any of 1,
        2, 3 processes trains the same), save_state after step 4, dump the final parameters.
        Also writes the model with save_fsdp_model into OUT/fsdp_files.
resume: load_state() from that checkpoint (possibly on another number of processes), train
        the remaining 4 steps, dump the final parameters. Each process writes the bytes of
        checkpoint tensor data it read during load_state to OUT/read_bytes.rank<r>.
damaged: load_state() of a checkpoint with a damaged file must fail on every process and
        leave every process's parameters as they were; prints ``UNTOUCHED rank=<r>``.
Run with FSDP settings (state dict type, version) as launch flags.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fsdp_checks import make_model  # noqa: E402

from overdrive import DataLoaderConfiguration  # noqa: E402
from overdrive.accelerator import Accelerator  # noqa: E402
from overdrive.utils import save_fsdp_model  # noqa: E402

STEPS, SAVE_AT, GLOBAL_BATCH = 8, 4, 6


@contextlib.contextmanager
def counting_reads() -> Iterator[list[int]]:
    """Bytes of tensor data read from a checkpoint's files (by slices, or whole files)."""
    import overdrive.checkpoint.serialization as serialization
    from overdrive.checkpoint.shard_reader import OpenFiles

    read = [0]

    def counted(fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            tensors = out.values() if isinstance(out, dict) else [out]
            read[0] += sum(t.numel() * t.element_size() for t in tensors)
            return out

        return wrapper

    patched = [(OpenFiles, "read"), (OpenFiles, "tensor"), (serialization, "load_tensors")]
    saved = [getattr(owner, name) for owner, name in patched]
    for owner, name in patched:
        setattr(owner, name, counted(getattr(owner, name)))
    try:
        yield read
    finally:
        for (owner, name), fn in zip(patched, saved):
            setattr(owner, name, fn)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--phase", choices=("full", "resume", "damaged"), required=True)
    args = p.parse_args()
    out = Path(args.out)
    acc = Accelerator(
        cpu=True, dataloader_config=DataLoaderConfiguration(split_batches=True, exact_resume=True)
    )
    g = torch.Generator().manual_seed(3)
    x = torch.randn(STEPS * GLOBAL_BATCH, 5, generator=g)
    ds = TensorDataset(x, x.sum(dim=1, keepdim=True))
    model = make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    loader = DataLoader(ds, batch_size=GLOBAL_BATCH, shuffle=True)
    model, opt, sched, loader = acc.prepare(model, opt, sched, loader)
    step = 0
    if args.phase == "damaged":
        from overdrive.checkpoint.errors import CheckpointError

        before = [p.detach().clone() for p in model.parameters()]
        try:
            acc.load_state(str(out / "ckpt"))
        except CheckpointError as exc:
            print(f"REFUSED rank={acc.process_index}: {str(exc).splitlines()[0]}", flush=True)
        else:
            raise AssertionError("a damaged checkpoint loaded")
        after = list(model.parameters())
        assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
        print(f"UNTOUCHED rank={acc.process_index}", flush=True)
        return
    if args.phase == "resume":
        with counting_reads() as read:
            acc.load_state(str(out / "ckpt"))
        (out / f"read_bytes.rank{acc.process_index}").write_text(str(read[0]))
        step = SAVE_AT
    for xb, yb in loader:
        acc.backward(F.mse_loss(model(xb), yb))
        acc.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()
        step += 1
        if args.phase == "full" and step == SAVE_AT:
            acc.save_state(str(out / "ckpt"))
            save_fsdp_model(None, acc, model, out / "fsdp_files")  # Hugging Face Accelerate's name
            at_save = acc.get_state_dict(model)
            if acc.is_main_process:
                torch.save({k: v.clone() for k, v in at_save.items()}, out / "at_save.pt")
    assert step == STEPS, step
    final = acc.get_state_dict(model)
    if acc.is_main_process:
        torch.save({k: v.clone() for k, v in final.items()}, out / f"{args.phase}.pt")
    acc.wait_for_everyone()
    acc.print(f"PHASE DONE {args.phase} world={acc.num_processes}")


if __name__ == "__main__":
    main()
