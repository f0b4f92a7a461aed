"""``torchdoctor check [PATH ...]``: the static checker's command line.

Exit codes: 0 nothing found; 1 findings (or, with ``--diff``, changes to make);
2 a usage or configuration error, or some file could not be checked (syntax
error, undecodable, unreadable, an internal error in a rule), even when there
were findings too. ``--exit-zero`` turns findings into 0 but never hides a file
that could not be checked.
"""

from __future__ import annotations

import argparse
import os
import sys

EPILOG = """exit codes: 0 clean, 1 findings (or changes --diff would make), 2 usage/config error or a file
that could not be checked (--exit-zero does not hide those). Configuration: [tool.torchdoctor] in the
nearest pyproject.toml (keys: select, extend-select, ignore, exclude, extend-exclude, per-file-ignores,
target-torch). Silence one line with `# noqa: TD302`."""


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def configure(parser: argparse.ArgumentParser) -> None:
    from torchdoctor import __version__
    from torchdoctor.cli import add_output_options

    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("paths", nargs="*", metavar="PATH", help="files, folders, or - for standard input (default: .)")
    parser.add_argument("--version", action="version", version=f"torchdoctor {__version__}")
    sel = parser.add_argument_group("rule selection")
    sel.add_argument("--select", type=_csv, metavar="CODES", help="only these codes/prefixes (comma-separated; ALL)")
    sel.add_argument("--extend-select", type=_csv, metavar="CODES", help="add these codes to the selection")
    sel.add_argument("--ignore", type=_csv, metavar="CODES", help="never report these codes/prefixes")
    sel.add_argument("--per-file-ignores", action="append", metavar="GLOB:CODES",
                     help="ignore CODES in files matching GLOB (repeatable), e.g. 'tests/*:TD302'")
    sel.add_argument("--target-torch", metavar="VERSION", help='oldest PyTorch the code must run on, e.g. "2.6"')
    cfg = parser.add_argument_group("configuration and files")
    cfg.add_argument("--config", metavar="PATH", help="use this pyproject.toml (or torchdoctor.toml) only")
    cfg.add_argument("--isolated", action="store_true", help="ignore every configuration file")
    cfg.add_argument("--extend-exclude", type=_csv, metavar="GLOBS", help="also skip paths matching these globs")
    cfg.add_argument("--force-exclude", action="store_true",
                     help="apply excludes to paths given on the command line too (for pre-commit)")
    cfg.add_argument("--stdin-filename", metavar="PATH", help="the name of the file read from standard input")
    fix = parser.add_argument_group("fixing")
    fix.add_argument("--fix", action="store_true", help="apply the safe fixes, then report what remains")
    fix.add_argument("--unsafe-fixes", action="store_true",
                     help="with --fix or --diff, also apply the fixes that may change what the code does")
    fix.add_argument("--diff", action="store_true", help="print the fixes as a unified diff; change nothing")
    out = parser.add_argument_group("output")
    add_output_options(out)
    out.add_argument("--statistics", action="store_true", help="count findings per code instead of listing them")
    out.add_argument("--exit-zero", action="store_true", help="exit 0 even when there are findings")
    out.add_argument("--jobs", "-j", type=int, metavar="N", help="worker processes (default: number of CPUs)")
    # Analyse every file as PyTorch code (the benchmark's and the robustness test's honest cost).
    out.add_argument("--no-torch-gate", action="store_true", help=argparse.SUPPRESS)


def main(args: argparse.Namespace) -> int:
    from torchdoctor.check.output import report
    from torchdoctor.check.runner import FileResult, Mode, check_file, check_files
    from torchdoctor.errors import UsageError

    if args.fix and args.diff:
        raise UsageError("--fix and --diff cannot be used together (--diff only shows what --fix would do)")
    if args.jobs is not None and args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    if args.config and args.isolated:  # as ruff: one says "this file", the other "no file"
        raise UsageError("--config cannot be used with --isolated (--isolated ignores every configuration file)")
    paths = args.paths or ["."]
    settings = _settings(args, paths)
    mode = Mode(gate=not args.no_torch_gate, fix=args.fix, diff=args.diff, unsafe_fixes=args.unsafe_fixes)
    results: list[FileResult]
    if paths == ["-"]:
        results = _check_stdin(args, settings, mode, check_file)
    elif "-" in paths:
        raise UsageError("'-' (standard input) cannot be mixed with other paths")
    else:
        from torchdoctor.check.discovery import discover

        found = discover(paths, settings, force_exclude=args.force_exclude)
        results = check_files(found.files, settings, mode, jobs=args.jobs)
        for path, message in found.errors:
            results.append(FileResult(path, errors=[f"{path}: error: {message}"]))
        results.sort(key=lambda r: r.path)
    return report(results, args)


def _check_stdin(args: argparse.Namespace, settings, mode, check_file) -> list:
    from torchdoctor.check.discovery import is_excluded

    name = args.stdin_filename or "<stdin>"
    data = sys.stdin.buffer.read()
    if args.stdin_filename and args.force_exclude and is_excluded(name, settings):
        if args.fix:  # pass the text through untouched, as a formatter would
            sys.stdout.write(data.decode("utf-8", "replace"))
        return []
    result = check_file(name, settings, mode, data=data, stdin=True)
    if args.fix and result.fixed_source is None and not result.errors:
        result.fixed_source = data.decode("utf-8", "replace")
    return [result]


def _settings(args: argparse.Namespace, paths: list[str]):
    from torchdoctor.config import Settings, find_config, load_settings, parse_target_torch, with_overrides
    from torchdoctor.errors import ConfigError, UsageError

    if args.isolated:
        settings = Settings()
    elif args.config:
        if not os.path.isfile(args.config):
            raise ConfigError(f"--config {args.config}: no such file")
        settings = load_settings(args.config)
    else:
        found = find_config(_search_start(paths, args.stdin_filename))
        settings = load_settings(found) if found else Settings()
    per_file = None
    if args.per_file_ignores:
        per_file = settings.per_file_ignores + tuple(_per_file_option(o) for o in args.per_file_ignores)
    try:
        target = parse_target_torch(args.target_torch, "--target-torch") if args.target_torch else None
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    if args.select is not None:  # as in ruff, --select starts the selection afresh
        settings = with_overrides(settings, select=tuple(args.select), extend_select=(), ignore=())
    return with_overrides(
        settings,
        extend_select=settings.extend_select + tuple(args.extend_select) if args.extend_select else None,
        ignore=settings.ignore + tuple(args.ignore) if args.ignore else None,
        extend_exclude=settings.extend_exclude + tuple(args.extend_exclude) if args.extend_exclude else None,
        per_file_ignores=per_file,
        target_torch=target,
    )


def _search_start(paths: list[str], stdin_filename: str | None) -> str:
    real = [p for p in paths if p != "-"] or ([stdin_filename] if stdin_filename else [])
    if not real:
        return os.getcwd()
    try:
        common = os.path.commonpath([os.path.abspath(p) for p in real])
    except ValueError:  # different drives
        return os.getcwd()
    return common


def _per_file_option(text: str) -> tuple[str, tuple[str, ...]]:
    from torchdoctor.errors import UsageError

    pattern, sep, codes = text.rpartition(":")
    if not sep or not pattern or not _csv(codes):
        raise UsageError(f"--per-file-ignores {text!r}: expected GLOB:CODES, e.g. 'tests/*:TD302,TD603'")
    return pattern, tuple(c.upper() for c in _csv(codes))
