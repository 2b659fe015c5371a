"""The conformance suite runs only under `make compat` (it needs Hugging Face Accelerate's
package in a test-only folder and takes minutes); `make test` skips collecting it."""

import os

collect_ignore_glob = [] if os.environ.get("OVERDRIVE_COMPAT") == "1" else ["test_*.py"]
