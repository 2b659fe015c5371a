"""Names Hugging Face Accelerate's own unit tests import, with their behaviour."""

from __future__ import annotations

import os
import unittest
from typing import Any
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
    assert cmd == ["overdrive", "launch", "--num_processes=2", "--debug"]
    assert testing.DEFAULT_LAUNCH_COMMAND[:2] == ["overdrive", "launch"]
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


def test_recursively_apply_keeps_containers_and_leaves_other_types() -> None:
    import collections

    import torch

    from overdrive.utils import recursively_apply

    Pair = collections.namedtuple("Pair", "a b")
    data = {"x": [torch.ones(2), "text"], "y": Pair(torch.zeros(1), 3)}
    out = recursively_apply(lambda t, k: t + k, data, 2)
    assert out["x"][0].tolist() == [3.0, 3.0] and out["x"][1] == "text"
    assert isinstance(out["y"], Pair) and out["y"].a.tolist() == [2.0] and out["y"].b == 3
    try:
        recursively_apply(lambda t: t, [torch.ones(1), "no"], error_on_other_type=True)
    except TypeError as exc:
        assert "<lambda>" in str(exc)
    else:
        raise AssertionError("a non-tensor leaf was accepted")


def test_listify_concatenate_and_find_device() -> None:
    import torch

    from overdrive.utils import concatenate, find_device, listify

    assert listify({"a": torch.tensor([1.5], dtype=torch.bfloat16)}) == {"a": [1.5]}
    joined = concatenate([{"a": (torch.ones(1, 2),)}, {"a": (torch.zeros(2, 2),)}])
    assert isinstance(joined["a"], tuple) and joined["a"][0].shape == (3, 2)
    assert concatenate(["only"]) == "only"
    try:
        concatenate(["a", "b"])
    except TypeError as exc:
        assert "Can only concatenate tensors" in str(exc)
    else:
        raise AssertionError("strings were concatenated")
    assert find_device([1, "a", {"t": torch.ones(1)}]) == torch.device("cpu")
    assert find_device([1, "a"]) is None


def test_purge_accelerate_environment_restores_per_test_and_in_subclasses() -> None:
    from overdrive.utils import purge_accelerate_environment

    os.environ["ACCELERATE_KEPT_PROBE"] = "before"

    @purge_accelerate_environment
    class Base(unittest.TestCase):
        def test_sets(self) -> None:
            os.environ["ACCELERATE_NEW_PROBE"] = "1"
            os.environ["ACCELERATE_KEPT_PROBE"] = "changed"

    class Child(Base):
        def test_child_sets(self) -> None:
            os.environ["OVERDRIVE_NEW_PROBE"] = "1"

    result = unittest.TestResult()
    unittest.TestSuite([Base("test_sets"), Child("test_child_sets")]).run(result)
    assert result.wasSuccessful(), result.errors
    assert "ACCELERATE_NEW_PROBE" not in os.environ and "OVERDRIVE_NEW_PROBE" not in os.environ
    assert os.environ.pop("ACCELERATE_KEPT_PROBE") == "before"

    @purge_accelerate_environment
    def sets() -> int:
        os.environ["ACCELERATE_FN_PROBE"] = "1"
        return 7

    assert sets() == 7 and "ACCELERATE_FN_PROBE" not in os.environ


def test_check_os_kernel_warns_only_for_an_old_linux_kernel(caplog: Any) -> None:
    from overdrive.utils import check_os_kernel

    for system, release, warned in [
        ("Linux", "5.4.0-35-generic", True),
        ("Linux", "5.15.0-35-generic", False),
        ("Darwin", "5.4.0", False),
    ]:
        caplog.clear()
        fake = mock.Mock(system=system, release=release)
        with mock.patch("platform.uname", return_value=fake):
            check_os_kernel()
        texts = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert bool(texts) is warned, (system, release, texts)
        if warned:
            assert "5.4.0" in texts[0] and "5.5.0" in texts[0]


def test_pad_input_tensors_reaches_the_next_multiple_of_the_processes() -> None:
    import torch

    from overdrive.utils import pad_input_tensors

    for batch, processes, expected in [(1, 2, 2), (3, 2, 4), (4, 3, 6), (7, 3, 9), (61, 6, 66)]:
        data = torch.arange(batch * 2, dtype=torch.float32).reshape(batch, 2) + 1
        out = pad_input_tensors({"x": data}, batch, processes)["x"]
        assert out.shape == (expected, 2)
        assert torch.equal(out[:batch], data) and not out[batch:].any()
    same = torch.ones(4, 1)
    assert pad_input_tensors(same, 4, 2) is same


def test_convert_outputs_to_fp32_and_undoing_it_leaves_a_picklable_model() -> None:
    import pickle

    import torch

    from overdrive.utils import convert_outputs_to_fp32, extract_model_from_parallel

    model = torch.nn.Linear(2, 2).to(torch.bfloat16)
    model._original_forward = model.forward
    model.forward = convert_outputs_to_fp32(model.forward)
    assert model(torch.ones(1, 2, dtype=torch.bfloat16)).dtype == torch.float32
    model = extract_model_from_parallel(model, keep_fp32_wrapper=False)
    assert model(torch.ones(1, 2, dtype=torch.bfloat16)).dtype == torch.bfloat16
    pickle.dumps(model)


def test_extract_model_keeps_the_compiled_wrapper_around_the_unwrapped_module() -> None:
    import torch

    from overdrive.utils import extract_model_from_parallel

    model = torch.nn.Linear(2, 2)
    compiled = torch.compile(torch.nn.DataParallel(model))
    kept = extract_model_from_parallel(compiled, keep_torch_compile=True)
    assert kept is compiled and kept._orig_mod is model
    assert extract_model_from_parallel(torch.compile(model), keep_torch_compile=False) is model


def test_save_writes_tied_weights_once_and_says_so(tmp_path: Any, caplog: Any) -> None:
    import torch
    from safetensors.torch import load_file

    from overdrive.utils import save

    linear = torch.nn.Linear(3, 3)
    state = {"a.weight": linear.weight, "b.weight": linear.weight, "a.bias": linear.bias}
    save(state, tmp_path / "m.safetensors", safe_serialization=True)
    assert sorted(load_file(tmp_path / "m.safetensors")) == ["a.bias", "a.weight"]
    assert any("Removed shared tensor" in r.getMessage() for r in caplog.records)


def test_pad_across_processes_returns_a_nested_tensor_with_a_warning() -> None:
    import warnings

    import torch

    from overdrive.utils import CannotPadNestedTensorWarning, pad_across_processes

    nested = torch.nested.nested_tensor([torch.ones(3), torch.ones(1)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert pad_across_processes(nested) is nested
    assert any(issubclass(w.category, CannotPadNestedTensorWarning) for w in caught)


def test_cpu_offload_with_hook_leaves_a_model_already_on_its_device() -> None:
    import torch

    from overdrive.big_modeling import cpu_offload_with_hook
    from overdrive.hooks import remove_hook_from_module

    moves: list[str] = []

    class Tracked(torch.nn.Linear):
        def to(self, *args: Any, **kwargs: Any) -> Any:
            moves.append(f"{self.out_features}->{args[0]}")
            return super().to(*args, **kwargs)

    first, second = Tracked(2, 2), Tracked(2, 3)
    first, hook1 = cpu_offload_with_hook(first, "cpu")
    second, _ = cpu_offload_with_hook(second, "cpu", prev_module_hook=hook1)
    assert moves == ["2->cpu", "3->cpu"]  # each goes to the CPU when hooked
    moves.clear()
    out = second(first(torch.ones(1, 2)))
    assert out.shape == (1, 3)
    assert moves == []  # both already on their execution device: nothing moves
    hook1.offload()
    assert moves == ["2->cpu"]
    hook1.remove()
    assert "_hf_hook" not in first.__dict__
    remove_hook_from_module(second)


def test_attach_align_device_hook_goes_on_modules_with_weights_and_offloads() -> None:
    import torch

    from overdrive.hooks import attach_align_device_hook, remove_hook_from_module
    from overdrive.utils import has_offloaded_params

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
    expected = model(torch.ones(1, 2))
    attach_align_device_hook(model, execution_device=torch.device("cpu"))
    assert "_hf_hook" in model[0].__dict__ and "_hf_hook" not in model[1].__dict__
    assert not has_offloaded_params(model[0])
    assert torch.equal(model(torch.ones(1, 2)), expected)
    remove_hook_from_module(model, recurse=True)
    attach_align_device_hook(model, execution_device=torch.device("cpu"), offload=True)
    assert has_offloaded_params(model[0]) and model[0].weight.device.type == "meta"
    assert torch.equal(model(torch.ones(1, 2)), expected)
    remove_hook_from_module(model, recurse=True)
    assert model[0].weight.device.type == "cpu"  # detaching puts the weights back


def test_get_model_tp_size_reads_the_model_then_its_config() -> None:
    import torch

    from overdrive.utils import get_model_tp_size

    model = torch.nn.Linear(1, 1)
    assert get_model_tp_size(model) is None
    model.tp_size = 2
    assert get_model_tp_size(model) == 2
    model.tp_size = None
    model.config = type("Config", (), {"distributed_config": {"tp_size": 4}})()
    assert get_model_tp_size(model) == 4


def test_torch_min_version_and_captured_output() -> None:
    from overdrive.test_utils import capture_call_output, require_torch_min_version

    @require_torch_min_version(version="99.0")
    def too_new() -> None:
        pass

    @require_torch_min_version(version="1.0")
    def old_enough() -> None:
        pass

    assert getattr(too_new, "__unittest_skip__", False)
    assert not getattr(old_enough, "__unittest_skip__", False)
    assert capture_call_output(print, "hello", end="!") == "hello!"
