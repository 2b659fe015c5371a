"""use_stateful_dataloader on two processes (scripts/stateful_resume.py): sharded,
dispatched and iterable loaders resume mid-epoch from the StatefulDataLoader's state, as the
uninterrupted run goes on, and a dataset with its own state is not read again."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.dist import assert_ok, free_port, result_rows, run_launch

pytestmark = [pytest.mark.distributed]
pytest.importorskip("torchdata.stateful_dataloader")


def test_every_mode_resumes_from_the_stateful_dataloader(tmp_path: Path) -> None:
    result = run_launch(
        "stateful_resume.py",
        args=["--out", str(tmp_path)],
        launch_args=["--main_process_port", str(free_port())],
    )
    assert_ok(result)
    rows = result_rows(result.stdout)
    assert len(rows) == 8
    for row in rows:
        assert len(row["full"]) == 6, row
        # saved after 3 batches: the rest of the epoch, the padded last round included
        assert row["resumed"] == row["full"][3:], row
    by_case = {(row["case"], row["rank"]): row for row in rows}
    # the dispatcher splits its short last round (20, 21) one each, as Hugging Face
    # Accelerate's does; sharding pads it to the batch size (even_batches)
    assert by_case[("dispatch", 1)]["full"][-1] == [21]
    assert by_case[("iterable", 1)]["resumed"][-1] == [0, 1]
    # The stream resumed from its own state: 22 - 3 rounds x 4 samples, nothing read twice
    # (every process reads it; dispatched, process 0 alone).
    assert by_case[("iterable", 0)]["reads"] == by_case[("iterable", 1)]["reads"] == 10
    assert by_case[("iterable_dispatch", 0)]["reads"] == 10
    assert by_case[("iterable_dispatch", 1)]["reads"] == 0
