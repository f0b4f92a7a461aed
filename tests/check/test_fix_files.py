"""--fix keeps a source file as it was: mode, owner, group, hard links; refuses what it may not write or what changed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.check.fake_rules import fake_rules  # noqa: F401 - a fixture
from tests.unprivileged import chown_nobody, needs_root, nobody, nobody_dir, run_as_nobody  # noqa: F401 - fixture
from torchdoctor.cli import main

BUGGY = 'import torch\nnet.cuda()\n'
FIXED = 'import torch\nnet.to("cuda")\n'
# For the unprivileged runs, which use the real rules: torch.load gets map_location and weights_only.
REAL_BUGGY = 'import torch\nscaler = torch.cuda.amp.GradScaler()\n'


@pytest.fixture
def proj(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(BUGGY)
    return tmp_path


def test_hard_links_and_mode_survive_fix(fake_rules, proj: Path) -> None:
    os.chmod(proj / "train.py", 0o751)
    os.link(proj / "train.py", proj / "copy.py")
    assert main(["check", "--isolated", "--fix", "train.py"]) == 0
    a, b = (proj / "train.py").stat(), (proj / "copy.py").stat()
    assert (proj / "copy.py").read_text() == FIXED and a.st_ino == b.st_ino and a.st_nlink == 2
    assert stat.S_IMODE(a.st_mode) == 0o751


def test_symlinked_source_stays_a_link(fake_rules, proj: Path) -> None:
    (proj / "real.py").write_text(BUGGY)
    (proj / "train.py").unlink()
    (proj / "train.py").symlink_to("real.py")
    assert main(["check", "--isolated", "--fix", "train.py"]) == 0
    assert (proj / "train.py").is_symlink() and (proj / "real.py").read_text() == FIXED


def test_read_only_file_is_an_error_naming_it_and_is_left_alone(fake_rules, proj: Path, capsys) -> None:
    os.chmod(proj / "train.py", 0o444)
    assert main(["check", "--isolated", "--fix", "train.py"]) == 2
    captured = capsys.readouterr()
    assert "train.py: error: cannot write train.py: Permission denied" in captured.err
    assert "Fixed" not in captured.out  # nothing was fixed, so nothing is claimed
    assert (proj / "train.py").read_text() == BUGGY and stat.S_IMODE((proj / "train.py").stat().st_mode) == 0o444


def test_a_file_changed_while_checked_is_not_overwritten(fake_rules, proj: Path, capsys, monkeypatch) -> None:
    from torchdoctor.check import fix

    real = fix.apply_fixes

    def and_the_user_saves_meanwhile(text, findings):  # type: ignore[no-untyped-def]
        (proj / "train.py").write_text(BUGGY + "# the user's edit\n")
        return real(text, findings)

    monkeypatch.setattr(fix, "apply_fixes", and_the_user_saves_meanwhile)
    assert main(["check", "--isolated", "--fix", "train.py"]) == 2
    assert "changed on disk" in capsys.readouterr().err
    assert (proj / "train.py").read_text() == BUGGY + "# the user's edit\n"


def test_form_feed_does_not_shift_columns(fake_rules, proj: Path) -> None:
    # str.splitlines() breaks at \f: the line after it was taken for the next one, its
    # non-ASCII columns were counted wrongly and the fix landed in the wrong place.
    (proj / "train.py").write_text('import torch\n# page \x0c break\ny = "é"; net.cuda()\n')
    assert main(["check", "--isolated", "--fix", "train.py"]) == 0
    assert (proj / "train.py").read_text() == 'import torch\n# page \x0c break\ny = "é"; net.to("cuda")\n'


@needs_root
def test_root_fixes_another_users_file_and_keeps_its_owner(fake_rules, proj: Path) -> None:
    os.chmod(proj / "train.py", 0o644)  # as a host user's file mounted into a container
    chown_nobody(proj / "train.py")
    assert main(["check", "--isolated", "--fix", "train.py"]) == 0
    st = (proj / "train.py").stat()
    assert (proj / "train.py").read_text() == FIXED and (st.st_uid, st.st_gid) == nobody()
    assert stat.S_IMODE(st.st_mode) == 0o644


@needs_root
def test_root_leaves_a_0444_file_of_another_user(fake_rules, proj: Path, capsys) -> None:
    os.chmod(proj / "train.py", 0o444)
    chown_nobody(proj / "train.py")
    assert main(["check", "--isolated", "--fix", "train.py"]) == 2
    st = (proj / "train.py").stat()
    assert "Permission denied" in capsys.readouterr().err
    assert (proj / "train.py").read_text() == BUGGY and (st.st_uid, st.st_gid) == nobody()


def test_nobody_cannot_fix_roots_0444_file_in_its_own_folder(nobody_dir: Path) -> None:
    script = nobody_dir / "train.py"
    script.write_text(REAL_BUGGY)
    os.chmod(script, 0o444)  # root's file; the folder is nobody's, so a rename would have worked
    proc = run_as_nobody("check", "--isolated", "--fix", str(script), cwd=nobody_dir)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"cannot write {script}: Permission denied" in proc.stderr
    assert script.read_text() == REAL_BUGGY and script.stat().st_uid == 0


def test_nobody_fixes_its_own_file_keeping_links_and_mode(nobody_dir: Path) -> None:
    script = nobody_dir / "train.py"
    script.write_text(REAL_BUGGY)
    os.chmod(script, 0o640)
    chown_nobody(script)
    os.link(script, nobody_dir / "linked.py")
    proc = run_as_nobody("check", "--isolated", "--fix", str(script), cwd=nobody_dir)
    assert "torch.amp.GradScaler(\"cuda\")" in script.read_text(), proc.stdout + proc.stderr
    assert (nobody_dir / "linked.py").read_text() == script.read_text() and script.stat().st_nlink == 2
    st = script.stat()
    assert stat.S_IMODE(st.st_mode) == 0o640 and (st.st_uid, st.st_gid) == nobody()
