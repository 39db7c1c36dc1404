"""A symbolic link planted at the queue's log or lock is never followed: a linked queue.log is replaced by a fresh
private log that names it (the queue goes on), a linked queue.lock is refused and named in queue.log (no keeper
takes it); in both cases the place the link points at is left as it was."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from support.planted import assert_untouched, precious_file
from support.runhelp import get, wait_finished, wait_until

from traindeck.backend.core.paths import data_dir


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "traindeck", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd, env=dict(os.environ))


def _queue_add(tmp_path: Path) -> str:
    script = tmp_path / "hello.py"
    script.write_text("print('hello from the queue')\n")
    added = cli("queue", "add", str(script), cwd=tmp_path)
    assert added.returncode == 0, added.stderr
    assert "internal error" not in added.stderr and not (data_dir() / "crash-reports").exists()
    return added.stdout.strip().splitlines()[-1]


def test_a_linked_queue_log_is_replaced_and_the_queue_goes_on(tmp_path: Path) -> None:
    target = precious_file(tmp_path)
    data_dir().mkdir(parents=True, exist_ok=True)
    log = data_dir() / "queue.log"
    log.symlink_to(target)
    run_id = _queue_add(tmp_path)
    done = wait_finished(run_id, 60)
    assert done.state == "succeeded", done.state_detail
    assert_untouched(target)
    assert not log.is_symlink() and stat.S_IMODE(log.stat().st_mode) == 0o600
    first = log.read_text().splitlines()[0]
    assert first.endswith(f" {log} was a symbolic link (to {target}); replaced by this file: the queue's log is "
                          "never written through a link"), first
    assert "keeper started" in log.read_text()


def test_a_linked_queue_lock_is_refused_and_named_in_the_queue_log(tmp_path: Path) -> None:
    """A dangling link: opening it to create the lock would create the file it names."""
    elsewhere = tmp_path / "elsewhere" / "lock"
    elsewhere.parent.mkdir()
    data_dir().mkdir(parents=True, exist_ok=True)
    lock = data_dir() / "queue.lock"
    lock.symlink_to(elsewhere)
    run_id = _queue_add(tmp_path)
    refusal = f"refusing to write through a symbolic link: {lock}"
    wait_until(lambda: refusal in (data_dir() / "queue.log").read_text(), 30)
    assert not elsewhere.exists() and lock.is_symlink()
    assert get(run_id).state == "queued"  # no keeper took the queue
