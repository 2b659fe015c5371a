"""``overdrive.test_utils``: the markers skip exactly when Hugging Face Accelerate's do, the
backend and port helpers answer like its, the examples comparison finds what a complete
example lacks, and the mocked MRPC loaders build the batches its examples train on."""

from __future__ import annotations

import contextlib
import inspect
import sys
import types
import unittest
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch

from overdrive.config.types import DistributedType
from overdrive.test_utils import devices, examples, mocked, probes, testing, training
from overdrive.utils import imports


def _skipped(marker: Callable[[Any], Any]) -> bool:
    def case() -> None:
        pass

    return bool(getattr(marker(case), "__unittest_skip__", False))


def _reason(marker: Callable[[Any], Any]) -> str:
    return str(getattr(marker(lambda: None), "__unittest_skip_why__", ""))


def test_every_marker_takes_test_case_first() -> None:
    markers = [n for n in testing.__all__ if n.startswith("require_") or n in ("skip", "slow")]
    assert len(markers) > 50
    for name in [*markers, "run_first"]:
        first = next(iter(inspect.signature(getattr(testing, name)).parameters))
        assert first == "test_case", name


# marker, the availability check it asks, its skip reason
DEVICE_MARKERS = [
    ("require_npu", "is_npu_available", "test require a NPU"),
    ("require_mlu", "is_mlu_available", "test require a MLU"),
    ("require_sdaa", "is_sdaa_available", "test require a SDAA"),
    ("require_musa", "is_musa_available", "test require a MUSA"),
    ("require_neuron", "is_neuron_available", "test require Neuron Cores"),
    ("require_xpu", "is_xpu_available", "test requires a XPU"),
    ("require_tpu", "is_torch_xla_available", "test requires TPU"),
]


@pytest.mark.parametrize(("name", "check", "reason"), DEVICE_MARKERS)
def test_untargeted_hardware_markers_ask_their_check(name: str, check: str, reason: str) -> None:
    marker = getattr(testing, name)
    assert _skipped(marker) and _reason(marker) == reason  # never such a device here
    with mock.patch.object(imports, check, return_value=True) as probe:
        assert not _skipped(marker)
    probe.assert_called_once()


def test_marked_test_case_class_is_skipped_when_run() -> None:
    @testing.require_npu
    class Case(unittest.TestCase):
        def test_it(self) -> None:
            raise AssertionError("ran without an NPU")

    result = unittest.TestResult()
    Case("test_it").run(result)
    assert result.skipped and result.skipped[0][1] == "test require a NPU"
    assert result.wasSuccessful()


def test_cuda_markers_need_cuda_and_no_xla() -> None:
    with mock.patch.object(imports, "is_cuda_available", return_value=True):
        assert not _skipped(testing.require_cuda)
        assert not _skipped(testing.require_cuda_or_xpu)
        assert not _skipped(testing.require_cuda_or_hpu)
        with mock.patch.object(imports, "is_torch_xla_available", return_value=True):
            assert _skipped(testing.require_cuda)
    with mock.patch.object(imports, "is_cuda_available", return_value=False):
        assert _skipped(testing.require_cuda) and _skipped(testing.require_cuda_or_hpu)
        with mock.patch.object(imports, "is_hpu_available", return_value=True):
            assert not _skipped(testing.require_cuda_or_hpu)
        with mock.patch.object(imports, "is_xpu_available", return_value=True):
            assert not _skipped(testing.require_cuda_or_xpu)


@pytest.mark.parametrize(
    ("device", "count", "skipping"),
    [
        ("cpu", 1, {"require_non_cpu", "require_single_device", "require_multi_device"}),
        ("cuda", 1, {"require_cpu", "require_multi_device"}),
        ("cuda", 4, {"require_cpu", "require_single_device"}),
        ("xpu", 1, {"require_cpu", "require_non_xpu", "require_multi_device"}),
        ("hpu", 2, {"require_cpu", "require_non_hpu", "require_single_device"}),
    ],
)
def test_backend_markers_follow_the_tests_device(
    device: str, count: int, skipping: set[str]
) -> None:
    names = [
        "require_cpu",
        "require_non_cpu",
        "require_single_device",
        "require_multi_device",
        "require_non_xpu",
        "require_non_hpu",
    ]
    with (
        mock.patch.object(devices, "torch_device", device),
        mock.patch.object(devices, "device_count", count),
    ):
        assert {n for n in names if _skipped(getattr(testing, n))} == skipping


@pytest.mark.parametrize(
    ("gpus", "single", "multi"), [(0, True, True), (1, False, True), (2, True, False)]
)
def test_gpu_count_markers(gpus: int, single: bool, multi: bool) -> None:
    with mock.patch.object(torch.cuda, "device_count", return_value=gpus):
        assert _skipped(testing.require_single_gpu) is single
        assert _skipped(testing.require_multi_gpu) is multi


def test_multi_gpu_or_xpu_needs_the_device_and_several() -> None:
    with mock.patch.object(devices, "device_count", 2):
        with mock.patch.object(imports, "is_cuda_available", return_value=True):
            assert not _skipped(testing.require_multi_gpu_or_xpu)
        with mock.patch.object(imports, "is_cuda_available", return_value=False):
            assert _skipped(testing.require_multi_gpu_or_xpu)


def test_get_backend_here_and_with_a_plugin_device(monkeypatch: pytest.MonkeyPatch) -> None:
    name, count, probe = testing.get_backend()
    if not torch.cuda.is_available():
        assert (name, count, probe()) == ("cpu", 1, 0)
        assert (testing.torch_device, testing.device_count) == ("cpu", 1)
    fake_npu = types.SimpleNamespace(device_count=lambda: 3, memory_allocated=lambda: 7)
    monkeypatch.setattr(torch, "npu", fake_npu, raising=False)
    monkeypatch.setattr(imports, "is_cuda_available", lambda: False)
    monkeypatch.setattr(probes, "is_mps_available", lambda min_version="1.12": False)
    monkeypatch.setattr(imports, "is_npu_available", lambda: True)
    name, count, probe = testing.get_backend()
    assert (name, count, probe()) == ("npu", 3, 7)
    monkeypatch.setattr(imports, "is_cuda_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 5)
    assert testing.get_backend()[:2] == ("cuda", 5)


def test_fp8_marker_checks_library_and_gpu_capability() -> None:
    with mock.patch.object(imports, "is_fp8_available", return_value=True):
        with mock.patch.object(torch.cuda, "is_available", return_value=False):
            assert not _skipped(testing.require_fp8)
        with mock.patch.object(torch.cuda, "is_available", return_value=True):
            with mock.patch.object(torch.cuda, "get_device_capability", return_value=(8, 0)):
                assert _skipped(testing.require_fp8)
            with mock.patch.object(torch.cuda, "get_device_capability", return_value=(9, 0)):
                assert not _skipped(testing.require_fp8)
    with mock.patch.object(imports, "is_fp8_available", return_value=False):
        assert _skipped(testing.require_fp8)


@pytest.mark.parametrize(
    ("name", "check"),
    [
        ("require_peft", "is_peft_available"),
        ("require_torchvision", "is_torchvision_available"),
        ("require_import_timer", "is_import_timer_available"),
        ("require_transformer_engine_mxfp8", "is_transformer_engine_mxfp8_available"),
        ("require_pippy", "is_pippy_available"),
    ],
)
def test_local_probe_markers_follow_their_probe(name: str, check: str) -> None:
    marker = getattr(testing, name)
    with mock.patch.object(probes, check, return_value=False):
        assert _skipped(marker)
    with mock.patch.object(probes, check, return_value=True):
        assert not _skipped(marker)


def test_probes_answer_for_this_machine() -> None:
    assert probes.is_peft_available() is (probes._installed("peft"))
    assert probes.is_pippy_available()  # torch >= 2.4 in this project
    assert not probes.is_habana_gaudi1()
    with mock.patch.object(probes, "_installed", return_value=False):
        assert not probes.is_transformer_engine_mxfp8_available()
        assert not probes.is_import_timer_available()


@pytest.mark.parametrize(
    ("name", "check"),
    [
        ("require_deepspeed", "is_deepspeed_available"),
        ("require_torchao", "is_torchao_available"),
        ("require_schedulefree", "is_schedulefree_available"),
        ("require_bnb", "is_bnb_available"),
        ("require_tensorboard", "is_tensorboard_available"),
    ],
)
def test_library_markers_follow_installation(name: str, check: str) -> None:
    marker = getattr(testing, name)
    with mock.patch.object(imports, check, return_value=False):
        assert _skipped(marker)
    with mock.patch.object(imports, check, return_value=True):
        assert not _skipped(marker)


@pytest.mark.parametrize(
    ("installed", "skipped"),
    [
        (set(), True),
        ({"wandb"}, False),
        ({"swanlab"}, False),
        ({"tensorboard", "comet_ml"}, True),  # comet_ml present: skipped
        ({"comet_ml"}, True),
    ],
)
def test_require_trackers(installed: set[str], skipped: bool) -> None:
    checks = ["wandb", "tensorboard", "trackio", "swanlab", "comet_ml"]
    with contextlib.ExitStack() as stack:
        for lib in checks:
            stack.enter_context(
                mock.patch.object(imports, f"is_{lib}_available", return_value=lib in installed)
            )
        assert _skipped(testing.require_trackers) is skipped


def test_version_markers() -> None:
    assert not _skipped(testing.require_fsdp2)  # torch >= 2.5 in this project
    with mock.patch("overdrive.utils.versions.is_torch_version", return_value=False):
        assert _skipped(testing.require_fsdp2)
        assert _skipped(testing.require_tp)
    with mock.patch.object(imports, "is_transformers_available", return_value=False):
        assert _skipped(testing.require_tp)  # skips rather than raising
    with (
        mock.patch("overdrive.utils.versions.compare_versions", return_value=True),
        mock.patch.object(imports, "is_transformers_available", return_value=True),
    ):
        assert not _skipped(testing.require_tp)
    with mock.patch("overdrive.utils.versions.is_torch_version", return_value=False):
        assert _reason(testing.require_tp) == (
            "test requires torch version >= 2.3.0 and transformers version >= 4.52.0"
        )


def test_parse_flag_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OVERDRIVE_FLAG_PROBE", raising=False)
    assert testing.parse_flag_from_env("OVERDRIVE_FLAG_PROBE") is False
    assert testing.parse_flag_from_env("OVERDRIVE_FLAG_PROBE", default=True) is True
    for value, expected in [("YES", True), ("on", True), ("1", True), ("f", False), ("Off", False)]:
        monkeypatch.setenv("OVERDRIVE_FLAG_PROBE", value)
        assert testing.parse_flag_from_env("OVERDRIVE_FLAG_PROBE") is expected
    monkeypatch.setenv("OVERDRIVE_FLAG_PROBE", "maybe")
    with pytest.raises(ValueError, match="If set, OVERDRIVE_FLAG_PROBE must be yes or no."):
        testing.parse_flag_from_env("OVERDRIVE_FLAG_PROBE")


def test_slow_runs_only_under_run_slow_and_skip_always_skips(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RUN_SLOW", raising=False)
    assert _skipped(testing.slow) and _reason(testing.slow) == "test is slow"
    monkeypatch.setenv("RUN_SLOW", "yes")
    assert not _skipped(testing.slow)
    assert _skipped(testing.skip) and _reason(testing.skip) == "Test was skipped"


def test_xdist_worker_and_unique_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert testing.pytest_xdist_worker_id() == 0
    assert testing.get_torch_dist_unique_port() == 29500
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw12")
    assert testing.pytest_xdist_worker_id() == 12
    assert testing.get_torch_dist_unique_port() == 29512


def test_package_reexports_accelerates_names() -> None:
    import overdrive.test_utils as package

    for name in (
        "get_torch_dist_unique_port",
        "pytest_xdist_worker_id",
        "require_npu",
        "require_torchao",
    ):
        assert getattr(package, name) is getattr(testing, name)


# ---- examples: a complete example checked against a feature script ----

TEMPLATE = """\
def training_function(config, args):
    accelerator = Accelerator()
    # the template's comment
    train_dataloader, eval_dataloader = get_dataloaders(accelerator, batch_size)
    model.train()

def main():
    parser = argparse.ArgumentParser()
    args = parser.parse_args()

if __name__ == "__main__":
    main()
"""

FEATURE = """\
def training_function(config, args):
    accelerator = Accelerator()
    if os.environ.get("TESTING_MOCKED_DATALOADERS", None) == "1":
        config["num_epochs"] = 2
    tracker.start()
    train_dataloader, eval_dataloader = get_dataloaders(accelerator, batch_size)
    model.train()
    tracker.log(loss)

def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--with_tracking")
    args = parser.parse_args()

if __name__ == "__main__":
    main()
"""


def _tree(tmp_path: Path, complete: str) -> tuple[Path, Path]:
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "nlp_example.py").write_text(TEMPLATE)
    feature = tmp_path / "examples" / "tracking.py"
    feature.write_text(FEATURE)
    base = tmp_path / "examples" / "complete_nlp_example.py"
    base.write_text(complete)
    return base, feature


def test_get_function_contents_by_name_and_clean_lines() -> None:
    lines = TEMPLATE.splitlines(keepends=True)
    training = examples.get_function_contents_by_name(lines, "training_function")
    assert training is not None and training[0].startswith("def training_function")
    assert training[-1] == "\n" and not any("def main" in line for line in training)
    main = examples.get_function_contents_by_name(lines, "main")
    assert main == lines[6:10]
    assert examples.get_function_contents_by_name(lines[:8], "main") is None  # no end marker
    with pytest.raises(ValueError, match="choose either 'main' or 'training_function'"):
        examples.get_function_contents_by_name(lines, "evaluate")
    cleaned = examples.clean_lines(training)
    assert "\n" not in cleaned and not any(line.lstrip().startswith("#") for line in cleaned)
    assert len(cleaned) == len(training) - 2


def test_compare_against_test_lists_what_the_complete_example_lacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    base, feature = _tree(tmp_path, TEMPLATE)
    # the mocked-dataloader line and the settings line after it are not features; the
    # feature's last line is never reached (Accelerate's walk stops one line short) unless
    # a skip moved it along, as the mock block does here
    assert examples.compare_against_test(base, feature, False) == [
        "    tracker.start()\n",
        "    tracker.log(loss)\n",
    ]
    assert examples.compare_against_test(base, feature, True) == [
        '    parser.add_argument("--with_tracking")\n'
    ]


def test_compare_against_test_is_empty_when_the_example_has_every_feature(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    base, feature = _tree(tmp_path, FEATURE.replace("    model.train()\n", ""))
    assert examples.compare_against_test(base, feature, False) == []
    assert examples.compare_against_test(str(base), str(feature), True) == []


def test_compare_against_test_discounts_a_secondary_templates_differences(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    base, feature = _tree(tmp_path, TEMPLATE)
    secondary = tmp_path / "examples" / "cv_example.py"
    secondary.write_text(TEMPLATE.replace("    model.train()\n", "    tracker.start()\n"))
    # tracker.start() is in the secondary template but model.train() (in nlp_example) is not:
    # lines nlp_example has and the secondary lacks are discounted
    missing = examples.compare_against_test(base, feature, False, secondary_filename=secondary)
    assert missing == ["    tracker.start()\n", "    tracker.log(loss)\n"]
    (tmp_path / "examples" / "nlp_example.py").write_text(TEMPLATE + "    tracker.log(loss)\n")
    missing = examples.compare_against_test(base, feature, False, secondary_filename=secondary)
    assert missing == ["    tracker.start()\n"]


# ---- training: the mocked MRPC dataloaders ----


def test_mocked_dataloaders_name_the_missing_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)
    accelerator = types.SimpleNamespace()
    with pytest.raises(ImportError, match="`datasets` package.*pip install datasets"):
        training.mocked_dataloaders(accelerator)
    with pytest.raises(ImportError, match="mocked_dataloaders_for_autoregressive_models needs"):
        training.mocked_dataloaders_for_autoregressive_models(accelerator, batch_size=4)


ROWS = {
    "train": [
        {"sentence1": "the cat sat", "sentence2": "a cat sat", "label": 1},
        {"sentence1": "dogs run far away", "sentence2": "the dog", "label": 0},
        {"sentence1": "a b", "sentence2": "c", "label": 1},
    ],
    "validation": [{"sentence1": "the dog sat", "sentence2": "a cat", "label": 0}],
}


class _Split:
    """Just enough of ``datasets.Dataset`` for the mocked loaders."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    def unique(self, column: str) -> list[Any]:
        return list(dict.fromkeys(row[column] for row in self.rows))

    def map(self, fn: Callable[..., Any], batched: bool, remove_columns: list[str]) -> _Split:
        assert batched
        columns = {key: [row[key] for row in self.rows] for key in self.rows[0]}
        encoded = dict(fn(columns))
        kept = [{k: v for k, v in row.items() if k not in remove_columns} for row in self.rows]
        return _Split(
            [{**row, **{k: v[i] for k, v in encoded.items()}} for i, row in enumerate(kept)]
        )

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.rows[index]


class _SplitDict(dict[str, _Split]):
    """``DatasetDict``: splits by name, ``map`` applied to each."""

    def map(self, fn: Callable[..., Any], **kwargs: Any) -> _SplitDict:
        return _SplitDict({name: split.map(fn, **kwargs) for name, split in self.items()})


def _fake_datasets(calls: list[Any]) -> types.ModuleType:
    module = types.ModuleType("datasets")

    def load_dataset(kind: str, data_files: dict[str, str]) -> _SplitDict:
        calls.append((kind, data_files))
        return _SplitDict({name: _Split(rows) for name, rows in ROWS.items()})

    module.load_dataset = load_dataset  # type: ignore[attr-defined]
    return module


def _tokenizer() -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = sorted(
        {
            w
            for rows in ROWS.values()
            for r in rows
            for w in f"{r['sentence1']} {r['sentence2']}".split()
        }
    )
    vocab = {"[PAD]": 0, "[UNK]": 1, "[EOS]": 2, **{w: i + 3 for i, w in enumerate(words)}}
    core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="[PAD]",
        unk_token="[UNK]",
        eos_token="[EOS]",
        model_max_length=12,
    )


def _accelerator(mixed_precision: str = "no", distributed_type: Any = DistributedType.NO) -> Any:
    return types.SimpleNamespace(
        distributed_type=distributed_type,
        mixed_precision=mixed_precision,
        main_process_first=contextlib.nullcontext,
    )


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    pytest.importorskip("transformers")
    import transformers

    calls: list[Any] = []
    monkeypatch.setitem(sys.modules, "datasets", _fake_datasets(calls))

    def from_pretrained(name: str) -> Any:
        calls.append(name)
        return _tokenizer()

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", from_pretrained)
    return calls


def test_mocked_dataloaders_tokenize_mrpc_pairs(hub: list[Any]) -> None:
    train, evaluation = training.mocked_dataloaders(_accelerator(), batch_size=16)
    assert hub == ["bert-base-cased", ("csv", mocked.MRPC_FILES)]
    assert (train.batch_size, evaluation.batch_size) == (2, 1)  # batch_size unused, as upstream
    assert len(train) == 2 and len(evaluation) == 1
    batch = next(iter(evaluation))
    # labels in order of first appearance in the training split: 1 -> 0, 0 -> 1
    assert batch["labels"].tolist() == [1]
    assert batch["input_ids"].shape == (1, 12)  # padded to the model's max length
    assert set(batch) == {"input_ids", "attention_mask", "labels"}


def test_mocked_autoregressive_loaders_shift_labels(hub: list[Any]) -> None:
    loaders = training.mocked_dataloaders_for_autoregressive_models(_accelerator())
    train, evaluation = loaders
    assert hub[0] == "HuggingFaceTB/SmolLM-360M"
    batch = next(iter(train))  # unshuffled: "the cat sat" (3 tokens), "dogs run far away" (4)
    assert batch["input_ids"].shape == (2, 4)
    # the mask pad() adds is cut to the inputs' length too
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]
    assert batch["labels"][0, :2].tolist() == batch["input_ids"][0, 1:3].tolist()
    assert batch["labels"][0, 2:].tolist() == [-100, -100]
    assert batch["labels"][1, 3].item() == -100 and batch["labels"][1, 2].item() != -100


@pytest.mark.parametrize(
    ("precision", "kind", "width"),
    [
        ("no", DistributedType.NO, 4),
        ("bf16", DistributedType.NO, 7),
        ("fp8", DistributedType.NO, 15),
        ("no", DistributedType.XLA, 128),
    ],
)
def test_next_token_collate_pads_for_the_precision(precision: str, kind: Any, width: int) -> None:
    pytest.importorskip("transformers")
    tokenizer = _tokenizer()
    tokenizer.pad_token = tokenizer.eos_token
    collate = mocked.next_token_collate(tokenizer, _accelerator(precision, kind))
    examples_ = [{"input_ids": [3, 4, 5]}, {"input_ids": [6, 7, 8, 9]}]
    batch = collate(examples_)
    # padded to one past the longest (5), rounded up to 8 or 16, then shifted by one
    assert batch["input_ids"].shape == (2, width) and batch["labels"].shape == (2, width)
    assert batch["labels"][1, :3].tolist() == [7, 8, 9]


def test_pair_collate_pads_to_longest_or_to_128_on_xla() -> None:
    pytest.importorskip("transformers")
    tokenizer = _tokenizer()
    rows = [
        {"input_ids": [3, 4], "attention_mask": [1, 1]},
        {"input_ids": [5], "attention_mask": [1]},
    ]
    assert mocked.pair_classification_collate(tokenizer, _accelerator())(rows)[
        "input_ids"
    ].shape == (2, 2)
    on_xla = mocked.pair_classification_collate(
        tokenizer, _accelerator(distributed_type=DistributedType.XLA)
    )
    assert on_xla(rows)["input_ids"].shape == (2, 128)
