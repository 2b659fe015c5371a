"""The conformance suite's own files are tools, not tests of overdrive: pytest collects only
test_*.py here (the rename's unit tests); the suite itself runs with `make conformance`."""
