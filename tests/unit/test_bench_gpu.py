"""The GPU bench's harness (``bench/gpu``), run here in its CPU smoke mode: every variant gets
a row, the ones that ran have positive timings, the ones that cannot run say why, and
``--write-results`` puts the section between the markers of a results file."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench" / "gpu"
VARIANTS = [(lay, p) for lay in ("DDP", "FSDP2", "ZeRO-2", "TP") for p in ("bf16", "fp8")]


def _report() -> ModuleType:
    """bench/gpu/report.py, loaded by path (bench/ is no package)."""
    spec = importlib.util.spec_from_file_location("bench_gpu_report", BENCH / "report.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def _rows(stdout: str) -> dict[tuple[str, str], list[str]]:
    """(variant, precision) -> the cells of its table row."""
    rows = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 11 and cells[1] in ("bf16", "fp8"):
            rows[(cells[0], cells[1])] = cells
    return rows


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """One smoke run (plain torch model; deepspeed hidden so its row must say why)."""
    tmp = tmp_path_factory.mktemp("bench_gpu")
    stub = tmp / "stub" / "deepspeed"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text('raise ImportError("hidden by the test")\n')
    results = tmp / "RESULTS.md"
    results.write_text(
        "# Benchmark results\n\n<!-- gpu:start -->\nNo run yet.\n<!-- gpu:end -->\n\n## older\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "OVERDRIVE_"))}
    for key in (
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
    ):
        env.pop(key, None)
    env["PYTHONPATH"] = os.pathsep.join([str(stub.parent), str(REPO / "src")])
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", XDG_CACHE_HOME=str(tmp / "cache"))
    cmd = [sys.executable, str(BENCH / "run.py"), "--device", "cpu", "--smoke", "--model",
           "torch", "--write-results", "--results", str(results)]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout, results


def test_every_variant_has_a_row(smoke: tuple[str, Path]) -> None:
    assert sorted(_rows(smoke[0])) == sorted(VARIANTS)


@pytest.mark.parametrize("variant", [("DDP", "bf16"), ("FSDP2", "bf16")])
def test_variants_that_ran_have_positive_timings(
    smoke: tuple[str, Path], variant: tuple[str, str]
) -> None:
    cells = _rows(smoke[0])[variant]
    numbers = [float(c.replace(",", "")) for c in cells[2:10]]
    assert all(n > 0 for n in numbers), cells
    assert numbers[-1] == 4  # steps: SMOKE_PLAN's 2 rounds x 2 steps per side


def test_rows_that_cannot_run_say_why(smoke: tuple[str, Path]) -> None:
    rows = _rows(smoke[0])
    assert rows[("ZeRO-2", "bf16")][10].startswith("not run: deepspeed cannot be imported")
    assert "hidden by the test" in rows[("ZeRO-2", "bf16")][10]
    for layout in ("DDP", "FSDP2"):
        assert "fp8 needs a CUDA GPU" in rows[(layout, "fp8")][10]
    assert "needs 2+ GPUs" in rows[("TP", "bf16")][10]
    assert all(c == "-" for c in rows[("TP", "bf16")][2:10])
    assert "world 1: overdrive wraps no DDP" in rows[("DDP", "bf16")][10]


def test_write_results_replaces_the_placeholder_between_the_markers(
    smoke: tuple[str, Path],
) -> None:
    text = smoke[1].read_text()
    assert text.startswith("# Benchmark results\n\n<!-- gpu:start -->\n### bench/gpu: ")
    assert "No run yet." not in text and text.endswith("<!-- gpu:end -->\n\n## older\n")
    assert "python bench/gpu/run.py --device cpu --smoke" in text
    assert sorted(_rows(text)) == sorted(VARIANTS)


def test_insert_keeps_earlier_runs_and_adds_markers_when_missing() -> None:
    report = _report()
    first = report.insert("# R\n\n<!-- gpu:start -->\nx\n<!-- gpu:end -->\n", "### bench/gpu: A\n")
    second = report.insert(first, "### bench/gpu: B\n")
    assert second == (
        "# R\n\n<!-- gpu:start -->\n### bench/gpu: B\n\n### bench/gpu: A\n<!-- gpu:end -->\n"
    )
    fresh = report.insert("# R\n\n## other\n", "### bench/gpu: C\n")
    assert fresh == "# R\n\n<!-- gpu:start -->\n### bench/gpu: C\n<!-- gpu:end -->\n\n## other\n"
