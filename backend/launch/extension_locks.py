"""Stale build locks in a torch extensions folder: torch's FileBaton marks a build under way with a `lock` file in
<TORCH_EXTENSIONS_DIR>/<op>/ and every other process that loads the op waits, silently and forever, until the file
is gone. A build that was killed (Ctrl+C on `make setup`, a run stopped while its rank compiled, an OOM kill) never
removes it, and the next set-up or run hangs with no word until someone finds the file and deletes it by hand.

The baton records no pid, so a lock is judged stale when no living process could be building in that folder: none
(other than this one and its parents) has it in its command line or working folder (ninja, the compilers) or names it
as its TORCH_EXTENSIONS_DIR (the Python process holding the baton). That errs on the safe side: any living process of
that interpreter's runs keeps a lock.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path

import psutil

LOCK = "lock"
MIN_AGE_S = 10.0  # a lock just made belongs to a build starting now, whatever the process table says


def locks_in(folder: Path) -> list[Path]:
    """The build locks present in an extensions folder (one per op folder)."""
    try:
        return sorted(p for p in Path(folder).glob(f"*/{LOCK}") if p.is_file())
    except OSError:
        return []


def _users(folder: str, processes: Iterable[psutil.Process]) -> bool:
    """Whether any of `processes` could be building in `folder`."""
    try:  # ourselves and the shell or make that started us (which may export TORCH_EXTENSIONS_DIR) build nothing
        mine = {os.getpid(), *(parent.pid for parent in psutil.Process().parents())}
    except psutil.Error:
        mine = {os.getpid()}
    for proc in processes:
        try:
            if proc.pid in mine:
                continue
            if any(folder in arg for arg in proc.cmdline()):
                return True
            if proc.cwd().startswith(folder):
                return True
            if os.path.realpath(proc.environ().get("TORCH_EXTENSIONS_DIR", "") or "/nonexistent") == folder:
                return True
        except (psutil.Error, OSError):
            continue
    return False


def stale_locks(folder: Path, *, now: float | None = None) -> list[Path]:
    """The locks in `folder` that no living process holds (see the module's docstring for how that is judged)."""
    found = locks_in(folder)
    if not found:
        return []
    real = os.path.realpath(folder)
    if _users(real, psutil.process_iter()):
        return []
    now = time.time() if now is None else now
    stale = []
    for lock in found:
        try:
            if now - lock.stat().st_mtime >= MIN_AGE_S:
                stale.append(lock)
        except OSError:
            continue
    return stale


def clear_stale_locks(folder: Path) -> list[str]:
    """Remove the stale locks in `folder`; one line per lock removed, for the user (empty when there were none)."""
    said = []
    for lock in stale_locks(folder):
        try:
            age = time.time() - lock.stat().st_mtime
            lock.unlink()
        except OSError as exc:
            said.append(f"a stale build lock could not be removed: {lock} ({exc.strerror or exc}); remove it by hand")
            continue
        said.append(f"removed a stale build lock left by a build that was stopped {_age(age)} ago: {lock}")
    return said


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.0f} h"
