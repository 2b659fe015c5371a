"""Disk offload under Hugging Face Accelerate and under overdrive, interleaved in one run.

A transformers Llama three times its CPU budget is loaded with ``from_pretrained(device_map=
"auto", max_memory={"cpu": budget}, offload_folder=...)`` (the layers that do not fit stay on
disk, in the checkpoint's own safetensors files), then each engine times forwards and
``generate`` in a fresh process, engines alternating, with the process's peak resident
memory sampled from outside (``../checkpoint_load/peak_rss.py``: ``VmHWM`` counts the
memory-mapped file pages read, ``RssAnon`` the process's own memory). Beside it, the rate
at which the checkpoint's files are read (through the page cache, as the runs read them).

    .venv/bin/python bench/offload/run.py [--repeats 4] [--hidden 512] [--layers 16]

Accelerate runs from the test-only folder ``make compat`` installs (``.compat/site``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SITE = REPO / ".compat" / "site"
PEAK = HERE.parent / "checkpoint_load" / "peak_rss.py"


def build(root: Path, hidden: int, layers: int) -> tuple[Path, int, int]:
    """Save the model; its size in bytes and its largest decoder layer's."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=8000,
        hidden_size=hidden,
        intermediate_size=hidden * 8 // 3,
        num_hidden_layers=layers,
        num_attention_heads=8,
        num_key_value_heads=8,
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(root / "model", max_shard_size="50MB")
    size = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    layer = sum(p.numel() * p.element_size() for p in model.model.layers[0].parameters())
    return root / "model", size, layer


def read_rate(model: Path) -> float:
    """Bytes per second reading the checkpoint's files once more (from the page cache)."""
    files = sorted(model.glob("*.safetensors"))
    total = sum(f.stat().st_size for f in files)
    start = time.perf_counter()
    for f in files:
        with open(f, "rb") as handle:
            while handle.read(64 << 20):
                pass
    return total / (time.perf_counter() - start)


def run_one(engine: str, model: Path, budget: int, folder: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "OVERDRIVE_"))}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    worker = [str(HERE / "worker.py"), "--model", str(model), "--budget", str(budget)]
    worker += ["--folder", str(folder)]
    if engine == "accelerate":
        env["PYTHONPATH"] = str(SITE)
        cmd = [sys.executable, *worker]
    else:
        env.pop("PYTHONPATH", None)
        cmd = [sys.executable, "-m", "overdrive.run", *worker]
    shutil.rmtree(folder, ignore_errors=True)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sampler = subprocess.Popen(
        [sys.executable, str(PEAK), str(proc.pid)], stdout=subprocess.PIPE, text=True
    )
    assert sampler.stdout is not None
    sampler.stdout.readline()  # "ready"
    out, err = proc.communicate(timeout=1800)
    sampler.terminate()
    anon, hwm = (int(x) for x in sampler.communicate()[0].split())
    if proc.returncode != 0:
        raise SystemExit(f"{engine} failed:\n{err[-3000:]}")
    line = next(x for x in out.splitlines() if x.startswith("RESULT "))
    row = json.loads(line[len("RESULT ") :])
    row.update(peak_anon=anon, peak_hwm=hwm, growth=anon - row["baseline_anon"])
    return row


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--dir", default="/tmp/offload-bench")
    args = p.parse_args()
    root = Path(args.dir)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    model, size, layer = build(root, args.hidden, args.layers)
    budget = size // 3
    rows: dict[str, list[dict[str, Any]]] = {"accelerate": [], "overdrive": []}
    for repeat in range(args.repeats):
        order = ["accelerate", "overdrive"] if repeat % 2 == 0 else ["overdrive", "accelerate"]
        for engine in order:
            rows[engine].append(run_one(engine, model, budget, root / f"offload-{engine}"))
    rate = statistics.median(read_rate(model) for _ in range(3))
    report(rows, size, budget, layer, rate)


def report(
    rows: dict[str, list[dict[str, Any]]], size: int, budget: int, layer: int, rate: float
) -> None:
    mib = 2**20
    same = {json.dumps(r["tokens"]) for rs in rows.values() for r in rs}
    print(f"model {size / mib:.0f} MiB, CPU budget {budget / mib:.0f} MiB (1/3), largest layer "
          f"{layer / mib:.1f} MiB; placement {rows['overdrive'][0]['placement']}")  # fmt: skip
    print(f"same generated tokens in every run: {len(same) == 1}; checkpoint read through the "
          f"page cache at {rate / mib:.0f} MiB/s")  # fmt: skip
    print(
        "| engine | load s | forward s (median) | generate tokens/s | peak RssAnon MiB "
        "| RssAnon growth over the loaded libraries MiB | peak VmHWM MiB |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    med: dict[str, dict[str, float]] = {}
    for engine, rs in rows.items():
        med[engine] = {
            k: statistics.median(r[k] for r in rs)
            for k in (
                "load_s",
                "forward_s",
                "generate_tokens_per_s",
                "peak_anon",
                "peak_hwm",
                "growth",
            )
        }
        m = med[engine]
        print(f"| {engine} | {m['load_s']:.2f} | {m['forward_s']:.3f} | "
              f"{m['generate_tokens_per_s']:.2f} | {m['peak_anon'] / mib:.0f} | "
              f"{m['growth'] / mib:.0f} | {m['peak_hwm'] / mib:.0f} |")  # fmt: skip
    a, o = med["accelerate"], med["overdrive"]
    bound = (budget + layer) * 1.1
    print(f"overdrive / Accelerate: forward throughput {a['forward_s'] / o['forward_s']:.3f}x, "
          f"generate throughput {o['generate_tokens_per_s'] / a['generate_tokens_per_s']:.3f}x; "
          f"overdrive's RssAnon growth {o['growth'] / mib:.0f} MiB against the bound "
          f"(budget + largest layer) x 1.1 = {bound / mib:.0f} MiB")  # fmt: skip


if __name__ == "__main__":
    main()
