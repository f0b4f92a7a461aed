"""The project index's per-run caches and its view of the disk: file texts (read afresh; a notebook's code kept
up to a bound), the words on their import lines, where a module's file is, and where a project's root is."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

from torchdoctor.check.patterns import lazy

if TYPE_CHECKING:
    from torchdoctor.check.semantic import SemanticModel
    from torchdoctor.check.semantic.call_records import CallRecord
    from torchdoctor.check.semantic.summary import ModuleSummary

__all__ = ["MAX_BYTES", "State", "file_of", "guess_root", "import_statements"]

MAX_BYTES = 2_000_000  # a larger module is not read for the index (for a notebook: its code)
MAX_NOTEBOOK_BYTES = 64_000_000  # a notebook's file, outputs included (a GAN course's saved images: 3.4 MB)
MAX_KEPT_TEXT = 8_000_000  # characters of notebook code kept for the index's questions
_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
_WORD = lazy(r"\w+")
_IMPORT_LINE = lazy(r"^[ \t]*(?:from[ \t]+[.\w]+[ \t]+import[ \t]+(?:\([^)]*\)|[^\n#]*)|import[ \t]+[^\n#]*)", re.M)


_EMPTY: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())


class State:
    """One process's caches (never pickled to worker processes)."""

    def __init__(self) -> None:
        self.summaries: dict[str, ModuleSummary | None] = {}
        self.records: dict[str, dict[str, list[CallRecord]]] = {}
        self.modules: dict[tuple, str | None] = {}
        self.lookups: dict[tuple, object | None] = {}
        self.callers: dict[tuple, list[CallRecord]] = {}
        self.near: dict[str, list[str]] = {}
        self.current: dict[str, SemanticModel] = {}
        self.pending: dict[str, tuple] = {}  # path -> (text, tree, index, names, bindings) for its own check
        self.finished: set[str] = set()  # checked already: no tree is kept for them
        self.imports_of: dict[str, tuple[dict, dict]] = {}  # checked already: (from_imports, imports)
        self.words: dict[str, frozenset[str]] = {}
        self.importers: dict[tuple[str, str | None], str | None] = {}
        self.saves_objects: bool | None = None
        self.names_gloo: bool | None = None
        self.wrapped_keys: dict[str, set[str]] = {}  # folder -> its files that pick keys by the DDP prefix
        self.required_keys: dict[str, set[str]] = {}  # folder -> its files (and below) that index keys by the prefix
        self.mentions: dict[tuple[str, str, str], bool] = {}  # callers_mention's and uncalled_helper's answers
        self.by_word: dict[str, list[int]] | None = None  # import word -> positions in Project.files
        self.module_importers: dict[str, list[str]] = {}  # module -> the modules that import it
        self.true_options: dict[str, frozenset[str]] = {}  # module -> always-True options its importers declare
        self.parsed = 0
        self.absolutes: dict[str, str] = {}
        self.listings: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
        self.texts: dict[str, str | None] = {}
        self.sys_paths: dict[str, tuple[str, ...]] = {}  # module -> the folders it appends to ``sys.path``
        self.kept_chars = 0
        self.recording: set[str] = set()  # modules whose call records are being made (a caller's device asked)
        self.skipped = False  # some module's records were left out (being made): an answer not to memoise

    def absolute(self, path: str) -> str:
        """``os.path.abspath(path)``, memoised: the index asks it ~30 times a file (a run never changes folder)."""
        out = self.absolutes.get(path)
        if out is None:
            out = self.absolutes[path] = os.path.abspath(path)
        return out

    def is_file(self, path: str) -> bool:
        """``os.path.isfile(path)`` from one listing of each folder: the index tries ~15 module files a file,
        most of them absent."""
        folder, name = os.path.split(path)
        return name in self._listing(folder, True)[0]

    def _listing(self, folder: str, parent_first: bool) -> tuple[frozenset[str], frozenset[str]]:
        """(files, folders) in ``folder``; a folder its parent's listing does not hold is answered without a
        system call (most module candidates are absent: ``<root>/torch/__init__.py`` for ``import torch``)."""
        hit = self.listings.get(folder)
        if hit is None:
            parent, name = os.path.split(folder)
            if parent_first and parent and parent != folder and name not in self._listing(parent, False)[1]:
                hit = _EMPTY
            else:
                try:
                    with os.scandir(folder or ".") as it:
                        files, dirs = set(), set()
                        for e in it:
                            (files if e.is_file() else dirs if e.is_dir() else set()).add(e.name)
                    hit = (frozenset(files), frozenset(dirs))
                except OSError:  # no such folder, or not a folder, or unreadable
                    hit = _EMPTY
            self.listings[folder] = hit
        return hit

    def text(self, path: str) -> str | None:
        """The file's text. The index asks for some texts dozens of times (a package's ``__init__.py``, ~3 reads a
        file in all), yet reading and decoding a source file again costs ~8 us: keeping a 620-file tree's texts
        cost 10 MB of peak memory and no measurable time. A notebook's code (a JSON parse) is kept, until
        MAX_KEPT_TEXT characters are."""
        if path in self.texts:
            return self.texts[path]
        notebook = path.endswith(".ipynb")
        limit = MAX_NOTEBOOK_BYTES if notebook else MAX_BYTES
        try:
            with open(path, "rb") as fh:
                data = fh.read(limit + 1)
        except OSError:
            return None
        if not notebook:
            return None if len(data) > MAX_BYTES else data.decode("utf-8", "replace")
        text = None if len(data) > limit else _notebook_code(data)
        if text is not None and len(text) > MAX_BYTES:
            text = None
        size = len(text) if text else 0
        if self.kept_chars + size <= MAX_KEPT_TEXT:
            self.texts[path] = text
            self.kept_chars += size
        return text

    def import_words(self, path: str) -> frozenset[str]:
        """The words on the file's import lines (module names and imported names), and ``*`` when one of them is a
        star import; read once."""
        if path not in self.words:
            text = self.text(path) or ""
            statements = import_statements(text)
            stars = {"*"} if any(s.rstrip().rstrip(")").rstrip().endswith("*") for s in statements) else set()
            self.words[path] = frozenset(_WORD.findall(" ".join(statements))) | stars  # ("*": some ``import *``)
        return self.words[path]


def _notebook_code(data: bytes) -> str | None:
    """A notebook's code cells as one Python text (what its own check reads): a notebook calls the project's modules
    as a script does (``fitter = Fitter(net, device=device)`` in a cell)."""
    from torchdoctor.check.notebook import read_notebook
    from torchdoctor.check.source import SourceError

    try:
        return read_notebook(data).text
    except SourceError:
        return None


def import_statements(text: str) -> list[str]:
    """``[m.group(0) for m in _IMPORT_LINE.finditer(text)]``, tried only at the starts of lines that say
    ``import`` (every match does, on its first line): the regex scan of the whole text cost 3x more."""
    out: list[str] = []
    done = 0  # the end of the last match: a line starting before it is part of it
    at = text.find("import")
    while at >= 0:
        start = text.rfind("\n", 0, at) + 1
        if start >= done:
            m = _IMPORT_LINE.match(text, start)
            if m is not None:
                out.append(m.group(0))
                done = m.end()
        nxt = text.find("\n", at)
        if nxt < 0:
            break
        at = text.find("import", nxt)
    return out


def file_of(base: str, parts: list[str], is_file=os.path.isfile) -> str | None:  # type: ignore[no-untyped-def]
    if not parts:
        init = os.path.join(base, "__init__.py")
        return init if is_file(init) else None
    stem = os.path.join(base, *parts)
    if is_file(stem + ".py"):
        return stem + ".py"
    init = os.path.join(stem, "__init__.py")
    return init if is_file(init) else None


def guess_root(files: list[str]) -> str:
    """The nearest folder above the files that holds a project marker, else their common folder."""
    if not files:
        return os.getcwd()
    try:
        common = os.path.commonpath([os.path.dirname(f) for f in files])
    except ValueError:
        return os.path.dirname(files[0])
    cur = common
    while True:
        if any(os.path.exists(os.path.join(cur, m)) for m in _MARKERS):
            return cur
        parent = os.path.dirname(cur)
        if parent == cur:
            return common
        cur = parent
