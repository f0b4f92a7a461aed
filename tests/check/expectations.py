"""Inline expectations for checker fixtures: ``# expect: TD302`` (or ``# expect: TD302, TD603``).

A fixture is a Python file checked alone with every rule enabled. Its expected
findings are the (line, code) pairs named by ``# expect:`` comments on the line
where each finding must be reported; every other line must stay quiet.
A fixture may set configuration in a leading comment such as
``# torchdoctor-config: target-torch = "2.6"``.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

_EXPECT = re.compile(r"#\s*expect:\s*(TD\d{3}(?:\s*,\s*TD\d{3})*)")
_CONFIG = re.compile(r"#\s*torchdoctor-config:\s*(.+)$")


def expected(source: str) -> set[tuple[int, str]]:
    out: set[tuple[int, str]] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            m = _EXPECT.search(tok.string)
            if m:
                out |= {(tok.start[0], c.strip()) for c in m.group(1).split(",")}
    return out


def config_lines(source: str) -> list[str]:
    """TOML lines given by ``# torchdoctor-config:`` comments (for the [tool.torchdoctor] table)."""
    return [m.group(1).strip() for line in source.splitlines() if (m := _CONFIG.match(line.strip()))]


def fixture_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if p.is_file())


def reported(findings) -> set[tuple[int, str]]:
    """(line, code) of every finding, and of every code folded into one (a construct that has several
    pitfalls is one finding naming the others: ``.cuda()`` is TD705, also TD101 and TD102)."""
    return {(f.location.line, code) for f in findings for code in (f.code, *f.related)}
