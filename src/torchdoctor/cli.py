"""Command line: ``torchdoctor check | run | env | explain | rules``, with ruff's exit codes.

0: nothing found; 1: findings (errors, for ``env``); 2: usage error, unreadable
configuration or internal error. Each part owns its sub-command in
``<part>/command.py`` (``configure(parser)`` and ``main(args) -> int``); they are
imported only when chosen, so ``check`` never pays for torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from torchdoctor import __version__
from torchdoctor.errors import TorchDoctorError
from torchdoctor.report import FORMATS

_COMMANDS = {
    "check": ("torchdoctor.check.command", "find pitfalls in training scripts without running them"),
    "run": ("torchdoctor.runtime.command", "run a script under the runtime auditor and report what it saw"),
    "env": ("torchdoctor.env.command", "diagnose why CUDA is (not) usable on this machine"),
    "explain": ("torchdoctor.explain.command", "explain a PyTorch/CUDA error message (or a whole log) and its fix on this machine"),
    "rules": ("torchdoctor.cli_rules", "list the catalog, or explain one code"),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits 2 too, but say where to look
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def add_output_options(parser: argparse.ArgumentParser, formats: Sequence[str] = FORMATS) -> None:
    """The report options every sub-command shares."""
    parser.add_argument("--output-format", choices=list(formats), default="text", help="report format (default: text)")
    parser.add_argument("--output-file", "-o", metavar="PATH", help="write the report to PATH instead of standard output")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; with ``only``, just that sub-command's (so that `check` never imports `run`'s parts)."""
    parser = _Parser(prog="torchdoctor", description="Makes sure a PyTorch program gets GPU training right.")
    parser.add_argument("--version", action="version", version=f"torchdoctor {__version__}")
    subs = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    subs.required = True
    for name, (module, help_text) in _COMMANDS.items():
        if only is not None and name != only:
            continue
        sub = subs.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(_module=module)
        # Configuring a parser must stay cheap: each command module imports its
        # heavy parts inside main().
        importlib.import_module(module).configure(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    chosen = next((a for a in args_list if not a.startswith("-")), None)
    parser = build_parser(chosen if chosen in _COMMANDS else None)
    try:
        args = parser.parse_args(args_list)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        return int(importlib.import_module(args._module).main(args))
    except TorchDoctorError as exc:
        print(f"torchdoctor: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("torchdoctor: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1
    except Exception:  # an internal error: say so plainly, with the traceback for a bug report
        import traceback  # here, not at start-up: only a bug of ours needs it

        print("torchdoctor: internal error (please report it with the traceback below)", file=sys.stderr)
        traceback.print_exc()
        return 2


if __name__ == "__main__":
    sys.exit(main())
