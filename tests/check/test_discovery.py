"""Which files a run checks: folders walked, defaults and excludes skipped, explicit paths honoured."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.unprivileged import nobody, nobody_dir, run_as_nobody  # noqa: F401 - a fixture
from torchdoctor.check.discovery import discover
from torchdoctor.config import Settings


def touch(root: Path, *names: str) -> None:
    for name in names:
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("x = 1\n")


def rel(root: Path, files: list[str]) -> list[str]:
    return [os.path.relpath(f, root).replace(os.sep, "/") for f in files]


def test_walk_skips_defaults_and_virtualenvs(tmp_path: Path) -> None:
    touch(tmp_path, "a.py", "pkg/b.py", "pkg/nb.ipynb", "pkg/notes.txt", ".git/hooks/h.py", "build/x.py",
          "dist/x.py", "pkg/__pycache__/c.py", "node_modules/m.py", ".venv/lib/v.py", "myenv/lib/e.py",
          "myenv/pyvenv.cfg", "conda/conda-meta/history", "conda/lib/c.py", "deep/er/z.py")
    found = discover([str(tmp_path)], Settings(root=str(tmp_path)))
    assert rel(tmp_path, found.files) == ["a.py", "deep/er/z.py", "pkg/b.py", "pkg/nb.ipynb"]
    assert found.errors == []


def test_exclude_patterns_and_force_exclude(tmp_path: Path) -> None:
    touch(tmp_path, "src/a.py", "src/gen/b.py", "tests/fixtures/f.py", "tests/t.py")
    s = Settings(extend_exclude=("gen", "tests/fixtures/**"), root=str(tmp_path))
    assert rel(tmp_path, discover([str(tmp_path)], s).files) == ["src/a.py", "tests/t.py"]
    explicit = [str(tmp_path / "tests/fixtures/f.py"), str(tmp_path / "src/gen/b.py")]
    assert len(discover(explicit, s).files) == 2  # named on the command line: checked
    assert discover(explicit, s, force_exclude=True).files == []  # pre-commit's way


def test_explicit_file_of_any_suffix_and_dedup(tmp_path: Path) -> None:
    touch(tmp_path, "script", "a.py")
    found = discover([str(tmp_path / "script"), str(tmp_path / "a.py"), str(tmp_path)], Settings(root=str(tmp_path)))
    assert rel(tmp_path, found.files) == ["a.py", "script"]


def test_missing_path_and_symlink_loops(tmp_path: Path) -> None:
    touch(tmp_path, "pkg/a.py")
    os.symlink(tmp_path / "pkg", tmp_path / "pkg" / "again")  # a folder loop: visited once, no error
    os.symlink("loop.py", tmp_path / "loop.py")  # a file link to itself
    os.symlink("gone.py", tmp_path / "dangling.py")
    found = discover([str(tmp_path), str(tmp_path / "missing.py")], Settings(root=str(tmp_path)))
    assert rel(tmp_path, found.files) == ["pkg/a.py"]
    assert {(os.path.basename(p), m) for p, m in found.errors} == {
        ("loop.py", "symbolic link loop"), ("dangling.py", "broken symbolic link"),
        ("missing.py", "no such file or directory"),
    }


@pytest.mark.skipif(os.geteuid() == 0 if hasattr(os, "geteuid") else True, reason="root reads everything")
def test_unreadable_folder(tmp_path: Path) -> None:
    touch(tmp_path, "locked/a.py")
    os.chmod(tmp_path / "locked", 0)
    try:
        found = discover([str(tmp_path)], Settings(root=str(tmp_path)))
    finally:
        os.chmod(tmp_path / "locked", 0o755)
    assert found.errors and "permission denied" in found.errors[0][1]


def test_project_exclude_adds_to_the_builtin_list(tmp_path: Path) -> None:
    touch(tmp_path, "a.py", ".venv/lib/v.py", "gen/g.py")
    found = discover([str(tmp_path)], Settings(exclude=("gen",), root=str(tmp_path)))
    assert rel(tmp_path, found.files) == ["a.py"]


def test_a_folder_with_nothing_to_check_is_an_error_naming_it(tmp_path: Path) -> None:
    touch(tmp_path, "docs/readme.txt", "gen/g.py", "other/a.py")
    found = discover([str(tmp_path / "docs"), str(tmp_path / "gen"), str(tmp_path / "other")],
                     Settings(extend_exclude=("gen/**",), root=str(tmp_path)))
    assert rel(tmp_path, found.files) == ["other/a.py"]
    messages = {os.path.basename(p): m for p, m in found.errors}
    assert messages["docs"] == "no Python files (.py, .ipynb) to check in this folder"
    assert messages["gen"].startswith("no Python files") and "(excluded: " in messages["gen"] and "g.py" in messages["gen"]
    assert "other" not in messages


def test_empty_folder_exits_2_on_the_command_line(tmp_path: Path, capsys) -> None:
    from torchdoctor.cli import main

    (tmp_path / "empty").mkdir()
    assert main(["check", "--isolated", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'empty'}: error: no Python files" in err


def test_unreadable_folder_as_an_unprivileged_user(nobody_dir: Path) -> None:
    touch(nobody_dir, "locked/a.py", "ok/b.py")
    for folder in (nobody_dir / "locked", nobody_dir / "ok"):
        os.chown(folder, *nobody())
    os.chmod(nobody_dir / "locked", 0)
    proc = run_as_nobody("check", "--isolated", str(nobody_dir), cwd=nobody_dir)
    assert proc.returncode == 2 and f"{nobody_dir / 'locked'}: error: cannot read folder: permission denied" in proc.stderr


def test_anchored_folder_only_and_negated_excludes(tmp_path: Path) -> None:
    touch(tmp_path, "scripts/a.py", "pkg/scripts/b.py", "gen/x.py", "gen/keep.py", "data.py/inner.py", "data.py2/c.py")
    # As in git, a file cannot be taken back from an excluded folder: gen/* excludes the files, not gen.
    s = Settings(extend_exclude=("/scripts", "gen/*", "!gen/keep.py", "data.py/"), root=str(tmp_path))
    assert rel(tmp_path, discover([str(tmp_path)], s).files) == ["data.py2/c.py", "gen/keep.py", "pkg/scripts/b.py"]


BUILTIN_SKIPS = (".bzr", ".direnv", ".eggs", ".git", ".hg", ".svn", ".tox", ".nox", ".venv", "venv", ".mypy_cache",
                 ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints", "__pycache__", "__pypackages__", "_build",
                 "buck-out", "build", "dist", "node_modules", "site-packages")


def test_every_builtin_skip_folder_is_skipped_at_any_depth(tmp_path: Path) -> None:
    # ruff's default exclude list: tool caches, VCS folders, build output and installed packages hold
    # other people's code (or copies of the user's), never the training script to check.
    touch(tmp_path, "keep.py", *(f"{name}/x.py" for name in BUILTIN_SKIPS), *(f"pkg/{name}/y.py" for name in BUILTIN_SKIPS))
    touch(tmp_path, "pkg/build2/z.py", "pkg/my_dist/w.py")  # only the exact names are skipped
    found = discover([str(tmp_path)], Settings(root=str(tmp_path)))
    assert rel(tmp_path, found.files) == ["keep.py", "pkg/build2/z.py", "pkg/my_dist/w.py"]
