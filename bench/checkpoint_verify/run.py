"""What checksum verification adds to load_state, for a 1 GiB checkpoint.

1. Hash throughput of the candidates (no new dependency: zlib and hashlib) on a buffer in
   memory.
2. ``load_state`` of a real checkpoint (one model of ``--gib`` GiB of float32 weights, an
   SGD optimizer without state) with verification on, and with ``integrity.verify``
   replaced by a no-op, alternating (which goes first alternates too), ``--repeats`` times
   each. "cold": the page cache is dropped before every load (needs root:
   ``/proc/sys/vm/drop_caches``), so the files come from the disk; "warm": they are in the
   page cache.
3. ``save_state``, and ``integrity.record`` alone on the files it just wrote (what
   recording adds to a save).

    python bench/checkpoint_verify/run.py --dir /path/on/the/disk/to/measure
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import torch

from overdrive.accelerator import Accelerator
from overdrive.checkpoint import MANIFEST, integrity


def hash_speeds(mib: int = 256) -> None:
    data = os.urandom(mib << 20)
    candidates: dict[str, Callable[[bytes], object]] = {
        "zlib.crc32": zlib.crc32,
        "zlib.adler32": zlib.adler32,
        "hashlib.blake2b": lambda d: hashlib.blake2b(d).digest(),
        "hashlib.sha256": lambda d: hashlib.sha256(d).digest(),
        "hashlib.sha1": lambda d: hashlib.sha1(d).digest(),
        "hashlib.md5": lambda d: hashlib.md5(d).digest(),
    }
    print(f"hash throughput on {mib} MiB in memory (best of 3):")
    for name, fn in candidates.items():
        best = min(_timed(lambda fn=fn: fn(data)) for _ in range(3))
        print(f"  {name:16s} {len(data) / best / 1e9:6.2f} GB/s")


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def drop_caches() -> bool:
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
        return True
    except OSError:
        return False


def build(gib: float) -> tuple[Accelerator, torch.nn.Module]:
    layers = max(1, round(gib * 16))  # 64 MiB each
    model = torch.nn.Sequential(*(torch.nn.Linear(4096, 4096, bias=False) for _ in range(layers)))
    acc = Accelerator(cpu=True)
    model, _ = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    return acc, model


def _manifest_files(path: Path) -> dict[str, object]:
    files: dict[str, object] = json.loads((path / MANIFEST).read_text())["files"]
    return files


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dir", default=None, help="where to write the checkpoint (the disk)")
    p.add_argument("--gib", type=float, default=1.0)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    hash_speeds()
    acc, _ = build(args.gib)
    real_verify = integrity.verify
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path, saved = Path(tmp) / "ckpt", Path(tmp) / "saved"
        acc.save_state(path)
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        print(f"\ncheckpoint: {size / 2**30:.3f} GiB in {path}")
        assert integrity.record(path).keys() == _manifest_files(path).keys()
        cold_ok = drop_caches()
        results: dict[str, list[float]] = {}
        for i in range(args.repeats):
            order = (True, False) if i % 2 == 0 else (False, True)  # no order bias
            for cache in ("cold", "warm") if cold_ok else ("warm",):
                for verify in order:
                    integrity.verify = real_verify if verify else (lambda *a, **k: None)
                    if cache == "cold":
                        drop_caches()
                    else:
                        acc.load_state(path)  # bring it into the page cache
                    t = _timed(lambda: acc.load_state(path))
                    results.setdefault(f"load, {cache}, verify={verify}", []).append(t)
            # What recording adds to a save: hashing the files it just wrote. (Timing a
            # save without it is dominated by the disk's write-back, not by this.)
            t = _timed(lambda: acc.save_state(saved))
            results.setdefault("save (records)", []).append(t)
            t = _timed(lambda: integrity.record(saved))
            results.setdefault("record alone, after a save", []).append(t)
        integrity.verify = real_verify
    if not cold_ok:
        print("(not root: the page cache could not be dropped, warm loads only)")
    print(f"\n{'':32s} {'min s':>7s} {'median s':>9s}   (n={args.repeats})")
    for name, times in results.items():
        print(f"{name:32s} {min(times):7.3f} {statistics.median(times):9.3f}")
    for what in ["load, cold", "load, warm"] if cold_ok else ["load, warm"]:
        on = statistics.median(results[f"{what}, verify=True"])
        off = statistics.median(results[f"{what}, verify=False"])
        print(f"{what}: verify adds {100 * (on / off - 1):+.1f}% (medians)")
    record = statistics.median(results["record alone, after a save"])
    save = statistics.median(results["save (records)"])
    print(f"save: record is {100 * record / save:.1f}% of it (medians)")


if __name__ == "__main__":
    main()
