"""The ecosystem harness's pure helpers (no script runs, no network, no libraries of
.ecosystem/site): cases, launch commands and environments, comparisons, records, table."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from tests.ecosystem import compare as cmp
from tests.ecosystem.build import asset_paths, sentences, word_vocabulary
from tests.ecosystem.cases import CASES, DIFFUSERS, TRL, Case, fill, select
from tests.ecosystem.fetch import SCRIPTS, _clone_flags
from tests.ecosystem.run import ADAPT, COMPAT_SITE, SITE, command, environment
from tests.ecosystem.table import END, START, backend, table, write_table


def _adapt() -> ModuleType:
    """The adaptation layer, imported under another name (so it installs no hook here)."""
    spec = importlib.util.spec_from_file_location("ecosystem_adapt", ADAPT / "sitecustomize.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cases_are_unique_and_cover_what_was_asked() -> None:
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))
    scripts = {(c.source, c.script) for c in CASES}
    assert {(TRL, "sft"), (TRL, "dpo"), (TRL, "grpo")} <= scripts
    assert {(DIFFUSERS, s.split("examples/", 1)[1]) for s in SCRIPTS} <= scripts
    configs = {c.config for c in CASES if c.config}
    assert configs == {
        f"{n}.yaml" for n in ("multi_gpu", "fsdp1", "fsdp2", "zero1", "zero2", "zero3")
    }
    for case in CASES:
        if case.source == DIFFUSERS:  # every diffusers case checkpoints, prunes and resumes
            assert "--checkpoints_total_limit" in case.args and case.resume_args
            assert case.checkpoint_holds and case.checkpoints_kept == 2
    assert [c.name for c in select("sft --config_file zero")] == [
        f"sft --config_file zero{i}.yaml" for i in (1, 2, 3)
    ]
    assert select(None) == list(CASES)


def test_fill_puts_in_assets_and_folders() -> None:
    args = ("--model", "{assets[llama]}", "--output_dir", "{out}", "--resume", "{checkpoint}")
    filled = fill(args, {"llama": "/a/llama"}, out="/o", checkpoint="/o/checkpoint-2")
    assert filled == ["--model", "/a/llama", "--output_dir", "/o", "--resume", "/o/checkpoint-2"]
    assets = {k: str(v) for k, v in asset_paths(Path("/r")).items()}
    for case in CASES:  # every placeholder a case uses is an asset or a folder
        fill(case.args + case.resume_args, assets, out="/o", checkpoint="/c")


def test_commands_launch_each_engine_as_asked(tmp_path: Path) -> None:
    plain = Case("sft", TRL, "sft")
    config = Case("fsdp", TRL, "sft", config="fsdp2.yaml", processes=(2,))
    script = tmp_path / "sft.py"
    ours = command("overdrive", 2, config, script, ["--x"])
    assert ours[1:6] == ["-m", "overdrive", "launch", "--cpu", "--as_accelerate"]
    assert ours[ours.index("--config_file") + 1] == str(SITE / "trl/accelerate_configs/fsdp2.yaml")
    assert ours[ours.index("--num_processes") + 1] == "2" and ours[-2:] == [str(script), "--x"]
    theirs = command("accelerate", 2, config, script, [])
    assert "--cpu" not in theirs and "--multi_gpu" not in theirs  # the file as shipped
    assert "--cpu" in command("accelerate", 1, plain, script, [])
    assert "--multi_gpu" in command("accelerate", 2, plain, script, [])


def test_environments_keep_the_real_accelerate_off_overdrives_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "fp16")
    monkeypatch.setenv("RANK", "3")
    plain, seeded = Case("sft", TRL, "sft"), Case("u", DIFFUSERS, "u.py", seed_torch=True)
    ours = environment("overdrive", tmp_path, plain)
    theirs = environment("accelerate", tmp_path, plain)
    assert str(COMPAT_SITE) not in ours["PYTHONPATH"] and str(COMPAT_SITE) in theirs["PYTHONPATH"]
    for env in (ours, theirs):
        assert env["PYTHONPATH"].split(":")[0] == str(ADAPT)
        assert env["HF_HUB_OFFLINE"] == "1" and env["ECOSYSTEM_OUT"] == str(tmp_path)
        assert "ACCELERATE_MIXED_PRECISION" not in env and "RANK" not in env
    assert theirs["ACCELERATE_USE_CPU"] == "1" and "ACCELERATE_USE_CPU" not in ours
    backend_file = Case("z", TRL, "sft", config="zero3.yaml")
    assert "ACCELERATE_USE_CPU" not in environment("accelerate", tmp_path, backend_file)
    assert environment("overdrive", tmp_path, seeded)["ECOSYSTEM_SEED"] == "0"
    assert "ECOSYSTEM_SEED" not in ours


def test_clone_is_blobless_only_over_the_network(tmp_path: Path) -> None:
    assert _clone_flags("https://example.invalid/x.git") == ["--filter=blob:none"]
    assert _clone_flags(str(tmp_path)) == []


def test_tiny_vocabulary_and_sentences_are_fixed() -> None:
    vocab = word_vocabulary()
    assert list(vocab)[:4] == ["<pad>", "<s>", "</s>", "<unk>"]
    assert sorted(vocab.values()) == list(range(len(vocab)))
    assert sentences(3, seed=1) == sentences(3, seed=1) != sentences(3, seed=2)
    assert all(w in vocab for s in sentences(20, seed=4) for w in s.split())


def _run(folder: Path, losses: dict[str, list[float]], weights: dict[str, torch.Tensor]) -> Path:
    (folder / "out" / "unet").mkdir(parents=True)
    for rank, values in losses.items():
        (folder / f"losses-{rank}.jsonl").write_text("".join(f"{v}\n" for v in values))
        (folder / f"engine-{rank}.json").write_text(json.dumps({"distributed_type": "NO"}))
    save_file(weights, str(folder / "out" / "unet" / "diffusion_pytorch_model.safetensors"))
    for step in (2, 4, 6):  # checkpoint-2 is inside a checkpoint: never a final weight
        ckpt = folder / "out" / f"checkpoint-{step}"
        (ckpt / "unet").mkdir(parents=True)
        save_file({"w": torch.full((2,), float(step))}, str(ckpt / "unet" / "w.safetensors"))
    return folder


def test_losses_weights_and_checkpoints_compare(tmp_path: Path) -> None:
    w = {"w": torch.tensor([1.0, 2.0])}
    a = _run(tmp_path / "a", {"rank0": [1.5, 1.25], "rank1": [2.0, 1.0]}, w)
    b = _run(tmp_path / "b", {"rank0": [1.5, 1.25], "rank1": [2.0, 1.0]}, w)
    c = _run(tmp_path / "c", {"rank0": [1.5, 1.5], "rank1": [2.0, 1.0]}, {"w": w["w"] + 0.5})
    assert cmp.compare_losses(cmp.read_losses(a), cmp.read_losses(b)) == {
        "equal": True, "max_abs_diff": 0.0, "steps": 2
    }  # fmt: skip
    assert cmp.compare_losses(cmp.read_losses(a), cmp.read_losses(c))["max_abs_diff"] == 0.25
    assert "different step counts" in cmp.compare_losses({"rank0": [1.0]}, {"rank0": []})["note"]
    assert cmp.read_facts(a) == {
        "rank0": {"distributed_type": "NO"},
        "rank1": {"distributed_type": "NO"},
    }
    final_a, final_c = cmp.safetensors_in(a / "out"), cmp.safetensors_in(c / "out")
    assert list(final_a) == ["unet/diffusion_pytorch_model.safetensors"]
    assert cmp.compare_weights(final_a, cmp.safetensors_in(b / "out")) == {
        "max_abs_diff": 0.0, "bitwise": True
    }  # fmt: skip
    assert cmp.compare_weights(final_a, final_c) == {"max_abs_diff": 0.5, "bitwise": False}
    assert "different files" in cmp.compare_weights(final_a, {"x": {}})["note"]
    assert cmp.compare_weights({}, {})["note"] == "no weights saved"
    assert cmp.checkpoints(a / "out") == ["checkpoint-2", "checkpoint-4", "checkpoint-6"]
    assert cmp.resume_checkpoint(a / "out", "second-newest") == "checkpoint-4"
    assert cmp.resume_checkpoint(a / "out", "checkpoint-2") == "checkpoint-2"
    report = cmp.checkpoint_report(a / "out", 3, ("unet", "unet_ema"))
    assert not report["ok"] and report["missing"]["checkpoint-2"] == ["unet_ema"]
    assert cmp.checkpoint_report(a / "out", 3, ("unet",))["ok"]
    assert not cmp.checkpoint_report(a / "out", 2, ("unet",))["ok"]  # one too many kept
    same = cmp.compare_checkpoint_files(a / "out", b / "out", ("unet",))
    assert same["bitwise"] and same["max_abs_diff"] == 0.0
    tail = cmp.resumed_tail({"rank0": [3.0, 2.0, 1.0]}, {"rank0": [2.0, 1.0]})
    assert tail["equal"]
    assert not cmp.resumed_tail({"rank0": [3.0, 2.0, 1.0]}, {"rank0": [3.0, 1.0]})["equal"]


def test_the_adaptation_layer_records_losses_and_the_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    adapt = _adapt()
    monkeypatch.setenv("ECOSYSTEM_OUT", str(tmp_path))
    monkeypatch.setenv("RANK", "1")
    calls: list[Any] = []

    class Engine:
        distributed_type = SimpleNamespace(value="DEEPSPEED")
        num_processes = 2
        mixed_precision = "bf16"
        state = SimpleNamespace(deepspeed_plugin=SimpleNamespace(zero_stage=3), fsdp_plugin=None)

        def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
            calls.append((loss, kwargs))

    adapt.record_backward(Engine)
    adapt.record_backward(Engine)  # once only
    engine = Engine()
    engine.backward(torch.tensor(0.5, requires_grad=True), retain_graph=True)
    engine.backward(torch.tensor(0.25))
    assert [c[1] for c in calls] == [{"retain_graph": True}, {}]
    assert cmp.read_losses(tmp_path) == {"rank1": [0.5, 0.25]}
    facts = cmp.read_facts(tmp_path)["rank1"]
    assert facts["distributed_type"] == "DEEPSPEED" and facts["zero_stage"] == 3
    assert facts["engine"] == __name__.split(".")[0]
    assert backend({"facts": {"rank0": facts}}) == "DEEPSPEED x2, bf16, ZeRO-3"
    assert "ecosystem_adapt" not in {type(f).__module__ for f in sys.meta_path}


def _row(name: str, ok: bool, bitwise: bool, source: str = TRL) -> dict[str, Any]:
    facts = {
        "rank0": {"distributed_type": "MULTI_CPU", "num_processes": 2, "mixed_precision": "no"}
    }
    run = {"ok": ok, "facts": facts, "runs": ["r0"]}
    failed = {"ok": False, "error": "RuntimeError: no devices", "runs": ["r0"]}
    row: dict[str, Any] = {"name": name, "processes": 2, "source": source}
    row["accelerate"], row["overdrive"] = (run if ok else failed), dict(run, ok=True)
    if ok:
        row["losses"] = {"equal": bitwise, "max_abs_diff": 0.0 if bitwise else 1e-3, "steps": 4}
        row["weights"] = {"max_abs_diff": 0.0 if bitwise else 2e-3, "bitwise": bitwise}
    return row


def test_table_rows_and_totals(tmp_path: Path) -> None:
    results = {
        "a": _row("sft", True, True),
        "b": _row("sft --packing", False, False),
        "c": _row("train_unconditional", True, False, DIFFUSERS),
    }
    text = table(results)
    lines = text.splitlines()
    assert lines[2].startswith("| sft | 2 | yes | yes | MULTI_CPU x2, no / MULTI_CPU x2, no |")
    assert "yes (4 per rank) | yes (bitwise)" in lines[2]
    assert "Accelerate: RuntimeError: no devices" in lines[3]
    assert lines[4].startswith("| train_unconditional |") and "no (2.0e-03)" in lines[4]
    assert lines[-1].startswith("| **all** | | **2** of 3 | **3** of 3 |")
    doc = tmp_path / "ecosystem.md"
    doc.write_text(f"intro\n\n{START}\nstale rows\n{END}\n\nafter\n")
    write_table(results, doc, {"ref": "v0.42.1", "commit": "abc", "how": "sparse git clone"})
    written = doc.read_text()
    assert "stale rows" not in written and written.endswith("after\n") and "`v0.42.1`" in written


def test_config_rows_are_compared_with_the_same_engines_ddp_run(tmp_path: Path) -> None:
    from tests.ecosystem.run import against_ddp

    def run(name: str, engine: str, value: float) -> dict[str, Any]:
        out = tmp_path / name / engine / "out"
        out.mkdir(parents=True)
        save_file({"w": torch.full((2,), value)}, str(out / "model.safetensors"))
        return {"ok": True, "out": str(out.parent)}

    results = {
        "ddp": {"config": "multi_gpu.yaml", "processes": 2},
        "fsdp": {"config": "fsdp2.yaml", "processes": 2},
        "plain": {"processes": 2},
    }
    for name, row in results.items():
        row["accelerate"] = run(name, "accelerate", 1.0)
        row["overdrive"] = run(name, "overdrive", 1.0 if name != "fsdp" else 1.5)
    against_ddp(results)
    assert results["fsdp"]["vs_ddp"]["accelerate"]["bitwise"]
    assert results["fsdp"]["vs_ddp"]["overdrive"]["max_abs_diff"] == 0.5
    assert "vs_ddp" not in results["ddp"] and "vs_ddp" not in results["plain"]


def test_reasons_are_per_case_or_per_process_count() -> None:
    from tests.ecosystem.reasons import KNOWN_DIFFERENT, REASONS, reason_for

    names = {c.name for c in CASES}
    assert set(REASONS) <= names
    assert KNOWN_DIFFERENT.issubset(names)
    assert "FSDP1" in reason_for("sft --config_file fsdp1.yaml", 2)
    assert reason_for("train_text_to_image", 1) == "" != reason_for("train_text_to_image", 2)
    assert reason_for("sft", 1) == ""


def test_checkpoint_column_tells_what_was_kept_and_how_resume_went() -> None:
    from tests.ecosystem.table import checkpoints

    report = {"kept": ["checkpoint-4", "checkpoint-6"], "missing": {}, "ok": True}
    bad = {"kept": ["checkpoint-6"], "missing": {"checkpoint-6": ["unet_ema"]}, "ok": False}
    row: dict[str, Any] = {"name": "train_unconditional --use_ema", "processes": 2}
    row["accelerate"] = {"runs": ["a"], "checkpoints": report, "resumed_from": "checkpoint-4"}
    row["overdrive"] = {"runs": ["b"], "checkpoints": bad, "resumed_from": "checkpoint-4"}
    row["accelerate"]["resumed_vs_uninterrupted"] = {"max_abs_diff": 1e-4, "bitwise": False}
    row["overdrive"]["resumed_vs_uninterrupted"] = {"max_abs_diff": 0.0, "bitwise": True}
    row["checkpoint_weights"] = {"max_abs_diff": 0.0, "bitwise": True}
    row["resumed_losses"] = {"equal": False, "max_abs_diff": 0.5, "steps": 2}
    row["resumed_weights"] = {"max_abs_diff": 1e-4, "bitwise": False}
    text = checkpoints(row)
    assert text.startswith("kept: Accelerate checkpoint-4, checkpoint-6 / overdrive checkpoint-6")
    assert "(wrong: missing {'checkpoint-6': ['unet_ema']}), each with unet, unet_ema" in text
    assert "hook-written weights equal: yes (bitwise)" in text
    assert (
        "resumed from checkpoint-4: losses equal no (5.0e-01), weights equal no (1.0e-04)" in text
    )
    assert text.endswith("own uninterrupted run: Accelerate no (1.0e-04), overdrive yes (bitwise)")
