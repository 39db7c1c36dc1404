"""Where traindeck keeps the user's things (XDG base directories), overridable for tests and portable installs.

TRAINDECK_HOME, when set, holds everything (data/, config/, cache/ below it): tests point it at a temporary
directory so they never touch the real user's presets or runs.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

APP = "traindeck"


def _xdg(var: str, fallback: str) -> Path:
    value = os.environ.get(var)
    # The XDG spec says relative paths are invalid and must be ignored.
    if value and os.path.isabs(value):
        return Path(value)
    return Path.home() / fallback


def _home_override() -> Path | None:
    value = os.environ.get("TRAINDECK_HOME")
    return Path(value).expanduser().resolve() if value else None


def data_dir() -> Path:
    """Presets, runs and the run store."""
    home = _home_override()
    return home / "data" if home else _xdg("XDG_DATA_HOME", ".local/share") / APP


def config_dir() -> Path:
    """Small settings files."""
    home = _home_override()
    return home / "config" if home else _xdg("XDG_CONFIG_HOME", ".config") / APP


def cache_dir() -> Path:
    """Things that can be thrown away (probe results, build caches)."""
    home = _home_override()
    return home / "cache" if home else _xdg("XDG_CACHE_HOME", ".cache") / APP


def presets_dir() -> Path:
    return data_dir() / "presets"


def runs_dir() -> Path:
    return data_dir() / "runs"


def run_store_path() -> Path:
    return data_dir() / "runs.sqlite3"


class SymlinkRefused(OSError):
    """A symbolic link stands where traindeck writes a file or folder of its own; it is not followed.

    Following it would append to, or change the mode of, whatever the link points at: the user's file."""

    def __init__(self, path: Path | str) -> None:
        super().__init__(errno.ELOOP, "refusing to write through a symbolic link", str(path))
        self.path = Path(path)

    def __str__(self) -> str:
        return f"refusing to write through a symbolic link: {self.path}"


def ensure_private_dir(path: Path) -> Path:
    """Create `path` (and parents) readable by the user only: it may hold logs and commands with private data.

    A folder that is a symbolic link is the user's own arrangement (a data folder moved to a bigger disk): it is
    used as it is, and its mode is left alone, so the folder it points at never changes mode. Otherwise the mode is
    set through the opened folder (fchmod), so a link planted between the check and the chmod changes nothing.
    Files traindeck writes are never opened through a link (fileio.open_private).
    """
    path = Path(path)
    try:
        path.mkdir(parents=True, mode=0o700)
    except FileExistsError:
        pass
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        if os.path.islink(path) and os.path.isdir(path):
            return path  # the user's link to a folder: used, not chmod'ed
        if os.path.islink(path):
            raise SymlinkRefused(path) from None  # a dangling link, or one to a file: nothing to use
        raise
    try:
        os.fchmod(fd, 0o700)
    except PermissionError:  # a directory the user does not own (e.g. a shared XDG root): leave it as it is
        pass
    finally:
        os.close(fd)
    return path


def resources_dir() -> Path:
    """Files shipped with traindeck: built-in presets, the demo script."""
    return Path(__file__).resolve().parents[2] / "resources"


def accelerate_default_config() -> Path:
    """Where `accelerate config` writes by default (HF_HOME / XDG cache rules as accelerate applies them)."""
    explicit = os.environ.get("ACCELERATE_CONFIG_FILE")
    if explicit:
        return Path(explicit)
    hf_home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache")), "huggingface")
    return Path(hf_home) / "accelerate" / "default_config.yaml"


NO_ROOM_BYTES = 1 << 20  # less free than this: a disk is full for SQLite's purposes (its WAL and shm files)


def free_bytes(path: Path | str) -> int:
    """Free bytes of the file system holding `path` (its nearest existing folder); -1 when it cannot be told."""
    import shutil

    folder = str(path)
    while folder and not os.path.isdir(folder):
        folder = os.path.dirname(folder)
    try:
        return shutil.disk_usage(folder or "/").free
    except OSError:
        return -1


def disk_full(path: Path | str) -> bool:
    """Whether the disk holding `path` has (almost) no room left (NO_ROOM_BYTES)."""
    return 0 <= free_bytes(path) < NO_ROOM_BYTES
