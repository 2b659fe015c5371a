"""Behaviour Hugging Face Accelerate's users rely on (issue 20's bugs)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from overdrive.accelerator import Accelerator
from overdrive.data.rounds import global_rounds, local_shares
from overdrive.errors import ConfigError
from overdrive.logging import get_logger
from overdrive.utils.memory import find_executable_batch_size, should_reduce_batch_size


@pytest.mark.parametrize(
    "message",
    [
        "CPU out of memory. Tried to allocate 2.00 GiB",
        "CUDA out of memory. Tried to allocate 2.00 GiB",
        "DefaultCPUAllocator: can't allocate memory: you tried to allocate 10 bytes",
        "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if ...",
    ],
)
def test_out_of_memory_messages_reduce_the_batch_size(message: str) -> None:
    assert should_reduce_batch_size(RuntimeError(message))


def test_find_executable_batch_size_retries_on_cpu_oom() -> None:
    tried: list[int] = []

    @find_executable_batch_size(starting_batch_size=64)
    def train(batch_size: int) -> int:
        tried.append(batch_size)
        if batch_size > 20:
            raise RuntimeError("CPU out of memory. Tried to allocate 1.00 GiB")
        return batch_size

    assert train() == tried[-1] <= 20
    assert tried[0] == 64 and len(tried) > 1


def test_other_runtime_errors_are_not_out_of_memory() -> None:
    assert not should_reduce_batch_size(RuntimeError("shape mismatch"))


def test_logger_records_the_callers_line(caplog: pytest.LogCaptureFixture) -> None:
    logger = get_logger("overdrive.test_caller")
    with caplog.at_level(logging.INFO, logger="overdrive.test_caller"):
        logger.info("here")
        line = test_logger_records_the_callers_line.__code__.co_firstlineno + 4
        logger.warning("there", stacklevel=2)  # counts from the adapter's log, as theirs
    assert [(r.filename, r.lineno) for r in caplog.records] == [
        ("test_compat_behaviour.py", line - 1),
        ("test_compat_behaviour.py", line + 1),
    ]


def test_logger_user_stacklevel_counts_from_the_caller(caplog: pytest.LogCaptureFixture) -> None:
    logger = get_logger("overdrive.test_caller")

    def helper() -> None:
        logger.info("from helper", stacklevel=3)  # 1: the adapter, 2: helper, 3: its caller

    with caplog.at_level(logging.INFO, logger="overdrive.test_caller"):
        helper()
        line = test_logger_user_stacklevel_counts_from_the_caller.__code__.co_firstlineno + 7
    assert [(r.filename, r.lineno) for r in caplog.records] == [("test_compat_behaviour.py", line)]


def test_sync_gradients_can_be_set() -> None:
    acc = Accelerator(cpu=True)
    acc.sync_gradients = False
    assert acc.gradient_state.sync_gradients is False
    acc.sync_gradients = True
    assert acc.sync_gradients is True


def test_register_for_checkpointing_refuses_with_value_error() -> None:
    acc = Accelerator(cpu=True)
    with pytest.raises(ValueError, match=r"must include a `state_dict` and `load_state_dict`"):
        acc.register_for_checkpointing(object())


class _Words(torch.utils.data.IterableDataset[str]):
    def __iter__(self) -> Iterator[str]:
        return iter(f"text{i}" for i in range(6))


def test_strings_from_an_iterable_dataset_stay_whole() -> None:
    acc = Accelerator(cpu=True)
    loader = acc.prepare(torch.utils.data.DataLoader(_Words(), batch_size=None))
    assert list(loader) == [f"text{i}" for i in range(6)]


def test_strings_shared_between_two_ranks_stay_whole() -> None:
    shares = [
        [
            batch
            for batch, _ in local_shares(
                global_rounds(
                    _Words(), world=2, per_rank=None, split=False, even=True, drop_last=False
                ),
                rank,
                0,
            )
        ]
        for rank in (0, 1)
    ]
    assert shares == [["text0", "text2", "text4"], ["text1", "text3", "text5"]]


class _EpochBatches(torch.utils.data.Sampler[list[int]]):
    """A custom batch sampler whose batches depend on the epoch."""

    def __init__(self) -> None:
        self.epochs: list[int] = []

    def set_epoch(self, epoch: int) -> None:
        self.epochs.append(epoch)

    def __iter__(self) -> Iterator[list[int]]:
        epoch = self.epochs[-1] if self.epochs else 0
        return iter([[epoch, epoch + 1], [epoch + 2, epoch + 3]])

    def __len__(self) -> int:
        return 2


def test_set_epoch_reaches_a_custom_batch_sampler() -> None:
    acc = Accelerator(cpu=True)
    batches = _EpochBatches()
    loader = acc.prepare(torch.utils.data.DataLoader(list(range(10)), batch_sampler=batches))
    loader.set_epoch(3)
    assert batches.epochs[-1] == 3
    assert [b.tolist() for b in loader] == [[3, 4], [5, 6]]


def test_prepared_objects_are_marked_and_the_loader_is_a_dataloader() -> None:
    acc = Accelerator(cpu=True)
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1)
    loader = torch.utils.data.DataLoader(list(range(8)), batch_size=2)
    prepared = acc.prepare(model, opt, sched, loader)
    assert all(getattr(o, "_is_accelerate_prepared", False) for o in prepared)
    assert isinstance(prepared[3], torch.utils.data.DataLoader)
    assert prepared[3].gradient_state is acc.gradient_state
    assert acc.prepare(prepared[3]) is prepared[3]  # not sharded a second time
    assert [b.tolist() for b in prepared[3]] == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_accelerate_torch_device_sets_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    from overdrive import PartialState

    monkeypatch.setenv("ACCELERATE_TORCH_DEVICE", "meta")
    assert PartialState().device == torch.device("meta")
    monkeypatch.setenv("ACCELERATE_TORCH_DEVICE", "nonsense:x")
    with pytest.raises(ConfigError, match="ACCELERATE_TORCH_DEVICE"):
        PartialState()


def test_dynamo_plugin_reads_its_variables_and_reports_what_differs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from overdrive.utils import TorchDynamoPlugin

    monkeypatch.setenv("ACCELERATE_DYNAMO_BACKEND", "INDUCTOR")
    monkeypatch.setenv("ACCELERATE_DYNAMO_USE_FULLGRAPH", "true")
    plugin = TorchDynamoPlugin(mode="max-autotune")
    assert plugin.to_kwargs() == {"backend": "inductor", "mode": "max-autotune", "fullgraph": True}
    monkeypatch.delenv("ACCELERATE_DYNAMO_BACKEND")
    monkeypatch.delenv("ACCELERATE_DYNAMO_USE_FULLGRAPH")
    assert TorchDynamoPlugin().to_kwargs() == {}


def test_local_sgd_does_nothing_on_one_process_and_checks_its_steps() -> None:
    from overdrive.local_sgd import LocalSGD

    acc = Accelerator(cpu=True)
    model = acc.prepare(torch.nn.Linear(2, 2))
    before = [p.clone() for p in model.parameters()]
    with LocalSGD(acc, model, local_sgd_steps=1) as local_sgd:
        local_sgd.step()
    assert local_sgd.num_steps == 1 and not local_sgd.enabled
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    with pytest.raises(ConfigError, match="local_sgd_steps"):
        LocalSGD(acc, model, local_sgd_steps=0)


def test_megatron_dummy_scheduler_and_fsdp_state_dict_configs() -> None:
    from torch.distributed.fsdp import FullStateDictConfig, ShardedStateDictConfig

    from overdrive.utils import FullyShardedDataParallelPlugin, MegatronLMDummyScheduler

    sched = MegatronLMDummyScheduler(object(), total_num_steps=10)
    assert sched.total_num_steps == 10
    with pytest.raises(ConfigError, match="Megatron-LM"):
        sched.step()
    plugin = FullyShardedDataParallelPlugin(state_dict_config=ShardedStateDictConfig())
    assert plugin.to_settings()["fsdp_config.fsdp_state_dict_type"] == "SHARDED_STATE_DICT"
    with pytest.raises(ConfigError, match="contradicts"):
        FullyShardedDataParallelPlugin(
            state_dict_type="SHARDED_STATE_DICT", state_dict_config=FullStateDictConfig()
        )


def _inner_dtypes_under_fp16_on_a_cpu() -> tuple[list[torch.dtype], torch.dtype, Any]:
    from overdrive import Accelerator

    accelerator = Accelerator(cpu=True, mixed_precision="fp16")
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    inner: list[torch.dtype] = []
    model[0].register_forward_hook(lambda module, args, out: inner.append(out.dtype))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    return inner, model(torch.randn(2, 4)).dtype, accelerator


def test_fp16_on_a_cpu_trains_in_fp32_as_accelerate_does_and_says_so() -> None:
    import overdrive.precision as precision

    precision._WARNED.discard(("fp16_on_cpu", "fp16"))
    with pytest.warns(UserWarning, match="OVERDRIVE_FP16_ON_CPU=1"):
        inner, out, accelerator = _inner_dtypes_under_fp16_on_a_cpu()
    assert inner == [torch.float32] and out == torch.float32
    assert accelerator.mixed_precision == "fp16" and accelerator.scaler is None


def test_fp16_is_available_on_a_cpu_and_trains_there_when_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``is_fp16_available()`` says yes on a CPU, as in Hugging Face Accelerate; with the
    fp16_on_cpu setting a CPU trains with float16 autocast and loss scaling."""
    from overdrive.utils import is_fp16_available

    assert is_fp16_available()
    monkeypatch.setenv("OVERDRIVE_FP16_ON_CPU", "1")
    inner, out, accelerator = _inner_dtypes_under_fp16_on_a_cpu()
    assert inner == [torch.float16]  # computed in fp16, handed back in fp32
    assert out == torch.float32 and accelerator.scaler is not None
