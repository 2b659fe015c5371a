"""The Trainer conformance suite's own files are tools, not tests of overdrive: pytest collects
only test_*.py here (their unit tests); the suite itself runs with `make trainer`."""
