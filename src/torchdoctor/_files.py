"""The one writer: regular files replaced atomically; devices, FIFOs, sockets and hard links written in place.

Every file torchdoctor writes (reports, facts snapshots, fixed sources,
checkpoints, metrics) goes through :func:`write_file`, which keeps what the
target *is*:

- a symlink is followed and its target written: the link stays a link;
- a character or block device, a FIFO or a socket is opened (connected) and
  written in place, never replaced (``-o /dev/null`` must not turn
  ``/dev/null`` into a regular file);
- a regular file is replaced in one step (a reader sees the old file or the
  new one) by a temporary file that gets the old one's mode, owner, group and
  extended attributes first; when any of those cannot be reproduced (another
  user's file written by root is fine, a group this user is not in is not), or
  the file has other hard links, or the folder is not writable, the new
  content is staged first and then copied into the file in place;
- a file this process cannot write is refused (PermissionError) even when its
  folder is writable: renaming over it would change a file the kernel says
  this user may not change; a file with no write bit at all (0444) is refused
  even for root, who may otherwise write (and keep the owner of) another
  user's writable file, as in a container with the host's files mounted;
- with ``original``, a file whose bytes are no longer ``original`` (changed on
  disk since it was read) is left alone (:class:`ChangedOnDisk`).

Temporary files are named ``.<name>.<host>.<pid>.<token>.tmp``, so a later
writer can tell a stale one (its process is gone) from one being written
(:func:`stale_temp_files`). All failures are OSError subclasses; callers turn
them into their own errors.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import shutil
import socket
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

__all__ = ["write_file", "write_atomic", "check_writable", "ChangedOnDisk", "temp_name", "is_temp_name", "stale_temp_files"]

Writer = Callable[[IO[bytes]], Any]
_BINARY = getattr(os, "O_BINARY", 0)
_HOST = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:32] or "host"
_TEMP = re.compile(r"^\.(?P<name>.+)\.(?P<host>[A-Za-z0-9-]+)\.(?P<pid>\d+)\.[0-9a-f]{8}\.tmp$")


class ChangedOnDisk(OSError):
    """The file no longer holds the bytes it was read with: someone else wrote it meanwhile."""


def write_file(path: str | os.PathLike[str], write: Writer | bytes, *, durable: bool = True,
               original: bytes | None = None) -> None:
    """Write ``write`` (bytes, or a function given a binary handle) to ``path``, keeping what ``path`` is.

    ``durable`` fsyncs the data (and, after a rename, the folder) so that the
    write survives a power cut. A failure while ``write`` runs leaves a regular
    target as it was. Raises OSError (PermissionError, IsADirectoryError,
    FileNotFoundError for a missing folder, :class:`ChangedOnDisk`).
    """
    writer = _as_writer(write)
    target = Path(os.path.realpath(path))  # through every symlink: the link stays a link
    try:
        st: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "Is a directory", str(path))
    if st is not None and not stat.S_ISREG(st.st_mode):
        _write_special(target, st, writer)
        return
    if st is not None:
        _probe_writable(target, st)
    if original is not None:
        _check_unchanged(target, original)
    if st is not None and st.st_nlink > 1:  # a rename would cut the other links off
        _write_staged(target, writer, durable, original)
        return
    _replace(target, st, writer, durable, original)


def write_atomic(path: str | os.PathLike[str], write: Writer, *, durable: bool = True) -> None:
    """The former name of :func:`write_file` (same rules)."""
    write_file(path, write, durable=durable)


def check_writable(path: str | os.PathLike[str]) -> None:
    """Raise the OSError that :func:`write_file` would meet, without writing anything.

    For ``run``: a training run must not end in "cannot write" after an hour.
    """
    target = os.path.realpath(path)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        folder = os.path.dirname(target) or "."
        if not os.path.isdir(folder):
            raise FileNotFoundError(errno.ENOENT, f"folder {folder} does not exist", str(path)) from None
        if not os.access(folder, os.W_OK | os.X_OK):
            raise PermissionError(errno.EACCES, f"Permission denied (folder {folder})", str(path)) from None
        return
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "Is a directory", str(path))
    if stat.S_ISREG(st.st_mode):
        _probe_writable(Path(target), st)
    elif not os.access(target, os.W_OK):  # opening a FIFO would wait for its reader
        raise PermissionError(errno.EACCES, "Permission denied", str(path))


def temp_name(target: Path) -> Path:
    """A fresh temporary name beside ``target`` that says who writes it."""
    return target.with_name(f".{target.name}.{_HOST}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def stale_temp_files(folder: Path, names: Callable[[str], bool] = lambda name: True) -> Iterator[Path]:
    """Temporary files of this writer in ``folder`` whose writing process (on this host) is gone.

    ``names`` filters on the target's name (the part between the leading dot and the host).
    A temp file of another host is never stale here: its writer may be alive there.
    """
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        m = _TEMP.match(entry.name)
        if m and m["host"] == _HOST and names(m["name"]) and not _alive(int(m["pid"])):
            yield Path(entry.path)


def is_temp_name(name: str) -> bool:
    return _TEMP.match(name) is not None


# ---- how each kind of target is written ---------------------------------------------------


def _as_writer(write: Writer | bytes) -> Writer:
    if isinstance(write, (bytes, bytearray, memoryview)):
        data = bytes(write)
        return lambda handle: handle.write(data)
    return write


def _probe_writable(target: Path, st: os.stat_result) -> None:
    # A file without any write bit is read-only on purpose, even for root (who the kernel
    # would let through): a user's only copy of a checkpoint, a vendored file.
    if not st.st_mode & 0o222:
        raise PermissionError(errno.EACCES, f"Permission denied (read-only file, mode {stat.S_IMODE(st.st_mode):04o})", str(target))
    fd = os.open(target, os.O_WRONLY | _BINARY)  # then ask the kernel, truncating nothing
    os.close(fd)


def _check_unchanged(target: Path, original: bytes) -> None:
    try:
        with open(target, "rb") as handle:
            now = handle.read(len(original) + 1)
    except FileNotFoundError:
        now = None
    if now != original:
        raise ChangedOnDisk(errno.EAGAIN, "changed on disk since it was read", str(target))


def _write_special(target: Path, st: os.stat_result, writer: Writer) -> None:
    if stat.S_ISSOCK(st.st_mode):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(str(target))
            with sock.makefile("wb") as handle:
                writer(handle)
        return
    # Devices and FIFOs: no O_TRUNC (meaningless there); opening a FIFO waits for its reader, as a shell does.
    with os.fdopen(os.open(target, os.O_WRONLY | _BINARY), "wb") as handle:
        writer(handle)


def _replace(target: Path, st: os.stat_result | None, writer: Writer, durable: bool, original: bytes | None) -> None:
    tmp = temp_name(target)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _BINARY, 0o666)  # as readable as the umask allows
    except OSError as exc:
        if st is None or exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
        _write_staged(target, writer, durable, original)  # a writable file in a folder that is not
        return
    try:
        if st is not None and not _copy_metadata(fd, target, st):
            os.close(fd)
            os.unlink(tmp)
            _write_staged(target, writer, durable, original)
            return
        with os.fdopen(fd, "wb") as handle:
            writer(handle)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        if original is not None:
            _check_unchanged(target, original)
        os.replace(tmp, target)
    except BaseException:
        remove_quietly(tmp)
        raise
    if durable:
        _fsync_dir(target.parent)


def _copy_metadata(fd: int, target: Path, st: os.stat_result) -> bool:
    """Give the new file the old one's owner, group, mode and xattrs; False if any cannot be kept."""
    if hasattr(os, "fchown") and (st.st_uid, st.st_gid) != _owner(fd):
        try:
            os.fchown(fd, st.st_uid, st.st_gid)
        except OSError:
            return False
    if hasattr(os, "fchmod"):
        os.fchmod(fd, stat.S_IMODE(st.st_mode))  # after chown, which clears set-id bits
    return _copy_xattrs(fd, target)


def _owner(fd: int) -> tuple[int, int]:
    mine = os.fstat(fd)
    return mine.st_uid, mine.st_gid


def _copy_xattrs(fd: int, target: Path) -> bool:
    if not hasattr(os, "listxattr"):
        return True
    try:
        names = os.listxattr(target)
    except OSError:  # a file system without extended attributes
        return True
    try:
        for name in names:
            os.setxattr(fd, name, os.getxattr(target, name))
    except OSError:  # security.* labels this process may not set: keep the file itself instead
        return False
    return True


def _write_staged(target: Path, writer: Writer, durable: bool, original: bytes | None) -> None:
    """Produce the whole content first (so a failing ``writer`` changes nothing), then copy it in place."""
    folder = target.parent if os.access(target.parent, os.W_OK) else None
    with tempfile.TemporaryFile(dir=folder) as staged:  # unnamed where the OS can: gone even after a kill
        writer(staged)
        staged.flush()
        size = staged.tell()
        staged.seek(0)
        if original is not None:
            _check_unchanged(target, original)
        with open(target, "r+b") as handle:  # no O_TRUNC: the file stays the same inode
            shutil.copyfileobj(staged, handle, 1 << 20)
            handle.truncate(size)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())


def _alive(pid: int) -> bool:
    if pid == os.getpid() or os.name == "nt":  # Windows' os.kill(pid, 0) would end the process
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: alive, someone else's
        return True
    return True


def remove_quietly(path: Path | str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # Windows cannot open a directory; its rename is atomic anyway
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
