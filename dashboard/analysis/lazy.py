"""A read-only sequence whose records are built when first read.

Used for the outputs that can hold hundreds of thousands of records (a replay's per-job starts, a
plan's `why` rows) but are usually read a few at a time or not at all: building them up front cost
more than the computation that produced them. Pure, no I/O.
"""

from __future__ import annotations

from typing import Sequence


class LazyRecords(Sequence):
    """Subclasses keep their raw data and implement `_build() -> tuple` and `_raw_len() -> int`; the
    tuple is made once, on the first read that needs it, and the raw data can then be dropped."""

    __slots__ = ("_built",)

    def __init__(self) -> None:
        self._built: tuple | None = None

    def _build(self) -> tuple:
        raise NotImplementedError

    def _raw_len(self) -> int:
        raise NotImplementedError

    def _all(self) -> tuple:
        if self._built is None:
            self._built = self._build()
        return self._built

    def __len__(self) -> int:
        return len(self._built) if self._built is not None else self._raw_len()

    def __getitem__(self, index):
        return self._all()[index]

    def __iter__(self):
        return iter(self._all())

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    def __hash__(self) -> int:
        return hash(self._all())

    def __repr__(self) -> str:
        return repr(self._all())
