"""``torchdoctor rules [CODE|PREFIX ...]``: the catalog as a table, or one code explained."""

from __future__ import annotations

import argparse
import json

from torchdoctor.catalog import RULES, get_rule, select_codes
from torchdoctor.report import emit


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("codes", nargs="*", metavar="CODE", help="a code (TD302) to explain, or prefixes (TD3) to list")
    parser.add_argument("--output-format", choices=["text", "json"], default="text")
    parser.add_argument("--output-file", "-o", metavar="PATH")


def main(args: argparse.Namespace) -> int:
    codes = [c.upper() for c in args.codes]
    if len(codes) == 1 and len(codes[0]) == 5:  # a full code: explain it
        rule = get_rule(codes[0])
        if args.output_format == "json":
            text = json.dumps(_as_dict(rule) | {"doc": rule.doc}, indent=2)
        else:
            text = f"# {rule.code} ({rule.name}) [{rule.severity.value}, {rule.stage_name}, {_detectors(rule.detection)}]\n\n"
            text += rule.doc.strip() or rule.title
        emit(text, args.output_file)
        return 0
    chosen = sorted(select_codes(codes or None, None))
    rules = [RULES[c] for c in chosen]
    if args.output_format == "json":
        emit(json.dumps([_as_dict(r) for r in rules], indent=2), args.output_file)
        return 0
    width = max(len(r.name) for r in rules)
    lines = [f"{'code':<6} {'name':<{width}} {'severity':<8} {'found by':<8} title"]
    lines += [f"{r.code:<6} {r.name:<{width}} {r.severity.value:<8} {r.detection:<8} {r.title}" for r in rules]
    emit("\n".join(lines), args.output_file)
    return 0


def _detectors(det: str) -> str:
    names = {"S": "check", "R": "run/watch", "E": "env"}
    return " + ".join(names[d] for d in det.split("+"))


def _as_dict(rule) -> dict:
    return {
        "code": rule.code,
        "name": rule.name,
        "severity": rule.severity.value,
        "stage": rule.stage_name,
        "detection": rule.detection,
        "title": rule.title,
    }
