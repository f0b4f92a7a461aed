"""`torchdoctor explain TEXT | - | --file LOG`: what an error message means on this machine, and the fix.

Exit codes as the other commands: 0 when no message is recognised ("no known
cause", never a guess), 1 when findings are reported, 2 for a usage error or an
input that cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from torchdoctor.errors import InputError, UsageError

FORMATS = ("text", "json")


def configure(parser: argparse.ArgumentParser) -> None:
    from torchdoctor.cli import add_output_options

    parser.add_argument("text", nargs="*", metavar="TEXT", help="the error message (quote it), or - to read a whole log from standard input")
    parser.add_argument("--file", metavar="LOG", help="read the log or traceback from LOG")
    add_output_options(parser, FORMATS)
    parser.add_argument("--facts", metavar="SNAPSHOT", help="refine with a facts snapshot (`torchdoctor env --save-facts`) instead of probing this machine")
    parser.add_argument("--no-probe", action="store_true", help="explain from the text alone: neither probe this machine nor read a snapshot")
    parser.epilog = "This machine is probed (without initialising CUDA) only when a recognised message is about the machine."


def main(args: argparse.Namespace) -> int:
    from torchdoctor.explain import explain_text, this_machine
    from torchdoctor.report import emit, use_color

    text = _read_input(args)
    if args.facts and args.no_probe:
        raise UsageError("--facts and --no-probe contradict each other: give one")
    facts: Any = None
    probed: list[bool] = []
    if args.facts:
        from torchdoctor.env.command import load_facts

        facts = load_facts(args.facts)
    elif not args.no_probe:
        facts = _recording(this_machine, probed)
    findings = explain_text(text, facts)
    if args.output_format == "json":
        from torchdoctor.report.json import finding_to_dict

        out = json.dumps({"findings": [finding_to_dict(f) for f in findings]}, indent=2) + "\n"
    else:
        basis = f"the facts in {args.facts}" if args.facts else ("this machine's facts" if probed else "")
        out = render(findings, len(text.splitlines()), basis, color=not args.output_file and use_color(sys.stdout))
    emit(out, args.output_file)
    return 1 if findings else 0


def _recording(probe: Any, calls: list[bool]) -> Any:
    """``probe``, noting in ``calls`` that it ran (it runs only when a recognised message is about the machine)."""

    def run() -> Any:
        calls.append(True)
        return probe()

    return run


def render(findings: list[Any], lines: int, basis: str = "", *, color: bool = False) -> str:
    """The text report: a line on what was read and what refined it, then the findings."""
    from torchdoctor.report import text as text_report

    read = f"{lines} line{'s' * (lines != 1)} read"
    if not findings:
        return (f"No known cause: torchdoctor does not recognise this message ({read}).\n"
                "Search for its last line, or run `torchdoctor env` if it is about CUDA on this machine.\n")
    head = f"torchdoctor explain: {read}, " + (f"refined with {basis}" if basis else "explained from the text alone")
    return head + "\n" + text_report.render(findings, color=color)


def _read_input(args: argparse.Namespace) -> str:
    pieces = list(args.text)
    if args.file and pieces:
        raise UsageError("give the message as TEXT, as - (standard input) or with --file, not several at once")
    if args.file:
        return _read_file(args.file)
    if pieces == ["-"]:
        return sys.stdin.read()
    if not pieces:
        raise UsageError("nothing to explain: give the message (torchdoctor explain \"RuntimeError: ...\"), - for standard input, or --file LOG")
    if "-" in pieces:
        raise UsageError("- (standard input) cannot be combined with other text")
    return " ".join(pieces)


def _read_file(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        raise InputError(f"log file {path} does not exist") from None
    except IsADirectoryError:
        raise InputError(f"{path} is a directory, not a log file") from None
    except OSError as exc:
        raise InputError(f"cannot read log file {path}: {exc.strerror or exc}") from None
    # Logs mix encodings and binary junk (progress bars, colour codes): read what can be read.
    return data.decode("utf-8", errors="replace")
