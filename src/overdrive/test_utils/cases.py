"""``unittest.TestCase`` bases Hugging Face Accelerate's tests derive from."""

from __future__ import annotations

import shutil
import tempfile
import unittest
from pathlib import Path
from typing import Any, ClassVar

from overdrive.processes.process_state import reset_state


class TempDirTestCase(unittest.TestCase):
    """One temporary folder (``self.tmpdir``) for the whole class, emptied before each test."""

    clear_on_setup: ClassVar[bool] = True
    tmpdir: ClassVar[Path]

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmpdir = Path(tempfile.mkdtemp())

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.tmpdir, ignore_errors=True)

    def setUp(self) -> None:
        if not self.clear_on_setup:
            return
        for entry in self.tmpdir.glob("**/*"):
            if entry.is_file():
                entry.unlink()
            elif entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)


class AccelerateTestCase(unittest.TestCase):
    """Forgets the current accelerator's state after every test."""

    def tearDown(self) -> None:
        super().tearDown()

        reset_state(True)


class MockingTestCase(unittest.TestCase):
    """Call ``self.add_mocks(...)`` in ``setUp``: each mock is started and stopped per test."""

    mocks: list[Any]

    def add_mocks(self, mocks: Any) -> None:
        """Start ``mocks`` (one patcher or a list) now; stop them when the test ends."""
        self.mocks = list(mocks) if isinstance(mocks, (tuple, list)) else [mocks]
        for patcher in self.mocks:
            patcher.start()
            self.addCleanup(patcher.stop)
