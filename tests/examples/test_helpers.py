"""The side-by-side examples' pure helpers (no example runs, no network, no compat site)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.conformance.rename import port_tree
from tests.examples.cases import CASES, select
from tests.examples.compare import compare, moved
from tests.examples.run import _last_error, command, environment
from tests.examples.table import END, START, table, write_table

EXAMPLE = """\
import evaluate
from accelerate import Accelerator, DistributedType
from accelerate.utils import set_seed
from accelerate.local_sgd import LocalSGD
import accelerate

# `accelerate` will kindly throw an error; run `accelerate launch` on it
logger = get_logger("accelerate.examples")
"""


def test_port_renames_imports_and_module_strings_only(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "by_feature").mkdir(parents=True)
    (source / "by_feature" / "local_sgd.py").write_text(EXAMPLE)
    (source / "ds.json").write_text('{"accelerate": 1}')
    port_tree(source, tmp_path / "out")
    ported = (tmp_path / "out" / "by_feature" / "local_sgd.py").read_text()
    assert "from overdrive import Accelerator, DistributedType" in ported
    assert "from overdrive.utils import set_seed" in ported
    assert "from overdrive.local_sgd import LocalSGD" in ported
    assert "\nimport overdrive\n" in ported
    assert '"overdrive.examples"' in ported
    assert "# `accelerate` will kindly throw an error; run `accelerate launch` on it" in ported
    assert "import evaluate" in ported
    assert (tmp_path / "out" / "ds.json").read_text() == '{"accelerate": 1}'


def _weights(folder: Path, ranks: dict[str, list[torch.Tensor]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for rank, finals in ranks.items():
        models = [{"initial": {"w": torch.zeros(2)}, "final": {"w": f}} for f in finals]
        torch.save(models, folder / f"weights-rank{rank}.pt")
    return folder


def test_compare_reports_bitwise_equality_and_the_largest_difference(tmp_path: Path) -> None:
    a = _weights(tmp_path / "a", {"0": [torch.tensor([1.0, 2.0])], "1": [torch.ones(2)]})
    b = _weights(tmp_path / "b", {"0": [torch.tensor([1.0, 2.0])], "1": [torch.ones(2)]})
    c = _weights(tmp_path / "c", {"0": [torch.tensor([1.0, 2.5])], "1": [torch.ones(2)]})
    assert compare(a, b) == {"max_abs_diff": 0.0, "bitwise": True}
    assert compare(a, c) == {"max_abs_diff": 0.5, "bitwise": False}
    assert moved(c) == 2.5


def test_compare_refuses_runs_with_different_ranks_or_models(tmp_path: Path) -> None:
    a = _weights(tmp_path / "a", {"0": [torch.ones(2)], "1": [torch.ones(2)]})
    one_rank = _weights(tmp_path / "b", {"0": [torch.ones(2)]})
    two_models = _weights(tmp_path / "c", {"0": [torch.ones(2)] * 2, "1": [torch.ones(2)]})
    assert compare(a, one_rank)["max_abs_diff"] is None
    assert compare(a, two_models)["note"] == "different model counts"
    assert compare(tmp_path / "none", tmp_path / "none")["max_abs_diff"] is None


def _row(name: str, n: int, **kw: Any) -> dict[str, Any]:
    ok = {"ok": True}
    row = {"example": "by_feature/x.py", "name": name, "processes": n}
    row.update({"accelerate": ok, "overdrive": ok, **kw})
    return row


def test_table_marks_agreement_differences_and_failures() -> None:
    results = {
        "a": _row("x --flag 1", 2, max_abs_diff=0.0, bitwise=True),
        "b": _row("x --flag 2", 1, max_abs_diff=2.5e-7, bitwise=False),
        "c": _row("x", 2, overdrive={"ok": False, "error": "ValueError: a|b"}),
    }
    text = table(results)
    lines = text.splitlines()
    assert lines[2] == "| x.py |  | 2 | yes | no | - | overdrive: ValueError: a\\|b |"
    assert lines[3] == "| x.py | --flag 1 | 2 | yes | yes | yes (bitwise) |  |"
    assert lines[4].startswith("| x.py | --flag 2 | 1 | yes | yes | no (2.5e-07) | not explained")
    assert "**3** of 3" in lines[-1] and "**1** of the 2 that run under both" in lines[-1]


def test_table_reports_each_engines_resume_against_its_uninterrupted_run() -> None:
    row = _row("x resume", 2, max_abs_diff=0.1, bitwise=False)
    row["accelerate"] = {"ok": True, "resumed_vs_uninterrupted": 0.01}
    row["overdrive"] = {"ok": True, "resumed_vs_uninterrupted": 0.0}
    line = table({"r": row}).splitlines()[2]
    assert "Hugging Face Accelerate's resumed run vs its uninterrupted one: 1.0e-02" in line
    assert "overdrive's resumed run vs its uninterrupted one: equal" in line


def test_write_table_replaces_the_block_between_the_markers(tmp_path: Path) -> None:
    doc = tmp_path / "migrating.md"
    doc.write_text(f"# head\n\n{START}\nold\n{END}\n\ntail\n")
    write_table({"a": _row("x", 1, max_abs_diff=0.0, bitwise=True)}, doc)
    text = doc.read_text()
    assert "old" not in text and text.startswith("# head") and text.endswith("tail\n")
    assert text.count(START) == 1 and "| x.py |" in text


def test_launch_commands_of_both_engines() -> None:
    case = select("nlp_example")[0]
    ours = command("overdrive", 2, case, Path("e.py"), ["--x"])
    assert ours[2:5] == ["overdrive", "launch", "--cpu"] and ours[-2:] == ["e.py", "--x"]
    assert "--multi_gpu" in command("accelerate", 2, case, Path("e.py"), [])
    assert "--cpu" in command("accelerate", 1, case, Path("e.py"), [])
    fsdp = select("fsdp_with_peak_mem_tracking")[0]
    theirs = command("accelerate", 2, fsdp, Path("e.py"), [])
    assert "--use_fsdp" in theirs and "--multi_gpu" not in theirs


def test_case_names_are_unique_and_selection_refuses_unknown_names() -> None:
    assert len({c.name for c in CASES}) == len(CASES)
    with pytest.raises(SystemExit):
        select("no_such_example")


def test_last_error_prefers_the_exception_line() -> None:
    log = "[rank 1] Traceback\n[rank 1] ValueError: bad flag\nlauncher: rank 1 failed\n"
    assert _last_error(log) == "ValueError: bad flag"
    assert _last_error("just output\n") == "just output"
    launcher = "ImportError: no lib\nsubprocess.CalledProcessError: Command '[...]' returned 1\n"
    assert _last_error(launcher) == "ImportError: no lib"
    torchrun = "[rank0]: ImportError: no lib\n=====\n"
    assert _last_error(torchrun) == "ImportError: no lib"


def test_hugging_face_accelerate_is_told_to_use_cpus_unless_a_backend_is_named(
    tmp_path: Path,
) -> None:
    assert environment("accelerate", tmp_path)["ACCELERATE_USE_CPU"] == "1"
    assert "ACCELERATE_USE_CPU" not in environment("accelerate", tmp_path, backend=True)
    ours = environment("overdrive", tmp_path)
    assert "ACCELERATE_USE_CPU" not in ours and ours["EXAMPLES_OUT"] == str(tmp_path)
