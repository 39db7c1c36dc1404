"""Freeing the /dev/shm buffers DeepSpeed's CPU collectives leave behind: real files in /dev/shm, a real process
mapping one of them (which must be kept). The end-to-end check is in test_runs_launchers (a real 2-rank run)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from traindeck.backend.runs.supervisor.shm_leftovers import PREFIX, SHM_DIR, free_buffers

pytestmark = pytest.mark.skipif(not SHM_DIR.is_dir(), reason="no /dev/shm on this system")


def _buffer(port: str, rank: int, addr: str = "127.0.0.1") -> Path:
    path = SHM_DIR / f"{PREFIX}_{os.getuid()}_{addr}_{port}_{rank}"
    path.write_bytes(b"\0" * 4096)
    return path


def _map_in_a_process(path: Path) -> subprocess.Popen[str]:
    """A live process that maps `path` (as a rank maps its buffer), once it says so."""
    holder = subprocess.Popen([sys.executable, "-c", (
        "import mmap, sys, time\n"
        f"f = open({str(path)!r}, 'r+b'); m = mmap.mmap(f.fileno(), 4096)\n"
        "print('mapped', flush=True); time.sleep(60)")], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "mapped"
    return holder


def test_only_this_runs_unmapped_buffers_are_removed() -> None:
    port, other = str(40000 + os.getpid() % 20000), str(39999 - os.getpid() % 20000)
    mine = [_buffer(port, 0), _buffer(port, 1)]
    theirs = _buffer(other, 0)  # another run's rendezvous
    mapped = _buffer(port, 2)  # still mapped by a live process: never removed
    holder = _map_in_a_process(mapped)
    try:
        removed, freed = free_buffers([("127.0.0.1", port)])
        assert (removed, freed) == (2, 8192)
        assert not any(p.exists() for p in mine)
        assert theirs.exists() and mapped.exists()
    finally:
        holder.kill()
        holder.wait()
        for path in (theirs, mapped, *mine):
            path.unlink(missing_ok=True)


def test_nothing_to_free_is_quiet() -> None:
    assert free_buffers([]) == (0, 0)
    assert free_buffers([("127.0.0.1", "1")]) == (0, 0)


def test_abandoned_buffers_of_any_run_are_freed_when_old_and_unmapped() -> None:
    """A run whose supervisor was killed never frees its buffers: the next run's supervisor frees every buffer of
    this user that no process maps and that is older than a rank needs to map it; young or mapped ones stay."""
    import time

    from traindeck.backend.runs.supervisor.shm_leftovers import ABANDONED_AFTER_S, free_abandoned_buffers

    port = str(20000 + os.getpid() % 10000)
    fresh = _buffer(port, 0)  # made a moment ago: a rank may be about to map it
    try:
        free_abandoned_buffers()
        assert fresh.exists()
    finally:
        fresh.unlink(missing_ok=True)

    old, mapped = _buffer(port, 1), _buffer(port, 2, addr="10.0.0.7")
    holder = _map_in_a_process(mapped)
    try:
        # A file's ctime cannot be set back: ask as if it were ABANDONED_AFTER_S later.
        removed, freed = free_abandoned_buffers(now=time.time() + ABANDONED_AFTER_S + 1)
        assert not old.exists() and mapped.exists()
        assert removed >= 1 and freed >= 4096
    finally:
        holder.kill()
        holder.wait()
        for path in (old, mapped):
            path.unlink(missing_ok=True)
