"""``torchdoctor run [-m] TARGET [args...]``: run a program under the runtime auditor."""

from __future__ import annotations

import argparse
import sys

from torchdoctor.errors import UsageError


def configure(parser: argparse.ArgumentParser) -> None:
    from torchdoctor.cli import add_output_options

    add_output_options(parser, formats=("text", "json"))
    parser.add_argument("--html", metavar="PATH", help="also write a self-contained HTML report with step-time and memory charts")
    parser.add_argument("--no-env", action="store_true", help="skip the start-up environment check")
    parser.add_argument("--fail-on", choices=("error", "warning", "info"), metavar="SEVERITY",
                        help="exit 1 when the program exits 0 but a finding of this severity or worse was reported "
                             "(error, warning or info; for CI); the program's own non-zero exit code always wins")
    parser.add_argument("-m", dest="module", metavar="MODULE", help="run a module as `python -m MODULE` does")
    parser.add_argument("program", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGS...]",
                        help="the script and its own arguments (passed through unchanged)")
    parser.epilog = ("The report goes to standard error (or --output-file), never mixed into the program's output. "
                     "Exit code: the program's own (1 for an uncaught exception); with --fail-on, 1 when it exited 0 "
                     "with a finding at or above that severity; 2 for torchdoctor's own errors (no such script).")


def main(args: argparse.Namespace) -> int:
    from torchdoctor.runtime import distributed
    from torchdoctor.runtime.launcher import run_program
    from torchdoctor.runtime.session import WatchSession

    program = list(args.program)
    if program and program[0] == "--":
        program = program[1:]
    if args.module:
        target, argv, as_module = args.module, program, True
    elif program:
        target, argv, as_module = program[0], program[1:], False
    else:
        raise UsageError("nothing to run: give a script (torchdoctor run train.py ...) or a module (-m package.module)")
    preflight(target, as_module, args)

    def report(session: WatchSession, error: BaseException | None) -> None:
        if not distributed.is_reporter():
            return
        _write(session, args)

    session = WatchSession(environment=not args.no_env)
    code = run_program(target, argv, as_module=as_module, session=session, on_report=report)
    return _fail_on(code, session, args.fail_on)


def _fail_on(code: int, session, threshold: str | None) -> int:  # type: ignore[no-untyped-def]
    """The program's own exit code, or 1 when it is 0 and a finding at or above ``threshold`` was reported."""
    if code != 0 or threshold is None:
        return code
    from torchdoctor.findings import Severity

    worst = Severity(threshold).rank
    return 1 if any(f.severity.rank <= worst for f in session.findings) else 0


def _write(session, args: argparse.Namespace) -> None:  # type: ignore[no-untyped-def]
    from torchdoctor.report import emit, use_color

    color = args.output_format == "text" and not args.output_file and use_color(sys.stderr)
    emit(session.report(args.output_format, color=color), args.output_file, stream=sys.stderr)
    if args.html:
        from torchdoctor.report import write_text_atomic

        write_text_atomic(args.html, session.report("html"))


def preflight(target: str, as_module: bool, args: argparse.Namespace) -> None:
    """What would otherwise fail only after the program ran: every report path, and the script itself."""
    from torchdoctor._files import check_writable
    from torchdoctor.errors import InputError
    from torchdoctor.report import describe_write_error

    for option, path in (("--output-file", args.output_file), ("--html", args.html)):
        if path:
            try:
                check_writable(path)
            except OSError as exc:
                raise InputError(f"{option} {path}: cannot write: {describe_write_error(path, exc)}; nothing was run") from None
    if not as_module:
        _check_script(target)


def _check_script(target: str) -> None:
    """A folder or a script that does not compile is an error before anything starts (no empty report first)."""
    import os
    import traceback

    from torchdoctor.errors import InputError

    if os.path.isdir(target):
        main_py = os.path.join(target, "__main__.py")
        hint = f"; to run its __main__.py: torchdoctor run {main_py}" if os.path.isfile(main_py) else ""
        raise InputError(f"{target} is a folder, not a script{hint}")
    if not os.path.isfile(target):
        raise InputError(f"no such script: {target}")
    try:
        with open(target, "rb") as fh:
            source = fh.read()
        compile(source, target, "exec", dont_inherit=True)
    except OSError as exc:
        raise InputError(f"cannot read {target}: {exc.strerror or exc}") from None
    except SyntaxError as exc:
        shown = "".join(traceback.format_exception_only(type(exc), exc)).rstrip()
        raise InputError(f"{target} does not compile; nothing was run:\n{shown}") from None
    except ValueError as exc:  # NUL bytes
        raise InputError(f"{target} is not a Python script: {exc}") from None
