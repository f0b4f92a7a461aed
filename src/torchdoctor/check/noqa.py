"""``# noqa`` comments: a finding is dropped when the line it is reported on says so.

``# noqa`` alone silences every code on the line; ``# noqa: TD302, TD603``
only those codes (a prefix such as ``TD3`` silences that family). Codes of
other tools (``# noqa: E501``) leave torchdoctor's findings alone. For a
statement spanning several lines the comment goes on the line the finding
is reported on (where its location starts), as flake8 and ruff do.

A ``TD`` code that is no rule and no prefix of one (``# noqa: TD999``) silences
nothing and gets a warning, as ruff warns of invalid noqa codes: a typo must
not look like a silenced finding.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from torchdoctor.check.patterns import lazy
from torchdoctor.findings import Finding

__all__ = ["noqa_codes", "filter_noqa", "unknown_codes", "noqa_warnings"]

_NOQA = lazy(r"#\s*noqa(?::[\s]?(?P<codes>[A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*))?", re.I)
ALL = frozenset({"*"})


def noqa_codes(line: str) -> frozenset[str] | None:
    """None if the line has no noqa comment; ``ALL`` for a bare one; else the codes named."""
    if "noqa" not in line.lower():
        return None
    m = _NOQA.search(line)
    if m is None:
        return None
    codes = m.group("codes")
    if not codes:
        return ALL
    found = [c.upper() for c in re.split(r"[,\s]+", codes.strip()) if c]
    if m.end() < len(line) and line[m.end()].isalnum():
        found.pop()  # "TD1O2" is no code; taking its "TD1" would silence the whole family
    return frozenset(found)


def _silenced(code: str, codes: frozenset[str]) -> bool:
    return codes is ALL or any(code.startswith(c) for c in codes if c.startswith("TD"))


def filter_noqa(findings: Sequence[Finding], lines: Sequence[str]) -> list[Finding]:
    """The findings not silenced by a noqa comment on their line (``lines``: the file's lines)."""
    out = []
    cache: dict[int, frozenset[str] | None] = {}
    for f in findings:
        loc = f.location
        if loc is None or not 0 < loc.line <= len(lines):
            out.append(f)
            continue
        if loc.line not in cache:
            cache[loc.line] = noqa_codes(lines[loc.line - 1])
        codes = cache[loc.line]
        if codes is None or not _silenced(f.code, codes):
            out.append(f)
    return out


def _known(code: str) -> bool:
    from torchdoctor.catalog import RULES

    return any(rule.startswith(code) for rule in RULES)


def unknown_codes(lines: Sequence[str]) -> list[tuple[int, str]]:
    """(line, code) for every ``TD`` code in a noqa comment that names no rule and no prefix of one.

    Only real comments count: a docstring that shows ``# noqa: TD999`` is no noqa comment.
    """
    out = []
    for number, line in enumerate(lines, start=1):
        codes = noqa_codes(line)
        if codes is None or codes is ALL:
            continue
        out.extend((number, code) for code in sorted(codes) if code.startswith("TD") and not _known(code))
        run_on = _run_on(line)  # dropped by noqa_codes, named here
        if run_on:
            out.append((number, run_on))
    if not out:
        return out
    comments = _comment_lines(lines)
    return [(number, code) for number, code in out if comments is None or number in comments]


def _run_on(line: str) -> str | None:
    """``TD1O2`` (a letter O): the regex takes TD1 and stops; the whole token is what was meant."""
    m = _NOQA.search(line)
    if m is None or not m.group("codes") or m.end() >= len(line) or not line[m.end()].isalnum():
        return None
    last = re.split(r"[,\s]+", m.group("codes").strip())[-1]
    token = re.match(r"\w+", line[m.end() - len(last):])
    return token.group().upper() if token and token.group().upper().startswith("TD") else None


def _comment_lines(lines: Sequence[str]) -> set[int] | None:
    """Lines holding a comment with noqa in it (None if the text does not tokenize)."""
    import io
    import tokenize

    try:
        tokens = tokenize.generate_tokens(io.StringIO("\n".join(lines)).readline)
        return {t.start[0] for t in tokens if t.type == tokenize.COMMENT and "noqa" in t.string.lower()}
    except (tokenize.TokenError, SyntaxError):
        return None


def noqa_warnings(path: str, lines: Sequence[str],
                  where: Callable[[int], tuple[int | None, int]] | None = None) -> list[str]:
    """Warning lines (for stderr) naming each unknown noqa code; ``where`` maps a line to (cell, line)."""
    out = []
    for number, code in unknown_codes(lines):
        cell, line = where(number) if where else (None, number)
        at = f"{path}:cell {cell}:{line}" if cell else f"{path}:{line}"
        out.append(f"{at}: warning: unknown rule code {code} in `# noqa` (it silences nothing; "
                   "`torchdoctor rules` lists the codes)")
    return out
