"""The one writer (torchdoctor._files): each kind of target stays what it was, as root and as `nobody`."""

from __future__ import annotations

import os
import select
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.unprivileged import chown_nobody, needs_root, nobody, nobody_dir, run_as_nobody  # noqa: F401 - fixture
from torchdoctor import _files
from torchdoctor._files import ChangedOnDisk, check_writable, stale_temp_files, temp_name, write_file

TIMEOUT_S = 30
SOURCE = "import torch\nmodel = torch.nn.Linear(2, 2)\n"


def _reader(path: Path) -> tuple[threading.Thread, list[bytes]]:
    """Read a FIFO (opened without blocking, before the writer) until EOF, in a thread with a deadline."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    got: list[bytes] = []

    def read() -> None:
        try:
            while True:
                ready, _, _ = select.select([fd], [], [], TIMEOUT_S)
                if not ready:
                    return
                chunk = os.read(fd, 65536)
                if not chunk and got:  # EOF after the writer closed
                    return
                got.append(chunk)
        finally:
            os.close(fd)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread, got


def _mknod_null(path: Path) -> None:
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # the same device as /dev/null
    except PermissionError:
        pytest.skip("this container may not create device nodes (no CAP_MKNOD)")
    os.chmod(path, 0o666)


def test_regular_file_is_replaced_whole_and_keeps_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "report.txt"
    target.write_text("old")
    os.chmod(target, 0o640)
    write_file(target, b"new")
    assert target.read_bytes() == b"new" and stat.S_IMODE(target.stat().st_mode) == 0o640
    assert os.listdir(tmp_path) == ["report.txt"]  # no temporary file left


def test_a_failing_writer_leaves_the_old_file_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "c.pt"
    target.write_bytes(b"old")

    def half(handle) -> None:  # type: ignore[no-untyped-def]
        handle.write(b"ne")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        write_file(target, half)
    assert target.read_bytes() == b"old" and os.listdir(tmp_path) == ["c.pt"]


def test_symlink_stays_a_link_and_its_target_is_written(tmp_path: Path) -> None:
    real = tmp_path / "real.txt"
    real.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to("real.txt")
    write_file(link, b"new")
    assert link.is_symlink() and os.readlink(link) == "real.txt" and real.read_bytes() == b"new"
    dangling = tmp_path / "dangling.txt"
    dangling.symlink_to("made.txt")
    write_file(dangling, b"made")
    assert dangling.is_symlink() and (tmp_path / "made.txt").read_bytes() == b"made"


def test_hard_links_stay_linked(tmp_path: Path) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("old")
    os.link(a, b)
    write_file(a, b"new, longer text")
    assert b.read_bytes() == b"new, longer text" and a.stat().st_ino == b.stat().st_ino and a.stat().st_nlink == 2
    write_file(b, b"short")  # in place: the tail of the longer text is cut off
    assert a.read_bytes() == b"short"


def test_fifo_is_written_in_place(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    thread, got = _reader(fifo)
    write_file(fifo, b"report\n" * 20000)  # more than a pipe buffer: the reader must drain it
    thread.join(TIMEOUT_S)
    assert not thread.is_alive() and b"".join(got) == b"report\n" * 20000
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_socket_is_written_by_connecting(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    server.settimeout(TIMEOUT_S)
    got: list[bytes] = []

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.settimeout(TIMEOUT_S)
            while chunk := conn.recv(65536):
                got.append(chunk)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        write_file(path, b"findings\n")
        thread.join(TIMEOUT_S)
    finally:
        server.close()
    assert b"".join(got) == b"findings\n" and stat.S_ISSOCK(os.lstat(path).st_mode)


def test_a_folder_is_refused_and_a_missing_folder_named(tmp_path: Path) -> None:
    with pytest.raises(IsADirectoryError):
        write_file(tmp_path, b"x")
    with pytest.raises(FileNotFoundError):
        write_file(tmp_path / "no" / "such.txt", b"x")
    with pytest.raises(FileNotFoundError, match="folder .*no does not exist"):
        check_writable(tmp_path / "no" / "such.txt")
    with pytest.raises(IsADirectoryError):
        check_writable(tmp_path)


def test_read_only_file_is_refused_even_for_root_and_untouched(tmp_path: Path) -> None:
    target = tmp_path / "only-copy.pt"
    target.write_bytes(b"weights")
    os.chmod(target, 0o444)
    for call in (lambda: write_file(target, b"zeros"), lambda: check_writable(target)):
        with pytest.raises(PermissionError, match="Permission denied"):
            call()
    assert target.read_bytes() == b"weights" and stat.S_IMODE(target.stat().st_mode) == 0o444


def test_a_file_changed_since_it_was_read_is_not_overwritten(tmp_path: Path) -> None:
    target = tmp_path / "train.py"
    target.write_bytes(b"edited by the user meanwhile")
    with pytest.raises(ChangedOnDisk):
        write_file(target, b"fixed", original=b"as read")
    assert target.read_bytes() == b"edited by the user meanwhile"
    write_file(target, b"fixed", original=b"edited by the user meanwhile")
    assert target.read_bytes() == b"fixed"


def test_stale_temp_files_are_those_of_dead_writers_on_this_host(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    dead = int(done.stdout)
    mine = temp_name(tmp_path / "c.pt")  # this process: alive
    mine.write_bytes(b"")
    stale = Path(str(mine).replace(f".{os.getpid()}.", f".{dead}."))
    stale.write_bytes(b"")
    other_host = tmp_path / f".c.pt.elsewhere-node.{dead}.0123abcd.tmp"
    other_host.write_bytes(b"")
    (tmp_path / "c.pt").write_bytes(b"")
    assert list(stale_temp_files(tmp_path)) == [stale]
    assert _files.is_temp_name(mine.name) and not _files.is_temp_name("c.pt")


@needs_root
def test_character_device_stays_a_device(tmp_path: Path) -> None:
    dev = tmp_path / "null"
    _mknod_null(dev)
    write_file(dev, b"into the void")
    check_writable(dev)
    assert stat.S_ISCHR(os.lstat(dev).st_mode) and os.lstat(dev).st_rdev == os.makedev(1, 3)


@needs_root
def test_root_keeps_the_owner_and_group_of_another_users_file(tmp_path: Path) -> None:
    target = tmp_path / "train.py"
    target.write_text("old")
    os.chmod(target, 0o664)
    chown_nobody(target)
    write_file(target, b"new")
    st = target.stat()
    assert target.read_bytes() == b"new" and (st.st_uid, st.st_gid) == nobody() and stat.S_IMODE(st.st_mode) == 0o664


# ---- the same through the command line, as root and as an unprivileged user ------------------------------


def _project(folder: Path) -> Path:
    (folder / "train.py").write_text(SOURCE)
    return folder / "train.py"


@needs_root
def test_check_output_to_a_device_node_keeps_it_a_device(tmp_path: Path, capsys) -> None:
    from torchdoctor.cli import main

    dev = tmp_path / "null"
    _mknod_null(dev)
    assert main(["check", "--isolated", "-o", str(dev), str(_project(tmp_path))]) in (0, 1)
    assert stat.S_ISCHR(os.lstat(dev).st_mode)  # (never the real /dev/null: a regression would break the machine)


def test_check_output_through_a_symlink_and_into_a_fifo(tmp_path: Path, capsys) -> None:
    from torchdoctor.cli import main

    script = _project(tmp_path)
    (tmp_path / "reports").mkdir()
    link = tmp_path / "latest.json"
    link.symlink_to("reports/run1.json")
    assert main(["check", "--isolated", "--output-format", "json", "-o", str(link), str(script)]) in (0, 1)
    assert link.is_symlink() and (tmp_path / "reports" / "run1.json").read_text().startswith("[")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    thread, got = _reader(fifo)
    assert main(["check", "--isolated", "--output-format", "json", "-o", str(fifo), str(script)]) in (0, 1)
    thread.join(TIMEOUT_S)
    assert b"".join(got).startswith(b"[") and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_nobody_writes_a_root_made_device_node_in_place(nobody_dir: Path) -> None:
    dev = nobody_dir / "null"
    _mknod_null(dev)
    script = _project(nobody_dir)
    chown_nobody(script)
    link = nobody_dir / "report.txt"
    link.symlink_to("null")
    for target in (dev, link):
        proc = run_as_nobody("check", "--isolated", "-o", str(target), str(script), cwd=nobody_dir)
        assert proc.returncode in (0, 1), proc.stderr
    assert stat.S_ISCHR(os.lstat(dev).st_mode) and link.is_symlink()


def test_nobody_cannot_replace_a_read_only_report_of_root(nobody_dir: Path) -> None:
    script = _project(nobody_dir)
    report = nobody_dir / "report.txt"
    report.write_text("root's report")
    os.chmod(report, 0o644)  # root's, in a folder nobody may write: a rename would have replaced it
    proc = run_as_nobody("check", "--isolated", "-o", str(report), str(script), cwd=nobody_dir)
    assert proc.returncode == 2 and "Permission denied" in proc.stderr and str(report) in proc.stderr
    assert report.read_text() == "root's report" and report.stat().st_uid == 0


def test_nobody_writes_its_own_file_in_a_folder_it_cannot_write(nobody_dir: Path) -> None:
    script = _project(nobody_dir)
    chown_nobody(script)
    folder = nobody_dir / "shared"
    folder.mkdir(mode=0o755)  # root's: no temporary file can be made beside the report
    report = folder / "report.txt"
    report.write_text("old")
    chown_nobody(report)
    inode = report.stat().st_ino
    proc = run_as_nobody("check", "--isolated", "-o", str(report), str(script), cwd=nobody_dir)
    assert proc.returncode in (0, 1), proc.stderr
    assert report.read_text() != "old" and report.stat().st_ino == inode and os.listdir(folder) == ["report.txt"]
