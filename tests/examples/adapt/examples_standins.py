"""Tiny, download-free stand-ins for what Hugging Face Accelerate's examples fetch from the Hub.

The examples ask for ``bert-base-cased`` (or a causal LM), GLUE MRPC (or wikitext) and the
GLUE metric. Here a tokenizer is built from a generated word list, a model from a small
config (its weights drawn from torch's global generator, so the examples' ``set_seed``
decides them as it would a classifier head), and the data from a fixed-seed generator: the
same for every process and both engines. Every model built is recorded, and its weights are
written at exit (with its initial ones) to ``$EXAMPLES_OUT/weights-rank{RANK}.pt`` for the
runner to compare.
"""

from __future__ import annotations

import atexit
import os
import random
from typing import Any

WORDS = [f"w{i}" for i in range(60)]
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
EOS = "</s>"
TRAIN_ROWS = 64
VALIDATION_ROWS = 40
TEXT_ROWS = 500  # gradient_accumulation_for_autoregressive_models selects its first 500
MAX_LENGTH = 32

_models: list[tuple[Any, dict[str, Any]]] = []


def _sentence(rng: random.Random, low: int = 3, high: int = 9) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def mrpc_columns(rows: int, seed: int) -> dict[str, list[Any]]:
    """Generated sentence pairs shaped like GLUE MRPC (label 1 when the pair shares a word)."""
    rng = random.Random(seed)
    first = [_sentence(rng) for _ in range(rows)]
    second = [_sentence(rng) for _ in range(rows)]
    labels = [int(bool(set(a.split()) & set(b.split()))) for a, b in zip(first, second)]
    return {"sentence1": first, "sentence2": second, "label": labels, "idx": list(range(rows))}


def text_columns(rows: int, seed: int) -> dict[str, list[Any]]:
    """Generated lines shaped like wikitext (some empty, as there)."""
    rng = random.Random(seed)
    return {"text": ["" if i % 5 == 4 else _sentence(rng, 4, 16) for i in range(rows)]}


def tokenizer(name: str, **_: Any) -> Any:
    """A word-level tokenizer over ``WORDS``: BERT-style for classifiers, with an end of
    sequence token (and no padding token, as a causal LM's) for anything else."""
    from transformers import BertTokenizer, PreTrainedTokenizerFast

    if "bert" in name.lower():
        vocab = {w: i for i, w in enumerate(SPECIAL + WORDS)}
        return BertTokenizer(vocab=vocab, model_max_length=MAX_LENGTH)
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {w: i for i, w in enumerate(["[UNK]", EOS, *WORDS])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", eos_token=EOS, model_max_length=MAX_LENGTH
    )


def classifier_config(num_labels: int = 2) -> Any:
    """A two-layer BERT small enough to train in a second on a CPU."""
    from transformers import BertConfig

    return BertConfig(
        vocab_size=len(SPECIAL) + len(WORDS),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        num_labels=num_labels,
    )


def causal_config() -> Any:
    """A two-layer GPT-2 over the causal tokenizer's vocabulary."""
    from transformers import GPT2Config

    return GPT2Config(
        vocab_size=len(WORDS) + 2,
        n_positions=64,
        n_embd=32,
        n_layer=2,
        n_head=2,
        bos_token_id=1,
        eos_token_id=1,
    )


def record(model: Any) -> Any:
    """Remember ``model`` and its initial weights; both are saved at exit."""
    _models.append((model, {k: _local(v) for k, v in model.state_dict().items()}))
    return model


def classifier(name: str, *_: Any, num_labels: int = 2, **__: Any) -> Any:
    from transformers import BertForSequenceClassification

    return record(BertForSequenceClassification(classifier_config(num_labels)))


def causal_lm(name: str, *_: Any, config: Any = None, **__: Any) -> Any:
    from transformers import GPT2LMHeadModel

    return record(GPT2LMHeadModel(config if config is not None else causal_config()))


def config(name: str, *_: Any, **__: Any) -> Any:
    return classifier_config() if "bert" in name.lower() else causal_config()


def patch_transformers(transformers: Any) -> None:
    """Point the Auto classes' ``from_pretrained`` (and ``from_config``) at the stand-ins."""
    transformers.AutoTokenizer.from_pretrained = staticmethod(tokenizer)
    transformers.AutoConfig.from_pretrained = staticmethod(config)
    transformers.AutoModelForSequenceClassification.from_pretrained = staticmethod(classifier)
    transformers.AutoModelForCausalLM.from_pretrained = staticmethod(causal_lm)
    from_config = staticmethod(lambda config, *a, **k: causal_lm("", config=config))
    transformers.AutoModelForCausalLM.from_config = from_config
    if not hasattr(transformers.utils, "send_example_telemetry"):  # gone in transformers 5
        transformers.utils.send_example_telemetry = lambda *args, **kwargs: None


def _local(tensor: Any) -> Any:
    """This rank's part of ``tensor`` (a sharded DTensor's local shard), copied to the CPU."""
    if hasattr(tensor, "to_local"):
        tensor = tensor.to_local()
    return tensor.detach().to("cpu", copy=True)


def _save_weights() -> None:
    """Every recorded model's weights, on CPU, to this rank's file under ``$EXAMPLES_OUT``."""
    out = os.environ.get("EXAMPLES_OUT")
    if not out or not _models:
        return
    import torch

    states = [
        {"initial": initial, "final": {k: _local(v) for k, v in m.state_dict().items()}}
        for m, initial in _models
    ]
    rank = os.environ.get("RANK", "0")
    os.makedirs(out, exist_ok=True)
    torch.save(states, os.path.join(out, f"weights-rank{rank}.pt"))


atexit.register(_save_weights)
