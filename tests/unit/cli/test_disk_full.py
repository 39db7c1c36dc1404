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
    # Merged or not (the store opened for reading only, or for writing beside SQLite's files), the same line.
    assert listed.stderr.strip() == read_only, (merged, listed.stderr)
    assert "first" in listed.stdout
    shown = _traindeck(home, "runs", "show", "first")
    assert shown.returncode == 0, shown.stderr
    assert shown.stderr.strip() == read_only, (merged, shown.stderr)
    assert "(first)" in shown.stdout and "state     succeeded, exit code 0" in shown.stdout, shown.stdout
    assert list((home / "data").glob("crash-reports/*")) == []
    filler.unlink()
    again = _traindeck(home, "runs", "list")
    assert again.returncode == 0, again.stderr


def _files(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


def test_a_run_whose_supervisor_is_gone_is_not_marked_lost_while_the_disk_is_full(
        small_disk: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader keeps the store open (as the dashboard does), so SQLite's WAL and shared-memory files are there and
    a command opens the store for writing: on a full disk it still marks nothing (it would write the run's end, its
    events, an alert) and answers from the store; once space is back the run is marked lost."""
    home = small_disk / "home"
    monkeypatch.setenv("TRAINDECK_HOME", str(home))
    from traindeck.backend.runs import RunRecord, RunStore, reconcile

    gone = subprocess.Popen(["true"])
    gone.wait()  # its pid is the supervisor's, which is no more
    run_id = "20260101-000000-gone"
    with RunStore() as store:
        run_dir = home / "data" / "runs" / run_id
        run_dir.mkdir(parents=True)
        (run_dir / "output.log").write_text("step 1\n")
        store.add_run(RunRecord(id=run_id, run_dir=str(run_dir), created_at=time.time() - 600, name="gone",
                                started_at=time.time() - 590, supervisor_pid=gone.pid,
                                supervisor_started=time.time() - 595))
        fill(small_disk / "filler")
        before = _files(home / "data")
        read_only = (f"traindeck: disk full at {home / 'data'}: the runs are shown as last saved; nothing is written "
                     "until space is freed")
        for args in (("runs", "list"), ("runs", "show", "gone")):
            done = _traindeck(home, *args)
            assert done.returncode == 0, done.stderr
            assert done.stderr.strip() == read_only, done.stderr
            assert "gone" in done.stdout and "running" in done.stdout, done.stdout
        assert reconcile(store) == []  # whoever asks: the dashboard, the queue keeper, `stacks`
        assert _files(home / "data") == before
        record = store.get_run(run_id)
        assert record is not None and record.state == "running"
        assert store.events(run_id) == []
        (small_disk / "filler").unlink()
        again = _traindeck(home, "runs", "list")
        assert again.returncode == 0, again.stderr
        assert f"run {run_id} marked lost" in again.stderr
        record = store.get_run(run_id)
        assert record is not None and record.state == "lost"
