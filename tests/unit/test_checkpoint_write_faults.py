"""A failed checkpoint write names the fault it met (issue 41): a full disk, a used-up quota,
a read-only filesystem and a folder the process may not write in each get their own fix."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from overdrive.checkpoint.errors import CheckpointError
from overdrive.checkpoint.serialization import writing

CASES = {
    errno.ENOSPC: "the filesystem is full: make room on it",
    errno.EDQUOT: "your disk quota there is used up",
    errno.EROFS: "mounted read-only: save to a folder on a writable one",
    errno.EACCES: "may not write in that folder: give it write permission",
}


@pytest.mark.parametrize("code", list(CASES), ids=[errno.errorcode[c] for c in CASES])
def test_each_write_fault_gets_its_own_fix(code: int, tmp_path: Path) -> None:
    target = tmp_path / "ckpt" / "model.safetensors"
    with pytest.raises(CheckpointError) as caught, writing(target, "save_state"):
        raise OSError(code, os.strerror(code), str(target))
    message = str(caught.value)
    assert message.startswith(f"save_state: could not write {target}: [Errno {code}]")
    assert CASES[code] in message
    others = [text for other, text in CASES.items() if other != code]
    assert not any(text in message for text in others)  # one fault, one fix
    if code in (errno.EROFS, errno.EACCES):
        assert "make room" not in message
