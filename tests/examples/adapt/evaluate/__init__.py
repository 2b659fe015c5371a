"""A stand-in for Hugging Face ``evaluate``: ``load`` gives a metric that keeps every batch
it is given and computes accuracy and binary F1 over them."""

from __future__ import annotations

from typing import Any


class Metric:
    """Accuracy and F1 of the predictions added so far (reset by ``compute``)."""

    def __init__(self) -> None:
        self._pairs: list[tuple[int, int]] = []

    def add_batch(self, predictions: Any, references: Any) -> None:
        self._pairs += zip(_ints(predictions), _ints(references))

    def add(self, prediction: Any, reference: Any) -> None:
        self.add_batch([prediction], [reference])

    def compute(self, **_: Any) -> dict[str, float]:
        pairs, self._pairs = self._pairs, []
        hits = sum(p == r for p, r in pairs)
        true_pos = sum(p == r == 1 for p, r in pairs)
        predicted, actual = sum(p == 1 for p, _ in pairs), sum(r == 1 for _, r in pairs)
        f1 = 2 * true_pos / (predicted + actual) if predicted + actual else 0.0
        return {"accuracy": hits / len(pairs) if pairs else 0.0, "f1": f1}


def _ints(values: Any) -> list[int]:
    return [int(v) for v in (values.tolist() if hasattr(values, "tolist") else values)]


def load(path: str, config_name: str | None = None, **_: Any) -> Metric:
    return Metric()
