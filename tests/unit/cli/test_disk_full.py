"""A full disk under the data folder (a 2 MiB tmpfs, filled): commands say "disk full at PATH" in one line, exit
74, and leave no crash report (an empty one was left before); with space back they work again. Skipped where no
tmpfs can be mounted (not root)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.smalldisk import fill
from support.smalldisk import small_disk as mounted


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with mounted(tmp_path, "2m") as mount:
        yield mount


def _traindeck(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TRAINDECK_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "traindeck", *args], capture_output=True, text=True, env=env,
                          timeout=120, cwd=home.parent)


def test_a_full_disk_is_named_in_one_line_with_no_crash_report(small_disk: Path) -> None:
    home = small_disk / "home"
    script = small_disk.parent / "first.py"
    script.write_text("print('first')\n")
    first = _traindeck(home, "run", "--name", "first", str(script))  # a run, recorded while there is room
    assert first.returncode == 0, first.stderr
    # Once every connection has closed, SQLite merges and removes its WAL and shared-memory files: opening the
    # store again then needs room for them, which a full disk does not have.
    shm = home / "data" / "runs.sqlite3-shm"
    deadline = time.monotonic() + 20
    while shm.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    merged = not shm.exists()
    filler = small_disk / "filler"
    fill(filler)
    script = small_disk.parent / "hi.py"
    script.write_text("print('hi')\n")
    done = _traindeck(home, "run", "--detach", str(script))
    assert done.returncode == 74, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"traindeck: disk full at {home / 'data'}"), done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr
    # Commands that only read still answer, from the store as last saved, and write nothing.
    listed = _traindeck(home, "runs", "list")
    assert listed.returncode == 0, listed.stderr
    read_only = (f"traindeck: disk full at {home / 'data'}: the runs are shown as last saved; nothing is written "
                 "until space is freed")
    assert listed.stderr.strip() == (read_only if merged else ""), listed.stderr
    assert "first" in listed.stdout
    assert list((home / "data").glob("crash-reports/*")) == []
    filler.unlink()
    again = _traindeck(home, "runs", "list")
    assert again.returncode == 0, again.stderr
