"""A small tmpfs for the full-disk tests: mounted under the test's tmp_path, unmounted after; the test is skipped
with the reason where none can be mounted (not root)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def small_disk(tmp_path: Path, size: str, inodes: int | None = None) -> Iterator[Path]:
    """`inodes`: at most that many files and folders (a disk whose folder creation fails: ENOSPC naming it)."""
    mount = tmp_path / "small"
    mount.mkdir()
    options = f"size={size}" + (f",nr_inodes={inodes}" if inodes else "")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or 'mount failed'}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def fill(path: Path, leave: int = 0) -> None:
    """Write `path` until the disk has about `leave` bytes free (0: until it is full)."""
    import shutil

    with open(path, "ab", buffering=0) as f:  # unbuffered: nothing left to flush into a full disk at close
        if leave:  # in steps, asking again: what else writes to this disk meanwhile (a test's app) is counted
            while (room := shutil.disk_usage(path.parent).free - leave) > 0:
                f.write(b"\0" * min(room, 1 << 20))
            return
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
