"""A few of Hugging Face Accelerate's examples, run under it and (renamed) under overdrive on 2
CPU processes, train to bitwise the same weights. Collected only under `make examples`
(OVERDRIVE_EXAMPLES=1): it needs the compat site and the fetched examples, and takes a
minute or two."""

from __future__ import annotations

import pytest

from tests.conformance.rename import port_tree
from tests.examples.cases import select
from tests.examples.fetch import CACHE, fetch
from tests.examples.run import SITE, run_case

pytestmark = [pytest.mark.distributed, pytest.mark.slow]


@pytest.fixture(scope="module", autouse=True)
def ported() -> None:
    if not (SITE / "accelerate").is_dir():
        pytest.fail(f"Hugging Face Accelerate is not installed in {SITE}: run `make examples`")
    port_tree(fetch() / "examples", CACHE / "ported" / "examples")


@pytest.mark.parametrize("name", ["nlp_example", "gradient_accumulation", "local_sgd"])
def test_example_trains_to_the_same_weights_under_both(name: str) -> None:
    row = run_case(select(name)[0], 2, timeout=600)
    for engine in ("accelerate", "overdrive"):
        assert row[engine]["ok"], f"{engine}: {row[engine].get('error')}"
    assert row["moved"], "training left the weights where they started: nothing was compared"
    assert row["bitwise"], f"final weights differ by up to {row['max_abs_diff']}"


def test_resumed_checkpointing_example_resumes_as_under_accelerate() -> None:
    # Both replay epoch 0's batch order after load_state on 2 processes (the shuffling
    # generator seeded at prepare is not in the checkpoint), so each resumed run differs from
    # its own uninterrupted one by the same amount and the two resumed runs are bitwise equal.
    row = run_case(select("checkpointing resume")[0], 2, timeout=600)
    for engine in ("accelerate", "overdrive"):
        assert row[engine]["ok"], f"{engine}: {row[engine].get('error')}"
    assert row["bitwise"], f"resumed weights differ by up to {row['max_abs_diff']}"
    resumed = [row[e]["resumed_vs_uninterrupted"] for e in ("accelerate", "overdrive")]
    assert resumed[0] == resumed[1], resumed
