"""What checksum verification adds to load_state, for a 1 GiB checkpoint.

1. Hash throughput of the candidates (no new dependency: zlib and hashlib) on a buffer in
   memory.
2. ``load_state`` of a real checkpoint (one model of ``--gib`` GiB of float32 weights, an
   SGD optimizer without state) with verification on, and with ``integrity.verify``
   replaced by a no-op, alternating, ``--repeats`` times each. "cold": the page cache is
   dropped before every load (needs root: ``/proc/sys/vm/drop_caches``), so the files come
   from the disk; "warm": they are in the page cache. The same for ``save_state`` with and
   without ``integrity.record``.

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
    real_verify, real_record = integrity.verify, integrity.record
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = Path(tmp) / "ckpt"
        acc.save_state(path)
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        print(f"\ncheckpoint: {size / 2**30:.3f} GiB in {path}")
        assert integrity.record(path).keys() == _manifest_files(path).keys()
        cold_ok = drop_caches()
        results: dict[str, list[float]] = {}
        for _ in range(args.repeats):
            for cache in ("cold", "warm") if cold_ok else ("warm",):
                for verify in (True, False):
                    integrity.verify = real_verify if verify else (lambda *a, **k: None)
                    if cache == "cold":
                        drop_caches()
                    else:
                        acc.load_state(path)  # bring it into the page cache
                    t = _timed(lambda: acc.load_state(path))
                    results.setdefault(f"load, {cache}, verify={verify}", []).append(t)
            for record in (True, False):
                integrity.record = real_record if record else (lambda *a, **k: {})
                t = _timed(lambda: acc.save_state(Path(tmp) / "saved"))
                results.setdefault(f"save, record={record}", []).append(t)
        integrity.verify, integrity.record = real_verify, real_record
    if not cold_ok:
        print("(not root: the page cache could not be dropped, warm loads only)")
    print(f"\n{'':32s} {'min s':>7s} {'median s':>9s}   (n={args.repeats})")
    for name, times in results.items():
        print(f"{name:32s} {min(times):7.3f} {statistics.median(times):9.3f}")
    for what in (["load, cold", "load, warm"] if cold_ok else ["load, warm"]) + ["save"]:
        key = "record" if what == "save" else "verify"
        on = statistics.median(results[f"{what}, {key}=True"])
        off = statistics.median(results[f"{what}, {key}=False"])
        print(f"{what}: {key} adds {100 * (on / off - 1):+.1f}% (medians)")


if __name__ == "__main__":
    main()
