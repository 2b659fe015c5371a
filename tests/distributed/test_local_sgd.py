"""LocalSGD: processes train apart and meet at the average every ``local_sgd_steps``."""

from __future__ import annotations

import pytest

from tests.helpers.dist import assert_ok, result_rows, run_launch


@pytest.mark.distributed
def test_local_sgd_averages_every_k_steps_and_at_the_end() -> None:
    result = run_launch("local_sgd_check.py", nprocs=2)
    assert_ok(result)
    a, b = result_rows(result.stdout)
    assert a["before_0"] != b["before_0"]  # no gradient sync inside the block
    assert a["after_0"] != b["after_0"]  # step 1 of 2: nothing averaged yet
    for x, y, mine, theirs in zip(a["after_1"], b["after_1"], a["before_1"], b["before_1"]):
        assert x == pytest.approx(y, abs=1e-6)  # step 2: averaged...
        assert x == pytest.approx((mine + theirs) / 2, abs=1e-5)  # ...to the mean
    assert a["after_2"] != b["after_2"]  # apart again
    assert a["end"] == pytest.approx(b["end"], abs=1e-6)  # leaving the block averages
