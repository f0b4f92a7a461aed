"""Regular expressions compiled on first use: checking one small file compiles only the few it meets.

``lazy(pattern, flags)`` stands for ``re.compile(pattern, flags)`` wherever a module keeps a pattern
and calls its methods (``search``, ``match``, ``sub``, ...): the first call compiles it, and each
method, once looked up, is kept on the object, so later calls cost what a compiled pattern's do.
"""

from __future__ import annotations

import re

__all__ = ["LazyPattern", "lazy"]


class LazyPattern:
    def __init__(self, pattern: str, flags: int = 0) -> None:
        self._source = (pattern, flags)

    def __getattr__(self, name: str):  # only for what is not on the object yet: compile, keep the method
        if name.startswith("__"):
            raise AttributeError(name)
        value = getattr(re.compile(*self.__dict__["_source"]), name)
        setattr(self, name, value)
        return value

    def __repr__(self) -> str:
        return f"lazy({self._source[0]!r}, {self._source[1]})"


def lazy(pattern: str, flags: int = 0) -> LazyPattern:
    return LazyPattern(pattern, flags)
