"""fit()'s progress display: a tqdm bar when tqdm is installed, plain per-epoch lines when it is not."""

from __future__ import annotations

from typing import IO, Any

__all__ = ["open_bar", "PlainLines"]


def open_bar(stream: IO[str], desc: str, total: int | None) -> Any:
    """A progress bar on ``stream``; tqdm is a dependency of the ``torch`` extra, but not of the package."""
    try:
        from tqdm import tqdm
    except ImportError:  # installed without the extra: say it in lines rather than fail mid-run
        return PlainLines(stream, desc, total)
    return tqdm(total=total, desc=desc, unit="batch", file=stream, dynamic_ncols=True, mininterval=0.25, leave=True)


class PlainLines:
    """The part of tqdm's interface fit() uses; prints one line when the epoch's bar closes."""

    def __init__(self, stream: IO[str], desc: str, total: int | None) -> None:
        self.stream, self.desc, self.total = stream, desc, total
        self.n = 0
        self.postfix: dict[str, Any] = {}

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_postfix(self, refresh: bool = True, **values: Any) -> None:
        self.postfix = values

    def close(self) -> None:
        done = f"{self.n}/{self.total}" if self.total is not None else str(self.n)
        extra = "".join(f", {key}={value}" for key, value in self.postfix.items())
        print(f"{self.desc}: {done} batches{extra}", file=self.stream, flush=True)
