"""A run whose data folder fills up (a 3 MiB tmpfs, a script printing 4 MiB): the supervisor keeps draining the
job, and once space is back the run ends as it did (succeeded, exit code 0) with the log's cut said, instead of
being taken for lost (issue 27 item 1). Skipped where no tmpfs can be mounted (not root)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.runhelp import get, start, wait_finished, wait_until

PRINTER = """
import os, sys, time
go, printed = sys.argv[1], sys.argv[2]
while not os.path.exists(go):  # the test fills the disk first
    time.sleep(0.05)
line = "x" * 1023 + "\\n"
for i in range(4096):
    sys.stdout.write(line)
sys.stdout.flush()
open(printed, "w").close()
"""


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or 'mount failed'}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_a_run_that_fills_the_disk_ends_as_it_did_once_space_is_back(small_disk: Path, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINDECK_HOME", str(small_disk / "home"))
    script = tmp_path / "printer.py"
    script.write_text(PRINTER)
    go, printed = tmp_path / "go", tmp_path / "printed"
    run = start([sys.executable, str(script), str(go), str(printed)])
    wait_until(lambda: get(run.id).launcher_pid, timeout=30)
    # Take what room is left: the run's 4 MiB of output cannot all be kept.
    filler = small_disk / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
    go.touch()
    wait_until(printed.exists, timeout=60)
    time.sleep(3.0)
    assert get(run.id).state == "running"  # the end waits for room (it was marked lost before)
    filler.unlink()
    done = wait_finished(run.id, 60)
    assert (done.state, done.exit_code) == ("succeeded", 0), (done.state_detail, done.diagnosis)
    assert "output.log was cut at byte" in done.state_detail and "the disk was full" in done.state_detail
    assert (small_disk / "home" / "data" / "runs" / run.id / "output.log").stat().st_size < 4 << 20
