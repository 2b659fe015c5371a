"""The device the tests run on, and the markers that skip a test by hardware.

Accelerators overdrive does not target (TPU, XPU, NPU, MLU, SDAA, MUSA, HPU, Neuron) are
asked about through ``overdrive.utils.imports`` like any other: those checks answer False
on every machine overdrive runs on, so their markers always skip here.
"""

from __future__ import annotations

import unittest
from collections.abc import Callable
from typing import Any

import torch

from overdrive.test_utils import probes
from overdrive.utils import imports


def _no_memory() -> int:
    return 0


def _torch_backend(name: str) -> Any:
    """``torch.<name>`` (``torch.npu``, ``torch.mlu``...), which its plugin package adds."""
    return getattr(torch, name)


def get_backend() -> tuple[str, int, Callable[[], int]]:
    """``(device type, device count, allocated-memory probe)`` for the first available
    backend, in Hugging Face Accelerate's order: XLA, CUDA, MPS, MLU, SDAA, MUSA, NPU, XPU,
    HPU, Neuron, then the CPU (``("cpu", 1, <probe returning 0>)``)."""
    if imports.is_torch_xla_available():
        return "xla", torch.cuda.device_count(), torch.cuda.memory_allocated
    if imports.is_cuda_available():
        return "cuda", torch.cuda.device_count(), torch.cuda.memory_allocated
    if probes.is_mps_available(min_version="2.0"):
        return "mps", 1, torch.mps.current_allocated_memory
    if probes.is_mps_available():
        return "mps", 1, _no_memory
    for name in ("mlu", "sdaa", "musa", "npu", "xpu", "hpu", "neuron"):
        if getattr(imports, f"is_{name}_available")():
            backend = _torch_backend(name)
            return name, backend.device_count(), backend.memory_allocated
    return "cpu", 1, _no_memory


torch_device, device_count, memory_allocated_func = get_backend()


def _count(name: str) -> int:
    """How many ``torch.<name>`` devices there are (0 when torch has no such backend)."""
    backend = getattr(torch, name, None)
    return int(backend.device_count()) if backend is not None else 0


def _cuda_without_xla() -> bool:
    return imports.is_cuda_available() and not imports.is_torch_xla_available()


def require_cpu(test_case: Any) -> Any:
    """Skip when the tests run on an accelerator: the test is for the CPU only."""
    return unittest.skipUnless(torch_device == "cpu", "test requires only a CPU")(test_case)


def require_non_cpu(test_case: Any) -> Any:
    """Skip unless the tests run on a hardware accelerator."""
    return unittest.skipUnless(torch_device != "cpu", "test requires a GPU")(test_case)


def require_cuda(test_case: Any) -> Any:
    """Skip unless CUDA is available (and TorchXLA is not)."""
    return unittest.skipUnless(_cuda_without_xla(), "test requires a GPU")(test_case)


def require_cuda_or_hpu(test_case: Any) -> Any:
    """Skip unless CUDA (without TorchXLA) or an HPU is available."""
    ok = _cuda_without_xla() or imports.is_hpu_available()
    return unittest.skipUnless(ok, "test requires a GPU or HPU")(test_case)


def require_cuda_or_xpu(test_case: Any) -> Any:
    """Skip unless CUDA (without TorchXLA) or an XPU is available."""
    ok = _cuda_without_xla() or imports.is_xpu_available()
    return unittest.skipUnless(ok, "test requires a CUDA GPU or XPU")(test_case)


def require_xpu(test_case: Any) -> Any:
    """Skip unless an Intel XPU is available."""
    return unittest.skipUnless(imports.is_xpu_available(), "test requires a XPU")(test_case)


def require_non_xpu(test_case: Any) -> Any:
    """Skip when the tests run on an XPU."""
    return unittest.skipUnless(torch_device != "xpu", "test requires a non-XPU")(test_case)


def require_non_hpu(test_case: Any) -> Any:
    """Skip when the tests run on an HPU."""
    return unittest.skipUnless(torch_device != "hpu", "test requires a non-HPU")(test_case)


def require_mlu(test_case: Any) -> Any:
    """Skip unless a Cambricon MLU is available."""
    return unittest.skipUnless(imports.is_mlu_available(), "test require a MLU")(test_case)


def require_sdaa(test_case: Any) -> Any:
    """Skip unless an SDAA device is available."""
    return unittest.skipUnless(imports.is_sdaa_available(), "test require a SDAA")(test_case)


def require_musa(test_case: Any) -> Any:
    """Skip unless a Moore Threads MUSA device is available."""
    return unittest.skipUnless(imports.is_musa_available(), "test require a MUSA")(test_case)


def require_npu(test_case: Any) -> Any:
    """Skip unless an Ascend NPU is available."""
    return unittest.skipUnless(imports.is_npu_available(), "test require a NPU")(test_case)


def require_neuron(test_case: Any) -> Any:
    """Skip unless AWS Neuron cores are available."""
    ok = imports.is_neuron_available()
    return unittest.skipUnless(ok, "test require Neuron Cores")(test_case)


def require_mps(test_case: Any) -> Any:
    """Skip unless torch can use Apple's MPS backend."""
    reason = "test requires a `mps` backend support in `torch`"
    return unittest.skipUnless(probes.is_mps_available(), reason)(test_case)


def require_tpu(test_case: Any) -> Any:
    """Skip unless TorchXLA reports a TPU."""
    ok = imports.is_torch_xla_available(check_is_tpu=True)
    return unittest.skipUnless(ok, "test requires TPU")(test_case)


def require_non_torch_xla(test_case: Any) -> Any:
    """Skip when TorchXLA is available."""
    ok = not imports.is_torch_xla_available()
    return unittest.skipUnless(ok, "test requires an env without TorchXLA")(test_case)


def require_single_device(test_case: Any) -> Any:
    """Skip unless the tests run on exactly one hardware accelerator."""
    ok = torch_device != "cpu" and device_count == 1
    return unittest.skipUnless(ok, "test requires a single device accelerator")(test_case)


def require_single_gpu(test_case: Any) -> Any:
    """Skip unless exactly one CUDA GPU is visible."""
    return unittest.skipUnless(_count("cuda") == 1, "test requires a GPU")(test_case)


def require_single_xpu(test_case: Any) -> Any:
    """Skip unless exactly one XPU is visible."""
    return unittest.skipUnless(_count("xpu") == 1, "test requires a XPU")(test_case)


def require_multi_device(test_case: Any) -> Any:
    """Skip unless the tests' backend has more than one device."""
    reason = "test requires multiple hardware accelerators"
    return unittest.skipUnless(device_count > 1, reason)(test_case)


def require_multi_gpu(test_case: Any) -> Any:
    """Skip unless more than one CUDA GPU is visible."""
    return unittest.skipUnless(_count("cuda") > 1, "test requires multiple GPUs")(test_case)


def require_multi_xpu(test_case: Any) -> Any:
    """Skip unless more than one XPU is visible."""
    return unittest.skipUnless(_count("xpu") > 1, "test requires multiple XPUs")(test_case)


def require_multi_gpu_or_xpu(test_case: Any) -> Any:
    """Skip unless CUDA or an XPU is available and the backend has more than one device."""
    ok = (imports.is_cuda_available() or imports.is_xpu_available()) and device_count > 1
    return unittest.skipUnless(ok, "test requires multiple GPUs or XPUs")(test_case)


def require_fp16(test_case: Any) -> Any:
    """Skip unless fp16 mixed precision can run here."""
    ok = imports.is_fp16_available()
    return unittest.skipUnless(ok, "test requires FP16 support")(test_case)


def require_fp8(test_case: Any) -> Any:
    """Skip unless fp8 training can run here: its library is installed and, where a CUDA GPU
    is present, the GPU has the compute capability float8 needs (not a Gaudi 1 either)."""
    ok = imports.is_fp8_available()
    if torch.cuda.is_available() and not probes.cuda_supports_fp8():
        ok = False
    if imports.is_hpu_available() and probes.is_habana_gaudi1():
        ok = False
    return unittest.skipUnless(ok, "test requires FP8 support")(test_case)
