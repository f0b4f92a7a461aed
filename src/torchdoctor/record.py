"""Small value classes (findings, settings, the checker's records) without the cost of ``dataclasses``.

``import dataclasses`` brings ``inspect`` (~10 ms), and a dataclass compiles each of its generated
methods when its module is imported (~1 ms a class): ``check`` on one small file paid ~20 ms for
them. These write ``__init__`` by hand (positional order = ``__slots__`` order) and take equality,
hashing, ``repr``, pickling (worker processes) and ``replace`` from ``__slots__``.
"""

from __future__ import annotations

__all__ = ["Record", "FrozenRecord", "replace"]


class Record:
    """Fields are ``__slots__``, in ``__init__``'s positional order; equal when of one class with equal fields."""

    __slots__ = ()
    __hash__ = None  # type: ignore[assignment]  # mutable: unhashable, as a dataclass

    def _values(self) -> tuple:
        return tuple(getattr(self, f) for f in self.__slots__)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{f}={getattr(self, f)!r}' for f in self.__slots__)})"

    def __reduce__(self) -> tuple:
        return type(self), self._values()


class FrozenRecord(Record):
    """A record whose fields are set once, in ``__init__`` (with ``object.__setattr__``); hashable."""

    __slots__ = ()

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(self._values())

    def _fill(self, *values: object) -> None:
        """Set every field, in ``__slots__`` order (what ``__init__`` calls once)."""
        for name, value in zip(self.__slots__, values, strict=True):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r} of a frozen {type(self).__name__}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r} of a frozen {type(self).__name__}")


def replace(obj: Record, **changes: object) -> Record:
    """A copy of ``obj`` with some fields changed (``dataclasses.replace`` for records); ``__init__`` runs
    again, so a record that normalises its fields normalises the new ones too."""
    unknown = set(changes) - set(obj.__slots__)
    if unknown:
        raise TypeError(f"{type(obj).__name__} has no field {sorted(unknown)[0]!r}")
    return type(obj)(*(changes[f] if f in changes else getattr(obj, f) for f in obj.__slots__))
