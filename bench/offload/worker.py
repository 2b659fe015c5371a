"""One engine's run of the offload bench: load a model three times its CPU budget with
``device_map="auto"`` (most of it left on disk), then time forwards and ``generate``.

    python worker.py --model DIR --budget BYTES --folder DIR [--forwards N] [--tokens N]

Run under Hugging Face Accelerate (its package on ``PYTHONPATH``) or under overdrive
(``python -m overdrive.run worker.py ...``); prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from transformers import AutoModelForCausalLM


def rss_anon() -> int:
    """This process's own resident memory (not mapped files), in bytes."""
    with open("/proc/self/status") as status:
        line = next(x for x in status if x.startswith("RssAnon:"))
    return int(line.split()[1]) * 1024


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--budget", type=int, required=True)
    p.add_argument("--folder", required=True)
    p.add_argument("--forwards", type=int, default=5)
    p.add_argument("--tokens", type=int, default=16)
    args = p.parse_args()
    torch.set_num_threads(1)
    import accelerate

    # Import what loading imports (the model's classes, transformers' quantizers) before the
    # baseline, so the growth counted is the model's weights and activations.
    import transformers.quantizers.auto  # noqa: F401
    from transformers import AutoConfig

    with torch.device("meta"):
        AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(args.model))
    baseline = rss_anon()
    start = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(
        args.model,
        device_map="auto",
        max_memory={"cpu": args.budget},
        offload_folder=args.folder,
        dtype=torch.float32,
    )
    load_s = time.perf_counter() - start
    ids = torch.arange(1, 33).unsqueeze(0)
    times = []
    with torch.no_grad():
        logits = model(ids).logits  # warm-up, and the numbers compared across engines
        for _ in range(args.forwards):
            begin = time.perf_counter()
            model(ids)
            times.append(time.perf_counter() - begin)
        begin = time.perf_counter()
        tokens = model.generate(ids, max_new_tokens=args.tokens, do_sample=False)
        generate_s = time.perf_counter() - begin
    placement = {str(v) for v in model.hf_device_map.values()}
    print(
        "RESULT "
        + json.dumps(
            {
                "engine": accelerate.__file__,
                "load_s": load_s,
                "forward_s": statistics.median(times),
                "generate_tokens_per_s": args.tokens / generate_s,
                "tokens": tokens[0].tolist(),
                "logits_sum": float(logits.double().sum()),
                "placement": sorted(placement),
                "baseline_anon": baseline,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
