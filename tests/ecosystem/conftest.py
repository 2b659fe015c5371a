"""The side-by-side ecosystem runs need TRL, PEFT, diffusers and Hugging Face Accelerate in
test-only folders and diffusers' scripts from GitHub, and take minutes: pytest collects their
checks, and the simulation of TRL's script, only under `make ecosystem`
(OVERDRIVE_ECOSYSTEM=1). The fast unit tests of the harness's helpers always run."""

import os

collect_ignore_glob = (
    []
    if os.environ.get("OVERDRIVE_ECOSYSTEM") == "1"
    else ["test_side_by_side.py", "test_simulate_trl.py"]
)
# The adaptation layer is put first on the scripts' path; it holds no tests.
collect_ignore = ["adapt"]
