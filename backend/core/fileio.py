"""Writing the user's files so that a crash, a kill or a full disk never leaves a half-written one, and traindeck's
own files and folders so that no symbolic link is followed: a link found where traindeck writes its logs is
refused (SymlinkRefused), never written through, so the file it points at keeps its content and its mode."""

from __future__ import annotations

import fcntl
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from traindeck.backend.core.paths import SymlinkRefused, ensure_private_dir


def atomic_write_text(path: Path, text: str, *, mode: int = 0o600) -> None:
    """Replace `path` with `text` in one step: readers see the old file or the new one, never a mix.

    The temporary file lives in the same directory (rename is only atomic within a filesystem) and is fsynced
    before the rename, so a power loss cannot leave an empty file under the final name either.
    """
    atomic_write_bytes(path, text.encode("utf-8"), mode=mode)


def atomic_write_bytes(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    # Makes the rename itself durable; some filesystems refuse to open directories, which is harmless.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def open_private(path: Path, *, append: bool = True, new: bool = False) -> int:
    """A descriptor open for writing to `path`, a regular file readable by the user only (0600).

    The file is created when missing; `new`: it must not exist yet (O_EXCL). `append`: every write goes to the
    end (O_APPEND); without it the descriptor starts at offset 0 (splice(2) refuses O_APPEND files). The last
    component is never followed (O_NOFOLLOW): a symbolic link there raises SymlinkRefused. Anything that is not a
    regular file (a FIFO, a device) raises OSError; O_NONBLOCK keeps a FIFO without a reader from holding the open.
    The mode is set through the descriptor, never by path.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    flags |= os.O_APPEND if append else 0
    flags |= os.O_EXCL if new else 0
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        if os.path.islink(path):
            raise SymlinkRefused(path) from exc
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"not a regular file: {path}")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        if stat.S_IMODE(info.st_mode) != 0o600:
            os.fchmod(fd, 0o600)
    except BaseException:
        os.close(fd)
        raise
    return fd


def refuse_linked_database(path: Path | str) -> None:
    """Raise SymlinkRefused when a symbolic link stands at an SQLite database of traindeck's or at one of the files
    SQLite keeps beside it (-wal, -shm, -journal): SQLite opens and creates them by name, following links, so it is
    asked only once none is a link."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        candidate = f"{path}{suffix}"
        if os.path.islink(candidate):
            raise SymlinkRefused(candidate)


def open_private_append(path: Path) -> int:
    """A descriptor appending to the private log `path` (created 0600 when missing); see open_private."""
    return open_private(path)


def create_private_file(path: Path) -> None:
    """Create `path` empty and private (0600); it must not exist yet, as a file or as a symbolic link."""
    os.close(open_private(path, new=True))


__all__ = ["SymlinkRefused", "atomic_write_bytes", "atomic_write_text", "create_private_file",
           "ensure_private_dir", "open_private", "open_private_append", "refuse_linked_database"]


def read_json_file(path: Path, *, limit: int = 4 << 20) -> Any:
    """A small JSON file traindeck or a run wrote (a run folder's command, request, end or config), or None where it
    is missing, unreadable, not JSON, over `limit` bytes or a symbolic link: such a file is not one of ours, and
    a reader of run folders goes on without it rather than fail or load something unbounded."""
    try:
        if path.is_symlink() or path.stat().st_size > limit:
            return None
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
