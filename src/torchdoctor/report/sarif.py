"""SARIF 2.1.0 report, with ``tool.driver.rules`` filled from the catalog (for GitHub code scanning)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from torchdoctor.catalog import RULES, Rule
from torchdoctor.findings import Finding, Severity

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
_URI_BAD = re.compile(r"^[A-Za-z]:\\|\\")


def _rule_descriptor(rule: Rule) -> dict[str, Any]:
    doc = rule.doc
    first = doc.split("\n## ", 2)
    full = first[1].split("\n", 1)[1].strip() if len(first) > 1 else rule.title
    return {
        "id": rule.code,
        "name": "".join(part.capitalize() for part in rule.name.split("-")),
        "shortDescription": {"text": rule.title},
        "fullDescription": {"text": full or rule.title},
        "help": {"text": doc or rule.title, "markdown": doc or rule.title},
        "helpUri": f"https://github.com/torchdoctor/torchdoctor/blob/main/src/torchdoctor/catalog/docs/{rule.code}.md",
        "defaultConfiguration": {"level": _LEVEL[rule.severity]},
        "properties": {"stage": rule.stage_name, "detection": rule.detection, "tags": [rule.stage_name]},
    }


def _uri(path: str) -> str:
    return path.replace("\\", "/") if _URI_BAD.search(path) else path


def _result(f: Finding, rule_index: dict[str, int]) -> dict[str, Any]:
    text = f.message if not f.fix else f"{f.message} Fix: {f.fix}"
    if f.location is not None and f.location.cell is not None:
        text = f"cell {f.location.cell}, line {f.location.line}, column {f.location.column}: {text}"
    result: dict[str, Any] = {
        "ruleId": f.code,
        "ruleIndex": rule_index[f.code],
        "level": _LEVEL[f.severity],
        "message": {"text": text},
    }
    loc = f.location
    if loc is not None:
        physical: dict[str, Any] = {"artifactLocation": {"uri": _uri(loc.path)}}
        region = _region(loc)
        if region:
            physical["region"] = region
        result["locations"] = [{"physicalLocation": physical}]
    if f.edits or f.related:
        # fixable: `--fix` applies the fix; unsafe: only `--fix --unsafe-fixes` does (it may change behaviour)
        result["properties"] = {"fixable": f.fixable, "unsafe": f.unsafe_fixable, "related": list(f.related)}
    return result


def _region(loc: Any) -> dict[str, Any]:
    """The region in the file. A notebook's is the line of its JSON that holds the cell's line (the message names
    the cell and the position inside it); without that line, the result points at the whole file."""
    if loc.cell is not None:
        return {"startLine": loc.file_line} if loc.file_line is not None else {}
    region: dict[str, Any] = {"startLine": loc.line, "startColumn": loc.column}
    if loc.end_line is not None:
        region["endLine"] = loc.end_line
    if loc.end_column is not None:
        region["endColumn"] = loc.end_column
    return region


def render(findings: Sequence[Finding]) -> str:
    from torchdoctor import __version__

    rules = [RULES[c] for c in sorted(RULES)]
    rule_index = {r.code: i for i, r in enumerate(rules)}
    log = {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "torchdoctor",
                        "version": __version__,
                        "informationUri": "https://github.com/torchdoctor/torchdoctor",
                        "rules": [_rule_descriptor(r) for r in rules],
                    }
                },
                "results": [_result(f, rule_index) for f in findings],
            }
        ],
    }
    return json.dumps(log, indent=2) + "\n"
