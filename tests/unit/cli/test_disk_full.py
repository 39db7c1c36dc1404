"""A full disk under the data folder (a 2 MiB tmpfs, filled): commands say "disk full at PATH" in one line, exit
74, and leave no crash report (an empty one was left before); with space back they work again. Skipped where no
tmpfs can be mounted (not root)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or 'mount failed'}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def _traindeck(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TRAINDECK_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "traindeck", *args], capture_output=True, text=True, env=env,
                          timeout=120, cwd=home.parent)


def test_a_full_disk_is_named_in_one_line_with_no_crash_report(small_disk: Path) -> None:
    home = small_disk / "home"
    assert _traindeck(home, "runs", "list").returncode == 0  # the store, made while there is room
    filler = small_disk / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
    script = small_disk.parent / "hi.py"
    script.write_text("print('hi')\n")
    for args in (("run", "--detach", str(script)), ("runs", "list")):
        done = _traindeck(home, *args)
        assert done.returncode == 74, (args, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"traindeck: disk full at {home / 'data'}"), done.stderr
        assert "internal error" not in done.stderr and "Traceback" not in done.stderr
    assert list((home / "data").glob("crash-reports/*")) == []
    filler.unlink()
    again = _traindeck(home, "runs", "list")
    assert again.returncode == 0, again.stderr
