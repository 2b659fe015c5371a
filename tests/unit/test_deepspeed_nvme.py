"""NVMe offload is checked before DeepSpeed starts: a path that is a directory, and the
async I/O op (libaio) DeepSpeed needs for it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from overdrive.ds.config import build
from overdrive.ds.engine import check_offload
from overdrive.errors import ConfigError
from tests.unit.test_deepspeed_config import line_of, settings_for


def _config(tmp_path: Path, **section: object):
    data = {"deepspeed_config": {"zero_stage": 3, **section}}
    return build(settings_for(tmp_path, data))


def test_nvme_without_a_directory_is_refused_naming_the_setting_and_line(tmp_path: Path) -> None:
    cfg = _config(tmp_path, offload_param_device="nvme")
    with pytest.raises(ConfigError) as info:
        check_offload(cfg)
    text = str(info.value)
    assert "deepspeed_config.offload_param_device is nvme" in text
    assert line_of(tmp_path, "offload_param_device") in text and "not set" in text
    assert "offload_param_nvme_path" in text
    missing = _config(tmp_path, offload_optimizer_device="nvme",
                      offload_optimizer_nvme_path=str(tmp_path / "nope"))  # fmt: skip
    with pytest.raises(ConfigError, match="which is not a directory"):
        check_offload(missing)


def test_nvme_needs_the_async_io_op(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    from deepspeed.ops.op_builder import AsyncIOBuilder

    cfg = _config(tmp_path, offload_param_device="nvme", offload_param_nvme_path=str(tmp_path))
    if AsyncIOBuilder().is_compatible(verbose=False):  # a machine with libaio: it goes ahead
        check_offload(cfg)
        return
    assert not os.path.exists("/usr/include/libaio.h")
    with pytest.raises(ConfigError, match="needs DeepSpeed's async I/O op") as info:
        check_offload(cfg)
    assert "apt install libaio-dev" in str(info.value) and "offload to cpu" in str(info.value)


def test_cpu_offload_needs_nothing_more(tmp_path: Path) -> None:
    check_offload(_config(tmp_path, offload_param_device="cpu", offload_optimizer_device="cpu"))
