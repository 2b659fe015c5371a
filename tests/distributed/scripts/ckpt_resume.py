"""Checkpoint phases for tests/distributed/test_checkpoint_resume.py (2 processes).

full:    train 15 batches uninterrupted; automatic saves after batches 4, 8 and 9 (9 is
         mid-epoch and mid accumulation window); total_limit=2.
resume:  a new process group: load_state() (newest = after batch 9), train to 15 with a
         save after 12; then a save during which process 1 SIGKILLs itself before writing
         its files while process 0 has written its own (the launch fails on purpose; a
         commit that did not wait for every process would leave an incomplete checkpoint_4).
recover: load_state() must pick the checkpoint after 12 (the killed one is incomplete),
         train to 15, save once more; then process 0 alone calls save_state, which writes a
         complete checkpoint without waiting for process 1 (DDP: every process holds it all).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ckpt_common as common  # noqa: E402

import overdrive.checkpoint.save as save_module  # noqa: E402


def main() -> None:
    args = common.parse()
    phase = args.phase
    out = Path(args.out)
    acc, model, opt, loader, sched, progress = common.build(out, args.mixed_precision)
    rank = acc.process_index
    if phase == "full":
        seen = common.train(acc, model, opt, loader, sched, progress, until=15, save_at=(4, 8, 9))
        common.dump(out, f"full_{rank}.pt", common.record(acc, model, opt, sched, seen))
        if rank == 0:
            common.dump_json(out, "dirs_after_full.json", common.checkpoint_names(out))
        acc.wait_for_everyone()
        return

    acc.load_state()
    start = progress.batches
    if phase == "resume":
        seen = common.train(acc, model, opt, loader, sched, progress, until=15, save_at=(12,))
        common.dump(out, f"resume_{rank}.pt", common.record(acc, model, opt, sched, seen))
        common.dump_json(out, f"resume_start_{rank}.json", start)
        if rank == 0:
            common.dump_json(out, "dirs_after_resume.json", common.checkpoint_names(out))
        acc.wait_for_everyone()
        if rank == 1:

            def kill(stage: str) -> None:
                if stage == "writing rank files":
                    os.kill(os.getpid(), signal.SIGKILL)

            save_module._fault_point = kill
        acc.save_state()
        raise AssertionError("the killed save must not return")

    # recover
    seen = common.train(acc, model, opt, loader, sched, progress, until=15)
    common.dump(out, f"recover_{rank}.pt", common.record(acc, model, opt, sched, seen))
    common.dump_json(out, f"recover_start_{rank}.json", start)
    acc.save_state()
    if rank == 0:
        common.dump_json(
            out, "dirs_after_recover.json", sorted(os.listdir(out / "project" / "checkpoints"))
        )
        # Process 1 never calls it (diffusers' pattern): under DDP every process holds the
        # whole state, so the main process writes a complete checkpoint by itself.
        acc.save_state(timeout=3)
        common.dump_json(
            out, "dirs_after_alone.json", sorted(os.listdir(out / "project" / "checkpoints"))
        )


if __name__ == "__main__":
    main()
