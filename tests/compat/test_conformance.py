"""Hugging Face Accelerate's own test scripts, ported by renaming imports, pass under overdrive.

Runs only under ``make compat`` (see conftest.py). For each script: port it (port.py), run
every test call on 2 processes (harness.py), and require that each call Hugging Face
Accelerate passes on a CPU host (expected.DESCRIBED) passes here too, except the intentional
differences and the known gaps listed in expected.py, which must fail as listed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.compat import expected
from tests.compat.harness import REPO, run_script
from tests.compat.port import port_all

SITE = Path(os.environ.get("OVERDRIVE_COMPAT_SITE", REPO / ".compat" / "site"))


@pytest.fixture(scope="module")
def ported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ported")
    port_all(SITE, out)
    return out


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(expected.SCRIPTS))
def test_ported_script_passes_what_hugging_face_accelerate_passes(
    ported: Path, script: str
) -> None:
    launcher, env = expected.SCRIPTS[script]
    nprocs = 1 if launcher == "python" else 2
    result = run_script(
        ported / script, launcher=launcher, nprocs=nprocs, extra_env=env, call_timeout=90
    )
    gaps = [call for (name, call) in expected.NOT_YET if name == script]
    if gaps:  # a known gap (the issue stays open): it must still fail exactly as recorded
        assert all(result.calls.get(call) == "fail" for call in gaps), result.calls
        return
    problems = []
    for call, outcome in expected.DESCRIBED[script].items():
        if outcome != "pass":
            continue
        got = result.calls.get(call, "not reached")
        if (script, call) in expected.INTENTIONAL:
            if got == "pass":
                problems.append(f"{call}: listed as an intentional difference but passes")
            continue
        if got != "pass":
            problems.append(f"{call}: {got} ({result.errors.get(call, '')})")
    assert not problems, f"{script}:\n" + "\n".join(problems)
    for call in ("<import>", "<main>", "<launch>"):
        assert call not in result.calls, f"{script}: {result.errors.get(call)}"


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(expected.DESCRIBED_PYTHON))
def test_ported_script_under_plain_python_passes_what_hugging_face_accelerate_passes(
    ported: Path, script: str
) -> None:
    result = run_script(ported / script, launcher="python", nprocs=1, call_timeout=90)
    problems = [
        f"{call}: {result.calls.get(call, 'not reached')} ({result.errors.get(call, '')})"
        for call, outcome in expected.DESCRIBED_PYTHON[script].items()
        if outcome == "pass" and result.calls.get(call) != "pass"
    ]
    assert not problems, f"{script} under python:\n" + "\n".join(problems)
