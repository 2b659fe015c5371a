"""A stand-in for the parts of Hugging Face ``datasets`` the examples use, over generated
data (``examples_standins``): ``load_dataset`` for GLUE MRPC and wikitext, and a column
store with ``map``, ``filter``, ``select`` and ``rename_column``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import examples_standins as standins


class Dataset:
    """Rows held as columns; indexing by position gives a row, by name a column."""

    def __init__(self, columns: dict[str, list[Any]]) -> None:
        self._columns = {k: list(v) for k, v in columns.items()}

    @property
    def column_names(self) -> list[str]:
        return list(self._columns)

    @property
    def num_rows(self) -> int:
        return len(next(iter(self._columns.values()), []))

    def __len__(self) -> int:
        return self.num_rows

    def __getitem__(self, key: int | str) -> Any:
        if isinstance(key, str):
            return list(self._columns[key])
        return {name: column[key] for name, column in self._columns.items()}

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self[i] for i in range(len(self)))

    def map(
        self,
        function: Callable[..., Any],
        batched: bool = False,
        remove_columns: Iterable[str] | None = None,
        **_: Any,
    ) -> Dataset:
        """``function`` over every row (or the whole table when ``batched``), its outputs
        added as columns, ``remove_columns`` dropped."""
        if batched:
            added = dict(function(self._columns))
        else:
            rows = [dict(function(row)) for row in self]
            added = {k: [r[k] for r in rows] for k in (rows[0] if rows else {})}
        dropped = set(remove_columns or ())
        kept = {k: v for k, v in self._columns.items() if k not in dropped}
        return Dataset({**kept, **{k: list(v) for k, v in added.items()}})

    def filter(
        self, function: Callable[..., bool], input_columns: str | None = None, **_: Any
    ) -> Dataset:
        keep = [
            i
            for i, row in enumerate(self)
            if function(row[input_columns] if input_columns else row)
        ]
        return self.select(keep)

    def select(self, indices: Iterable[int]) -> Dataset:
        chosen = list(indices)
        return Dataset({k: [v[i] for i in chosen] for k, v in self._columns.items()})

    def rename_column(self, old: str, new: str) -> Dataset:
        return Dataset({(new if k == old else k): v for k, v in self._columns.items()})

    def set_format(self, *_: Any, **__: Any) -> None:
        """Rows are already plain values; nothing to change."""


class IterableDataset:
    """Named only: Hugging Face Accelerate checks ``isinstance(dataset, IterableDataset)`` once
    ``datasets`` is importable (the stand-in's metadata says it is, for ``require_version``)."""


class DatasetDict(dict[str, Dataset]):
    """Named splits; each method applies to every split."""

    @property
    def column_names(self) -> dict[str, list[str]]:
        return {k: v.column_names for k, v in self.items()}

    def map(self, *args: Any, **kwargs: Any) -> DatasetDict:
        return DatasetDict({k: v.map(*args, **kwargs) for k, v in self.items()})

    def filter(self, *args: Any, **kwargs: Any) -> DatasetDict:
        return DatasetDict({k: v.filter(*args, **kwargs) for k, v in self.items()})

    def rename_column(self, old: str, new: str) -> DatasetDict:
        return DatasetDict({k: v.rename_column(old, new) for k, v in self.items()})


def load_dataset(path: str, name: str | None = None, split: str | None = None, **_: Any) -> Any:
    """Generated GLUE MRPC or wikitext, by the name the examples ask for."""
    if "glue" in path:
        splits = {
            "train": standins.mrpc_columns(standins.TRAIN_ROWS, seed=1),
            "validation": standins.mrpc_columns(standins.VALIDATION_ROWS, seed=2),
        }
    elif "wikitext" in path:
        splits = {
            "train": standins.text_columns(standins.TEXT_ROWS, seed=3),
            "validation": standins.text_columns(standins.VALIDATION_ROWS, seed=4),
        }
    else:
        raise ValueError(f"the examples' stand-in datasets have no {path!r}")
    data = DatasetDict({k: Dataset(v) for k, v in splits.items()})
    if split is None:
        return data
    name_, _, cut = split.partition("[")
    part = data[name_]
    if cut:  # "train[:5%]" or "train[5%:]", as the LM examples ask for a validation split
        low, _, high = cut.rstrip("]").partition(":")
        n = len(part)
        index = [int(n * int(x.rstrip("%")) / 100) if x else None for x in (low, high)]
        part = part.select(range(n)[slice(*index)])
    return part


class _Logging:
    """``datasets.utils.logging``: the verbosity setters the LM examples call."""

    @staticmethod
    def set_verbosity_warning() -> None: ...

    @staticmethod
    def set_verbosity_error() -> None: ...


class utils:  # noqa: N801 - the module path the examples use
    logging = _Logging
