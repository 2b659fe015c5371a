"""Names the described system's own unit tests import, with their behaviour."""

from __future__ import annotations

import os
import unittest
from unittest import mock

from overdrive.test_utils import testing
from overdrive.test_utils.cases import MockingTestCase, TempDirTestCase
from overdrive.utils import constants


def test_beta_versions() -> None:
    assert constants.BETA_TP_AVAILABLE_PYTORCH_VERSION == "2.3.0"
    assert constants.BETA_CP_AVAILABLE_PYTORCH_VERSION == "2.6.0"
    assert constants.BETA_SP_AVAILABLE_DEEPSPEED_VERSION == "0.18.2"
    assert constants.BETA_TP_AVAILABLE_TRANSFORMERS_VERSION == "4.52.0"


def test_get_launch_command_flags() -> None:
    cmd = testing.get_launch_command(num_processes=2, debug=True, quiet=False, config=None)
    assert cmd == ["accelerate", "launch", "--num_processes=2", "--debug"]
    assert testing.DEFAULT_LAUNCH_COMMAND[:2] == ["accelerate", "launch"]
    assert "--monitor_interval=0.1" in testing.DEFAULT_LAUNCH_COMMAND


def test_memory_allocated_func_returns_int() -> None:
    assert isinstance(testing.memory_allocated_func(), int)


def test_temp_dir_case_empties_folder() -> None:
    class Case(TempDirTestCase):
        def test_a(self) -> None:
            (self.tmpdir / "sub").mkdir()
            (self.tmpdir / "f.txt").write_text("x")

        def test_b(self) -> None:
            assert list(self.tmpdir.iterdir()) == []

    result = unittest.TestResult()
    unittest.TestSuite([Case("test_a"), Case("test_b")]).run(result)
    assert result.wasSuccessful(), result.failures + result.errors
    assert not Case.tmpdir.exists()


def test_mocking_case_stops_mocks() -> None:
    seen: list[str | None] = []

    class Case(MockingTestCase):
        def setUp(self) -> None:
            super().setUp()
            self.add_mocks(mock.patch.dict(os.environ, {"OVERDRIVE_NAMES_PROBE": "1"}))

        def test_a(self) -> None:
            seen.append(os.environ.get("OVERDRIVE_NAMES_PROBE"))

    result = unittest.TestResult()
    Case("test_a").run(result)
    assert result.wasSuccessful()
    assert seen == ["1"]
    assert "OVERDRIVE_NAMES_PROBE" not in os.environ


def test_require_huggingface_suite_skips_without_it() -> None:
    with mock.patch.object(testing.imports, "is_datasets_available", return_value=False):

        @testing.require_huggingface_suite
        def needs_suite() -> None:
            pass

    assert getattr(needs_suite, "__unittest_skip__", False)
