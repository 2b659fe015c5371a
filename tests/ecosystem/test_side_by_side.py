"""What `make ecosystem` must show (read from ``.ecosystem/results.json``, which
``python -m tests.ecosystem.run`` writes first): every case that runs under Hugging Face
Accelerate runs under overdrive, the shipped config files' backends are applied, and the rows
that agree today keep agreeing. Collected only under OVERDRIVE_ECOSYSTEM=1 (conftest.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.ecosystem.fetch import CACHE
from tests.ecosystem.reasons import KNOWN_DIFFERENT
from tests.ecosystem.run import ENGINES

RESULTS = CACHE / "results.json"


def _results() -> dict[str, dict[str, Any]]:
    if not RESULTS.is_file():
        pytest.fail(f"{RESULTS} is missing: run `python -m tests.ecosystem.run` first")
    return json.loads(RESULTS.read_text())


def test_what_runs_under_hugging_face_accelerate_runs_under_overdrive() -> None:
    failed = [
        f"{key}: {row['overdrive'].get('error')}"
        for key, row in _results().items()
        if row["accelerate"]["ok"] and not row["overdrive"]["ok"]
    ]
    assert not failed


def test_config_files_get_their_backend_under_overdrive() -> None:
    expected = {
        "multi_gpu.yaml": ("MULTI_CPU", None),
        "fsdp1.yaml": ("FSDP", ("fsdp_version", 1)),
        "fsdp2.yaml": ("FSDP", ("fsdp_version", 2)),
        "zero1.yaml": ("DEEPSPEED", ("zero_stage", 1)),
        "zero2.yaml": ("DEEPSPEED", ("zero_stage", 2)),
        "zero3.yaml": ("DEEPSPEED", ("zero_stage", 3)),
    }
    rows = [r for r in _results().values() if r.get("config")]
    assert {r["config"] for r in rows} == set(expected)
    for row in rows:
        kind, extra = expected[row["config"]]
        for rank, facts in row["overdrive"]["facts"].items():
            assert facts["engine"] == "overdrive", (row["name"], rank)
            assert facts["distributed_type"] == kind, (row["name"], rank)
            assert facts["num_processes"] == row["processes"]
            assert facts["mixed_precision"] == "bf16"  # the file's, as shipped
            if extra:
                assert facts.get(extra[0]) == extra[1], (row["name"], rank)


def test_rows_that_run_under_both_agree_bitwise() -> None:
    for key, row in _results().items():
        if not (row["accelerate"]["ok"] and row["overdrive"]["ok"]):
            continue
        if row["name"] in KNOWN_DIFFERENT:
            continue
        assert row["losses"]["equal"], (key, row["losses"])
        assert row["weights"]["bitwise"], (key, row["weights"])


def test_diffusers_checkpoints_hold_what_the_save_hooks_write() -> None:
    for key, row in _results().items():
        report = row["overdrive"].get("checkpoints")
        if report is None:
            continue
        assert report["ok"], (key, report)
        if row["accelerate"]["ok"]:
            assert row["checkpoint_weights"]["bitwise"], (key, row["checkpoint_weights"])


def test_resumed_runs_are_accelerates() -> None:
    # overdrive's load_state resumes as Hugging Face Accelerate's does, so the two resumed
    # runs agree bitwise, and each is as far from its own uninterrupted run as the other
    for key, row in _results().items():
        if "resumed_vs_uninterrupted" not in row["overdrive"] or not row["accelerate"]["ok"]:
            continue
        assert row["resumed_losses"]["equal"], (key, row["resumed_losses"])
        assert row["resumed_weights"]["bitwise"], (key, row["resumed_weights"])
        own = [row[e]["resumed_vs_uninterrupted"]["max_abs_diff"] for e in ENGINES]
        assert own[0] == own[1], (key, own)
