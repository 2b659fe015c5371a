"""Small MRPC dataloaders Hugging Face Accelerate's examples train on under
``TESTING_MOCKED_DATALOADERS`` (``mocked_dataloaders*`` in ``test_utils.training``).

They read the sentence-pair CSV samples at ``tests/test_samples/MRPC/`` relative to the
working directory (a checkout of the examples' repository) and tokenize them with a
tokenizer from the Hub, as Hugging Face Accelerate's do. ``datasets`` and ``transformers``
are imported only when a loader is built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import DataLoader

from overdrive.config.types import DistributedType

MRPC_FILES = {
    "train": "tests/test_samples/MRPC/train.csv",
    "validation": "tests/test_samples/MRPC/dev.csv",
}
CLASSIFIER_TOKENIZER = "bert-base-cased"
CAUSAL_LM_TOKENIZER = "HuggingFaceTB/SmolLM-360M"
# Padding length on XLA, where every batch should have one shape.
XLA_LENGTH = 128
IGNORE_INDEX = -100
_COLUMNS = ["sentence1", "sentence2", "label"]


def _hugging_face_suite(caller: str) -> tuple[Callable[..., Any], Any]:
    """``datasets.load_dataset`` and ``transformers.AutoTokenizer``, or an ImportError that
    names the package to install."""
    try:
        from datasets import load_dataset
    except ImportError as exc:
        raise ImportError(
            f"{caller} needs the `datasets` package, which is not installed: pip install datasets"
        ) from exc
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise ImportError(
            f"{caller} needs the `transformers` package, which is not installed: "
            "pip install transformers"
        ) from exc
    return load_dataset, AutoTokenizer


def _on_xla(accelerator: Any) -> bool:
    return bool(accelerator.distributed_type == DistributedType.XLA)


def pair_classification_collate(tokenizer: Any, accelerator: Any) -> Callable[[list[Any]], Any]:
    """Pad a batch of tokenized pairs to its longest member (to 128 on XLA) as tensors."""

    def collate(examples: list[Any]) -> Any:
        if _on_xla(accelerator):
            return tokenizer.pad(
                examples, padding="max_length", max_length=XLA_LENGTH, return_tensors="pt"
            )
        return tokenizer.pad(examples, padding="longest", return_tensors="pt")

    return collate


def next_token_collate(tokenizer: Any, accelerator: Any) -> Callable[[list[Any]], Any]:
    """Pad a batch to one past its longest member (128 on XLA; rounded up to a multiple of 16
    under fp8, of 8 under other mixed precision), then split it into inputs and next-token
    labels: ``labels`` is ``input_ids`` shifted left by one with padding set to -100."""

    def collate(examples: list[Any]) -> Any:
        longest = XLA_LENGTH if _on_xla(accelerator) else max(len(e["input_ids"]) for e in examples)
        if accelerator.mixed_precision == "fp8":
            multiple: int | None = 16
        elif accelerator.mixed_precision != "no":
            multiple = 8
        else:
            multiple = None
        batch = tokenizer.pad(
            examples,
            padding="max_length",
            max_length=longest + 1,
            pad_to_multiple_of=multiple,
            return_tensors="pt",
        )
        ids = batch["input_ids"]
        batch["input_ids"] = ids[:, :-1]
        labels = ids[:, 1:]
        batch["labels"] = torch.where(labels == tokenizer.pad_token_id, IGNORE_INDEX, labels)
        if "attention_mask" in batch:
            batch["attention_mask"] = batch["attention_mask"][:, :-1]
        return batch

    return collate


def mocked_dataloaders(accelerator: Any, batch_size: int = 16) -> tuple[DataLoader, DataLoader]:
    """MRPC sentence pairs tokenized for ``bert-base-cased`` with integer ``labels``: a
    shuffled training loader of batches of 2 and an evaluation loader of batches of 1.
    ``batch_size`` is accepted and, as in Hugging Face Accelerate, not used: the mock keeps
    its batches small."""
    load_dataset, auto_tokenizer = _hugging_face_suite("mocked_dataloaders")
    tokenizer = auto_tokenizer.from_pretrained(CLASSIFIER_TOKENIZER)
    raw = load_dataset("csv", data_files=MRPC_FILES)
    label_ids = {label: index for index, label in enumerate(raw["train"].unique("label"))}

    def tokenize(examples: dict[str, list[Any]]) -> Any:
        encoded = tokenizer(
            examples["sentence1"],
            examples["sentence2"],
            truncation=True,
            max_length=None,
            padding="max_length",
        )
        if "label" in examples:
            encoded["labels"] = [label_ids[label] for label in examples["label"]]
        return encoded

    tokenized = raw.map(tokenize, batched=True, remove_columns=_COLUMNS)
    collate = pair_classification_collate(tokenizer, accelerator)
    train = DataLoader(tokenized["train"], shuffle=True, collate_fn=collate, batch_size=2)
    evaluation = DataLoader(
        tokenized["validation"], shuffle=False, collate_fn=collate, batch_size=1
    )
    return train, evaluation


def mocked_dataloaders_for_autoregressive_models(
    accelerator: Any, batch_size: int = 16
) -> tuple[DataLoader, DataLoader]:
    """MRPC first sentences tokenized for ``HuggingFaceTB/SmolLM-360M`` (its end-of-sequence
    token as padding) for next-token training: unshuffled loaders of batches of 2 (training)
    and 1 (evaluation) whose batches hold ``input_ids`` and shifted ``labels``. The main
    process tokenizes first. ``batch_size`` is accepted and, as in Hugging Face Accelerate,
    not used."""
    load_dataset, auto_tokenizer = _hugging_face_suite(
        "mocked_dataloaders_for_autoregressive_models"
    )
    tokenizer = auto_tokenizer.from_pretrained(CAUSAL_LM_TOKENIZER)
    tokenizer.pad_token = tokenizer.eos_token
    raw = load_dataset("csv", data_files=MRPC_FILES)

    def tokenize(examples: dict[str, list[Any]]) -> Any:
        return tokenizer(
            examples["sentence1"], truncation=True, max_length=None, return_attention_mask=False
        )

    with accelerator.main_process_first():
        tokenized = raw.map(tokenize, batched=True, remove_columns=_COLUMNS)
    collate = next_token_collate(tokenizer, accelerator)
    train = DataLoader(tokenized["train"], shuffle=False, collate_fn=collate, batch_size=2)
    evaluation = DataLoader(
        tokenized["validation"], shuffle=False, collate_fn=collate, batch_size=1
    )
    return train, evaluation
