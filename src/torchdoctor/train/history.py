"""The metrics history fit() returns: one row per epoch, plain Python numbers, written as CSV."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Union, overload

__all__ = ["History"]


class History:
    """Rows of per-epoch metrics; ``history["val_loss"]`` is a column, ``history[-1]`` a row."""

    def __init__(self, rows: list[dict[str, Any]] | None = None) -> None:
        self.rows: list[dict[str, Any]] = [dict(row) for row in rows or []]

    def append(self, row: dict[str, Any]) -> None:
        self.rows.append(dict(row))

    @overload
    def __getitem__(self, key: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, key: str) -> list[Any]: ...
    def __getitem__(self, key: Union[int, str]) -> Any:
        if isinstance(key, str):
            if not any(key in row for row in self.rows):
                raise KeyError(f"no metric {key!r}; the history has {', '.join(self.columns) or 'no columns'}")
            return [row.get(key) for row in self.rows]
        return self.rows[key]

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.rows)

    def __repr__(self) -> str:
        return f"History({len(self.rows)} epochs, columns={self.columns})"

    @property
    def columns(self) -> list[str]:
        seen: dict[str, None] = {}
        for row in self.rows:
            seen.update(dict.fromkeys(row))
        return list(seen)

    def to_csv(self) -> str:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=self.columns, lineterminator="\n")
        writer.writeheader()
        for row in self.rows:
            writer.writerow({key: "" if value is None else value for key, value in row.items()})
        return buffer.getvalue()

    def write_csv(self, path: Union[str, Path]) -> None:
        """Write the history atomically, so a crash never leaves half a CSV."""
        from torchdoctor.train.checkpoint import write_atomic

        data = self.to_csv().encode("utf-8")
        write_atomic(Path(path), lambda handle: handle.write(data))
