"""The rules of a launch without torch's elastic agent (see ``launch/direct.py``)."""

from __future__ import annotations

import json
from pathlib import Path

from overdrive.config import load_settings
from overdrive.launch import build_plan, direct
from overdrive.launch.ports import settle_port


def _plan(tmp_path: Path, **flags: object):
    cache = {"XDG_CACHE_HOME": str(tmp_path)}
    settings = load_settings(flags={"use_cpu": True, "num_processes": 2, **flags}, environ=cache)
    return build_plan(settings, "t.py", environ={})


def _failed_rank_zero(tmp_path: Path, summary: str) -> direct.GroupFailed:
    error_file = tmp_path / "error.json"
    error_file.write_text(json.dumps({"overdrive": {"summary": summary}}))
    return direct.GroupFailed({0: direct.WorkerEnd(0, 100, 1, str(error_file))})


def test_only_the_stores_own_port_in_use_moves_the_launch(tmp_path: Path) -> None:
    plan = _plan(tmp_path, main_process_port=29511)
    store = (
        "DistNetworkError: The server socket has failed to listen on any local network "
        "address. port: 29511, useIpv6: false, code: -98, name: EADDRINUSE, message: address "
        "already in use"
    )
    assert direct._rank_zero_found_the_port_taken(_failed_rank_zero(tmp_path, store), plan)
    own_server = "OSError: [Errno 98] Address already in use (the script's port: 6006, ...)"
    failed = _failed_rank_zero(tmp_path, own_server)
    assert not direct._rank_zero_found_the_port_taken(failed, plan)


def test_the_agent_runs_when_its_own_features_are_asked_for(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    assert direct.applies(plan, environ={})
    assert not direct.applies(plan, environ={"TORCHELASTIC_ENABLE_FILE_TIMER": "1"})
    assert not direct.applies(_plan(tmp_path, num_machines=2, main_process_ip="10.0.0.1"), {})


def test_the_default_port_becomes_a_free_one_and_a_chosen_port_stays(tmp_path: Path) -> None:
    moved = settle_port(_plan(tmp_path))
    assert moved.main_port != 29500 and moved.port_note is None  # nothing to tell the user
    chosen = _plan(tmp_path, main_process_port=29512)
    assert settle_port(chosen).main_port == 29512
