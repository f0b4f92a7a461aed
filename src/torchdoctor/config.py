"""Configuration: the ``[tool.torchdoctor]`` table of the nearest pyproject.toml, plus CLI overrides.

Keys (kebab-case, as ruff spells them): ``select``, ``extend-select``, ``ignore``,
``exclude``, ``extend-exclude`` (both add to the built-in skip list),
``per-file-ignores`` and ``target-torch``. An
unknown key, a value of the wrong type or an unknown rule code is a ConfigError
that names the file and the key: a typo must never silently change what is checked.
"""

from __future__ import annotations

import os
import re
from typing import Any

from torchdoctor.errors import ConfigError, UsageError
from torchdoctor.record import FrozenRecord, replace

__all__ = ["Settings", "settings_from_toml", "load_settings", "find_config", "parse_target_torch", "glob_match",
           "Patterns", "patterns"]

# Never checked, wherever they are (virtual environments are also found by their pyvenv.cfg).
DEFAULT_EXCLUDE = (
    ".bzr", ".direnv", ".eggs", ".git", ".hg", ".svn", ".tox", ".nox", ".venv", "venv",
    ".mypy_cache", ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints", "__pycache__",
    "__pypackages__", "_build", "buck-out", "build", "dist", "node_modules", "site-packages",
)

_KEYS = ("select", "extend-select", "ignore", "exclude", "extend-exclude", "per-file-ignores", "target-torch")


class Settings(FrozenRecord):
    """What one run of ``torchdoctor check`` checks, and where the configuration came from.

    ``root`` is the folder that relative ``exclude`` and ``per-file-ignores``
    patterns are matched from (the configuration file's folder, else the
    current directory). Frozen and picklable: it travels to worker processes.
    """

    __slots__ = ("select", "extend_select", "ignore", "exclude", "extend_exclude", "per_file_ignores",
                 "target_torch", "root", "config_path")
    select: tuple[str, ...]
    extend_select: tuple[str, ...]
    ignore: tuple[str, ...]
    exclude: tuple[str, ...]
    extend_exclude: tuple[str, ...]
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...]
    target_torch: tuple[int, int] | None
    root: str
    config_path: str | None

    def __init__(self, select: tuple[str, ...] = (), extend_select: tuple[str, ...] = (), ignore: tuple[str, ...] = (),
                 exclude: tuple[str, ...] = (), extend_exclude: tuple[str, ...] = (),
                 per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = (),
                 target_torch: tuple[int, int] | None = None, root: str | None = None,
                 config_path: str | None = None) -> None:
        self._fill(select, extend_select, ignore, exclude, extend_exclude, per_file_ignores, target_torch,
                   os.getcwd() if root is None else root, config_path)

    @property
    def enabled(self) -> frozenset[str]:
        """Codes enabled by select/extend-select/ignore (ruff's semantics)."""
        return _enabled(self.select, self.extend_select, self.ignore)

    @property
    def all_excludes(self) -> tuple[str, ...]:
        # The built-in list always applies: a project's `exclude` must not make the
        # checker walk into .git or a virtual environment (a known footgun of ruff's).
        return DEFAULT_EXCLUDE + self.exclude + self.extend_exclude

    def ignored_for(self, path: str) -> frozenset[str]:
        """Codes that ``per-file-ignores`` switches off for ``path``."""
        if not self.per_file_ignores:
            return frozenset()
        rel = relative_to(path, self.root)
        out: set[str] = set()
        for pattern, codes in self.per_file_ignores:
            if glob_match(pattern, rel):
                out |= _expand(codes)
        return frozenset(out)


def _expand(codes: tuple[str, ...]) -> set[str]:
    from torchdoctor.catalog import select_codes

    return select_codes(list(codes), None) if codes else set()


_ENABLED_CACHE: dict[tuple, frozenset[str]] = {}


def _enabled(select: tuple[str, ...], extend: tuple[str, ...], ignore: tuple[str, ...]) -> frozenset[str]:
    key = (select, extend, ignore)
    if key not in _ENABLED_CACHE:
        from torchdoctor.catalog import RULES, select_codes

        chosen = select_codes(list(select), None) if select else set(RULES)
        chosen |= _expand(extend)
        _ENABLED_CACHE[key] = frozenset(chosen - _expand(ignore))
    return _ENABLED_CACHE[key]


# ---- reading -------------------------------------------------------------------------


def _load_toml(text: str, where: str) -> dict[str, Any]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: invalid TOML: {exc}") from None


def settings_from_toml(text: str, *, root: str | None = None, where: str = "<config>") -> Settings:
    """Settings from the *body* of a ``[tool.torchdoctor]`` table (``target-torch = "2.6"`` ...)."""
    return settings_from_table(_load_toml(text, where), root=root, where=where)


def settings_from_table(table: dict[str, Any], *, root: str | None = None, where: str = "<config>",
                        config_path: str | None = None) -> Settings:
    unknown = sorted(set(table) - set(_KEYS))
    if unknown:
        import difflib

        hint = difflib.get_close_matches(unknown[0], _KEYS, n=1)
        also = f" (did you mean {hint[0]!r}?)" if hint else f" (known keys: {', '.join(_KEYS)})"
        raise ConfigError(f"{where}: [tool.torchdoctor]: unknown key {unknown[0]!r}{also}")
    kwargs: dict[str, Any] = {"root": root or os.getcwd(), "config_path": config_path}
    for key in ("select", "extend-select", "ignore"):
        if key in table:
            kwargs[key.replace("-", "_")] = _codes(table[key], f"{where}: [tool.torchdoctor] {key}")
    for key in ("exclude", "extend-exclude"):
        if key in table:
            kwargs[key.replace("-", "_")] = _strings(table[key], f"{where}: [tool.torchdoctor] {key}")
    if "per-file-ignores" in table:
        kwargs["per_file_ignores"] = _per_file(table["per-file-ignores"], f"{where}: [tool.torchdoctor] per-file-ignores")
    if "target-torch" in table:
        kwargs["target_torch"] = parse_target_torch(table["target-torch"], f"{where}: [tool.torchdoctor] target-torch")
    settings = Settings(**kwargs)
    try:
        settings.enabled  # noqa: B018 - validates the selectors now, naming the file
    except UsageError as exc:
        raise ConfigError(f"{where}: [tool.torchdoctor]: {exc}") from None
    return settings


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: expected a list of strings, got {value!r}")
    return tuple(value)


def _codes(value: Any, where: str) -> tuple[str, ...]:
    codes = _strings(value, where)
    from torchdoctor.catalog import select_codes

    try:
        select_codes(list(codes), None)
    except UsageError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return tuple(c.strip().upper() for c in codes)


def _per_file(value: Any, where: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a table of glob = [codes], got {value!r}")
    return tuple((pattern, _codes(codes, f"{where} {pattern!r}")) for pattern, codes in value.items())


_VERSION = re.compile(r"^\s*(\d+)\.(\d+)(?:\.\d+)?\s*$")


def parse_target_torch(value: Any, where: str = "target-torch") -> tuple[int, int]:
    """``"2.6"`` -> ``(2, 6)``; a number is refused because TOML reads 2.10 as 2.1."""
    if not isinstance(value, str):
        raise ConfigError(f"{where}: expected a quoted version such as \"2.6\", got {value!r}")
    m = _VERSION.match(value)
    if not m:
        raise ConfigError(f"{where}: expected a version such as \"2.6\", got {value!r}")
    return int(m.group(1)), int(m.group(2))


def find_config(start: str) -> str | None:
    """The nearest pyproject.toml at or above ``start`` that has a [tool.torchdoctor] table."""
    here = os.path.abspath(start)
    if not os.path.isdir(here):
        here = os.path.dirname(here)
    while True:
        candidate = os.path.join(here, "pyproject.toml")
        if os.path.isfile(candidate) and _has_table(candidate):
            return candidate
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def _has_table(path: str) -> bool:
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError):
        return False
    # A cheap test first: most pyproject.toml files are not ours.
    return re.search(r"^\s*\[\s*tool\s*\.\s*torchdoctor\b", text, re.M) is not None


def load_settings(path: str) -> Settings:
    """Settings from a pyproject.toml's [tool.torchdoctor] table (or a bare torchdoctor.toml)."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read configuration {path}: {getattr(exc, 'strerror', None) or exc}") from None
    data = _load_toml(text, path)
    table = _our_table(data, path)
    root = os.path.dirname(os.path.abspath(path))
    return settings_from_table(table, root=root, where=path, config_path=os.path.abspath(path))


def _our_table(data: dict[str, Any], path: str) -> dict[str, Any]:
    """The [tool.torchdoctor] table of a pyproject-style file, or a bare torchdoctor.toml's top level."""
    tool = data.get("tool")
    if os.path.basename(path) != "pyproject.toml" and "tool" not in data:
        return data  # a bare torchdoctor.toml: the keys at the top level
    if not isinstance(tool, dict) or "torchdoctor" not in tool:
        raise ConfigError(
            f"{path}: no [tool.torchdoctor] table (write the settings under [tool.torchdoctor], "
            "or at the top level of a torchdoctor.toml)"
        )
    if not isinstance(tool["torchdoctor"], dict):
        raise ConfigError(f"{path}: [tool.torchdoctor] must be a table")
    return tool["torchdoctor"]


def with_overrides(settings: Settings, **overrides: Any) -> Settings:
    """The command line's --select/--ignore/... on top of the file's settings."""
    given = {k: v for k, v in overrides.items() if v is not None}
    out = replace(settings, **given)
    out.enabled  # noqa: B018 - an unknown code on the command line is a UsageError now
    for _pattern, codes in out.per_file_ignores:
        _expand(codes)
    return out


# ---- paths ---------------------------------------------------------------------------


def relative_to(path: str, root: str) -> str:
    """``path`` relative to ``root`` in POSIX form; unchanged when outside it."""
    absolute = os.path.abspath(path)
    try:
        rel = os.path.relpath(absolute, root)
    except ValueError:  # another drive on Windows
        return absolute.replace(os.sep, "/")
    if rel.startswith(".."):
        return absolute.replace(os.sep, "/")
    return rel.replace(os.sep, "/")


class Patterns:
    """gitignore-style patterns, compiled once: plain names by a set lookup, the rest by ``pathspec``.

    The semantics are git's (``pathspec.GitIgnoreSpec``): a pattern without
    ``/`` matches a file or folder name at any depth (``build``, ``*_test.py``);
    one with a leading or inner ``/`` is anchored at the root (``/build``,
    ``tests/fixtures/**``); a trailing ``/`` matches folders only; ``**/``
    crosses folders; ``!pattern`` takes a path back; whatever is inside a
    matched folder matches. ``pathspec`` is imported only when some pattern is
    more than a plain name, so the built-in skip list costs ``check`` nothing.
    """

    def __init__(self, patterns: tuple[str, ...]) -> None:
        patterns = tuple("/" + p[2:] if p.startswith("./") else p for p in patterns)  # "./build" is "/build"
        plain = all(not p.startswith("!") for p in patterns)  # a negation must see every pattern
        self.names = frozenset(p for p in patterns if plain and _is_name(p))
        self._rest = tuple(p for p in patterns if p not in self.names)
        self._spec: Any = None

    def match(self, rel_path: str, is_dir: bool = False) -> bool:
        """Whether a POSIX path relative to the root (a folder when ``is_dir``) matches."""
        if self.names and not self.names.isdisjoint(rel_path.split("/")):
            return True
        return self.match_rest(rel_path, is_dir)

    def match_rest(self, rel_path: str, is_dir: bool = False) -> bool:
        """``match``, without the plain names (a walker has checked those on the entry's name)."""
        if not self._rest:
            return False
        if self._spec is None:
            import pathspec

            self._spec = pathspec.GitIgnoreSpec.from_lines(self._rest)
        return bool(self._spec.match_file(rel_path + "/" if is_dir else rel_path))

    @property
    def has_rest(self) -> bool:
        return bool(self._rest)


def _is_name(pattern: str) -> bool:
    return bool(pattern) and not any(c in pattern for c in "/*?[]\\!# ") and pattern not in (".", "..")


_PATTERNS: dict[tuple[str, ...], Patterns] = {}


def patterns(items: tuple[str, ...]) -> Patterns:
    """The compiled form of ``items``, cached (settings travel to worker processes as plain tuples)."""
    found = _PATTERNS.get(items)
    if found is None:
        found = _PATTERNS[items] = Patterns(items)
    return found


def glob_match(pattern: str, rel_path: str, is_dir: bool = False) -> bool:
    """Match a POSIX relative path (a folder when ``is_dir``) against one gitignore-style pattern."""
    return patterns((pattern,)).match(rel_path, is_dir)
