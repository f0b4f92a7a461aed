"""`torchdoctor env`: probe this machine (or read a snapshot), diagnose, report; exit 1 on an error."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from torchdoctor.errors import InputError

FORMATS = ("text", "json")


def configure(parser: argparse.ArgumentParser) -> None:
    from torchdoctor.cli import add_output_options

    add_output_options(parser, FORMATS)
    parser.add_argument("--facts", metavar="FILE", help="diagnose a snapshot taken elsewhere (JSON: a facts object, or this command's JSON report)")
    parser.add_argument("--save-facts", metavar="FILE", help="also write this machine's facts snapshot to FILE (to attach to a bug report)")
    parser.add_argument("--no-cuda-init", action="store_true", help="do not initialise CUDA, not even in a child process (faster; misses init errors)")


def main(args: argparse.Namespace) -> int:
    from torchdoctor.env.diagnose import diagnose
    from torchdoctor.findings import Severity
    from torchdoctor.report import emit, use_color, write_text_atomic

    if args.facts:
        facts = load_facts(args.facts)
    else:
        from torchdoctor.env.probe import probe

        facts = probe(init_cuda=not args.no_cuda_init)
    findings = diagnose(facts, snapshot=bool(args.facts))
    from torchdoctor.explain import explain_facts  # the snapshot's error texts, through the table `explain` uses

    findings += explain_facts(facts, findings)
    if args.save_facts:
        write_text_atomic(args.save_facts, json.dumps(facts, indent=2, sort_keys=True) + "\n")
    if args.output_format == "json":
        from torchdoctor.report.json import finding_to_dict

        text = json.dumps({"facts": facts, "findings": [finding_to_dict(f) for f in findings]}, indent=2) + "\n"
    else:
        from torchdoctor.env import report

        text = report.render(facts, findings, color=not args.output_file and use_color(sys.stdout),
                             snapshot=args.facts or None)
    emit(text, args.output_file)
    return 1 if any(f.severity is Severity.ERROR for f in findings) else 0


def load_facts(path: str) -> dict[str, Any]:
    """A snapshot from ``path``: a facts object, or a ``{"facts": ...}`` report; a clear error otherwise.

    Wrong types and unknown shapes are InputErrors naming the key (env.snapshot.validate):
    a malformed snapshot must not read as a machine without a GPU.
    """
    try:
        with open(path, encoding="utf-8") as fh:
            raw = fh.read()
    except FileNotFoundError:
        raise InputError(f"facts file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read facts file {path}: {exc}") from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InputError(f"facts file {path} is not JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    if isinstance(data, dict) and "facts" in data:  # this command's JSON report
        data = data["facts"]
        if not isinstance(data, dict):
            raise InputError(f"facts file {path} is malformed: its 'facts' must be a JSON object of facts")
    from torchdoctor.env.snapshot import validate

    problems = validate(data)
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise InputError(f"facts file {path} is malformed: " + "; ".join(problems[:3]) + more)
    return data
