"""The exit watcher: real processes, ends looked at only after both ranks are gone (as a held-back supervisor loop
would), and DeepSpeed's launcher log naming ranks the scans never saw."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from traindeck.backend.runs.diagnosis.evidence import launcher_spawned_ranks
from traindeck.backend.runs.supervisor.exits import ExitWatcher

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs pidfd_open (Linux >= 5.3)")


def _wait_for(predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_order_and_status_survive_a_late_look() -> None:
    watcher = ExitWatcher()
    try:
        first = subprocess.Popen([sys.executable, "-c", "import time, sys; time.sleep(0.2); sys.exit(7)"])
        second = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.6)"])
        watcher.watch(first.pid)
        watcher.watch(second.pid)
        watcher.watch(first.pid)  # twice is harmless
        _wait_for(lambda: watcher.ended(second.pid) is not None)
        # Both are zombies only now reaped, as the launcher would: the statuses were read before.
        assert first.wait() == 7 and second.wait() == 0
        first_end, second_end = watcher.ended(first.pid), watcher.ended(second.pid)
        assert first_end is not None and second_end is not None
        assert first_end[0] < second_end[0] - 0.2  # the real order, although both were looked at together
        assert first_end[1] is not None and os.waitstatus_to_exitcode(first_end[1]) == 7
        assert second_end[1] is not None and os.waitstatus_to_exitcode(second_end[1]) == 0
    finally:
        watcher.close()


def test_a_process_already_reaped_or_never_watched_is_unknown() -> None:
    watcher = ExitWatcher()
    try:
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
        watcher.watch(gone.pid)
        assert watcher.ended(gone.pid) is None
        assert watcher.ended(os.getpid()) is None
    finally:
        watcher.close()
    watcher.watch(os.getpid())  # after close: ignored, no error


def test_a_signal_death_is_seen_as_one() -> None:
    watcher = ExitWatcher()
    try:
        victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        watcher.watch(victim.pid)
        victim.kill()
        _wait_for(lambda: watcher.ended(victim.pid) is not None)
        victim.wait()
        status = watcher.ended(victim.pid)
        assert status is not None and status[1] is not None and os.waitstatus_to_exitcode(status[1]) == -9
    finally:
        watcher.close()


def test_ranks_named_from_deepspeeds_launcher_log(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_text(
        "[2026-11-21 23:00:14,270] [INFO] [launch.py:158:main] nnodes=1, num_local_procs=2, node_rank=0\n"
        "[2026-11-21 23:00:14,270] [INFO] [launch.py:245:main] process 6637 spawned with command: ['/v/bin/python3', "
        "'-u', 'behave.py', '--local_rank=0', '--steps', '10']\n"
        "[2026-11-21 23:00:14,272] [INFO] [launch.py:245:main] process 6638 spawned with command: ['/v/bin/python3', "
        "'-u', 'behave.py', '--local_rank=1', '--steps', '10']\n"
        "behave: rank 1 starting\n")
    assert launcher_spawned_ranks(log) == {6637: 0, 6638: 1}
    two_nodes = log.read_text().replace("nnodes=1", "nnodes=2")
    log.write_text(two_nodes)
    assert launcher_spawned_ranks(log) == {6637: None, 6638: None}  # local numbers are not the global ranks
    assert launcher_spawned_ranks(tmp_path / "missing.log") == {}
