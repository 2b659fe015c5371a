"""Two jobs saving automatically named checkpoints into one project_dir at the same time:
both finish without an error, and every checkpoint a save reported is complete, intact
and holds what that save wrote (scripts/ckpt_concurrent.py makes the first saves collide
on one number, then lets both jobs save as fast as they can).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from overdrive.checkpoint import MANIFEST, integrity
from tests.helpers.dist import REPO, clean_env

pytestmark = [pytest.mark.slow]

SCRIPT = Path(__file__).parent / "scripts" / "ckpt_concurrent.py"
SAVES = 12


def test_concurrent_jobs_report_only_complete_checkpoints(tmp_path: Path) -> None:
    project, sync = tmp_path / "project", tmp_path / "sync"
    sync.mkdir()
    jobs = {
        job: subprocess.Popen(
            [sys.executable, str(SCRIPT), "--project", str(project), "--sync", str(sync)]
            + ["--job", job, "--saves", str(SAVES)],
            env=clean_env(),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for job in ("a", "b")
    }
    outputs = {job: proc.communicate(timeout=180) for job, proc in jobs.items()}
    for job, proc in jobs.items():
        out, err = outputs[job]
        assert proc.returncode == 0, f"job {job}: exit {proc.returncode}\n{out}\n{err}"
        assert "Traceback" not in err, err

    root = project / "checkpoints"
    seen: set[str] = set()
    for job in ("a", "b"):
        reported = json.loads((sync / f"reported_{job}.json").read_text())
        assert [index for index, _ in reported] == list(range(1 + SAVES))
        for index, path_text in reported:
            path = Path(path_text)
            assert path.parent == root and path_text not in seen, path
            seen.add(path_text)
            manifest = json.loads((path / MANIFEST).read_text())
            assert manifest["name"] == path.name
            integrity.verify(path, manifest["files"])  # every file whole
            assert sorted(manifest["files"]) == sorted(
                p.relative_to(path).as_posix()
                for p in path.rglob("*")
                if p.is_file() and p.name != MANIFEST
            )
            stored = json.loads((path / "custom_object_0.json").read_text())["state"]
            assert stored == {"job": job, "index": index}, path
    # Nothing half-written is left, and nothing but the reported checkpoints.
    assert sorted(p.name for p in root.iterdir()) == sorted(Path(p).name for p in seen)
