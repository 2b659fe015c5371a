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


def test_tracker_requires_follow_installation() -> None:
    from overdrive.test_utils import requires

    with mock.patch.object(requires.imports, "is_wandb_available", return_value=False):

        @requires.require_wandb
        def without() -> None:
            pass

    with mock.patch.object(requires.imports, "is_wandb_available", return_value=True):

        @requires.require_wandb
        def with_it() -> None:
            pass

    assert getattr(without, "__unittest_skip__", False)
    assert not getattr(with_it, "__unittest_skip__", False)
    # overdrive never runs on TorchXLA, so this marker never skips
    assert not getattr(testing.require_non_torch_xla(lambda: None), "__unittest_skip__", False)


def test_run_first_marks_order() -> None:
    import pytest

    from overdrive.test_utils import requires

    def case() -> None:
        pass

    with mock.patch.object(pytest, "mark") as mark:
        testing.run_first(case)
    mark.order.assert_called_once_with(1)
    mark.order.return_value.assert_called_once_with(case)
    with mock.patch.object(requires.imports, "is_pytest_available", return_value=False):
        assert testing.run_first(case) is case


def test_execute_subprocess_async_keeps_output_and_raises() -> None:
    import sys

    import pytest

    out = testing.execute_subprocess_async(
        [sys.executable, "-c", "import sys; print('hi'); print('oops', file=sys.stderr)"],
        quiet=True,
        echo=False,
    )
    assert out.returncode == 0 and out.stdout == ["hi"] and out.stderr == ["oops"]
    with pytest.raises(RuntimeError, match="returncode 3"):
        testing.execute_subprocess_async(
            [sys.executable, "-c", "raise SystemExit(3)"], quiet=True, echo=False
        )


def test_run_command_returns_text_or_raises() -> None:
    import sys

    import pytest

    assert testing.run_command([sys.executable, "-c", "print(7)"], return_stdout=True) == "7\n"
    with pytest.raises(testing.SubprocessCallException, match="boom"):
        testing.run_command([sys.executable, "-c", "raise SystemExit('boom')"])


def test_path_in_accelerate_package_points_into_overdrive() -> None:
    path = testing.path_in_accelerate_package("test_utils", "testing.py")
    assert path.is_file() and path.parent.parent.name == "overdrive"


def test_clear_environment_restores_previous() -> None:
    from overdrive.utils import clear_environment

    with mock.patch.dict(os.environ, {"OVERDRIVE_NAMES_KEEP": "bar"}):
        with clear_environment():
            assert "OVERDRIVE_NAMES_KEEP" not in os.environ and len(os.environ) == 0
            os.environ["OVERDRIVE_NAMES_KEEP"] = "new"
            os.environ["OVERDRIVE_NAMES_ADDED"] = "1"
        assert os.environ["OVERDRIVE_NAMES_KEEP"] == "bar"
        assert "OVERDRIVE_NAMES_ADDED" not in os.environ


def test_convert_dict_to_env_variables_drops_unsafe() -> None:
    from overdrive.utils import convert_dict_to_env_variables

    env = {"A": "1", "BAD": "<x", "SPACE": "a b", "EMPTY": "", "B": "2"}
    assert convert_dict_to_env_variables(env) == ["A=1\n", "B=2\n"]


def test_new_import_checks_answer_false_when_missing() -> None:
    from overdrive.utils import imports

    with mock.patch.object(imports, "_installed", return_value=False):
        assert not imports.is_aim_available()
        assert not imports.is_comet_ml_available()
        assert not imports.is_dvclive_available()


def test_require_datasets_and_torchdata_follow_installation() -> None:
    from overdrive.test_utils import requires

    with (
        mock.patch.object(requires.imports, "is_datasets_available", return_value=False),
        mock.patch.object(
            requires.imports, "is_torchdata_stateful_dataloader_available", return_value=True
        ),
    ):
        skipped = testing.require_datasets(lambda: None)
        kept = testing.require_torchdata_stateful_dataloader(lambda: None)
    assert getattr(skipped, "__unittest_skip__", False)
    assert not getattr(kept, "__unittest_skip__", False)


def test_skip_batch_sampler_skips_and_counts() -> None:
    from torch.utils.data import BatchSampler, SequentialSampler

    from overdrive.data_loader import SkipBatchSampler

    inner = BatchSampler(SequentialSampler(range(10)), batch_size=3, drop_last=False)
    sampler = SkipBatchSampler(inner, skip_batches=2)
    assert list(sampler) == [[6, 7, 8], [9]]
    assert len(sampler) == 2 and sampler.total_length == 4
    assert isinstance(sampler, BatchSampler)
