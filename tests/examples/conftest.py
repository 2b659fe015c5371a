"""The side-by-side example runs need Hugging Face Accelerate in a test-only folder and its
examples fetched from GitHub, and take minutes: pytest collects them only under
`make examples` (OVERDRIVE_EXAMPLES=1). The fast unit tests of the helpers always run."""

import os

collect_ignore_glob = (
    [] if os.environ.get("OVERDRIVE_EXAMPLES") == "1" else ["test_side_by_side.py"]
)
# The adaptation layer is put first on the examples' path; it holds no tests.
collect_ignore = ["adapt"]
