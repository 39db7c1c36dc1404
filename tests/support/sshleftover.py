"""Test sshds left behind by an interrupted test session (its pytest killed before the session fixture's teardown):
they keep the fixture's port, and the next session's tests then reach a daemon whose keys are gone ("Permission
denied (publickey)", seen in CI) or skip. Each fixture writes `owner.pid` (its pytest's pid) beside its sshd config;
an sshd of ours whose owner is gone is ended before a new one starts. One still owned by a live session is left be.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path

import psutil

OWNER = "owner.pid"


def claim(folder: Path) -> None:
    (folder / OWNER).write_text(str(os.getpid()))


def end_orphaned_sshds(marker: str, listening: Callable[[], bool], timeout: float = 10.0) -> list[int]:
    """End the sshds whose config path contains `marker` and whose owning session is gone; their pids."""
    ended = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if proc.info["name"] != "sshd" or "-f" not in cmdline:
            continue
        config = Path(cmdline[cmdline.index("-f") + 1]) if cmdline.index("-f") + 1 < len(cmdline) else None
        if config is None or marker not in str(config):
            continue
        try:
            owner = int((config.parent / OWNER).read_text())
        except (OSError, ValueError):
            owner = None
        if owner is not None and owner != os.getpid() and psutil.pid_exists(owner):
            continue  # a live test session's sshd
        try:
            proc.send_signal(signal.SIGTERM)
            ended.append(proc.pid)
        except psutil.Error:
            continue
        if marker in config.parent.name:  # its keys and config: nothing will use them again
            shutil.rmtree(config.parent, ignore_errors=True)
    deadline = time.monotonic() + timeout
    while ended and listening() and time.monotonic() < deadline:
        time.sleep(0.1)
    return ended
