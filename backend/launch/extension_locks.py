"""Stale build locks in a torch extensions folder: torch's FileBaton marks a build under way with a `lock` file in
<TORCH_EXTENSIONS_DIR>/<op>/ and every other process that loads the op waits, silently and forever, until the file
is gone. A build that was killed (Ctrl+C on `make setup`, a run stopped while its rank compiled, an OOM kill) never
removes it, and the next set-up or run hangs with no word until someone finds the file and deletes it by hand.

The baton records no pid and keeps no file open (it creates the file, closes it, and deletes it when the build ends),
so a lock is judged held only while something is building that op: a process (other than this one and its parents)
whose working folder is in the op's folder (ninja, the compilers it starts) or whose command line names that folder
(a compiler's sources and objects). The holder's own Python runs ninja within a second of taking the baton, so a
lock younger than MIN_AGE_S is kept whatever the process table says. Sharing TORCH_EXTENSIONS_DIR holds nothing: the
user's shells export it, other runs use it, and the very ranks waiting on the lock have it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path

import psutil

from traindeck.backend.core import rough_duration

LOCK = "lock"
MIN_AGE_S = 10.0  # a lock just made belongs to a build starting now, whatever the process table says


def locks_in(folder: Path) -> list[Path]:
    """The build locks present in an extensions folder (one per op folder)."""
    try:
        return sorted(p for p in Path(folder).glob(f"*/{LOCK}") if p.is_file())
    except OSError:
        return []


def _building(op_folder: str, processes: Iterable[psutil.Process]) -> bool:
    """Whether any of `processes` is building in `op_folder` (its working folder is there, or its command line
    names it)."""
    try:  # ourselves and the shell or make that started us build nothing
        mine = {os.getpid(), *(parent.pid for parent in psutil.Process().parents())}
    except psutil.Error:
        mine = {os.getpid()}
    inside = op_folder.rstrip(os.sep) + os.sep
    for proc in processes:
        try:
            if proc.pid in mine:
                continue
            cwd = proc.cwd()
            if cwd == op_folder or cwd.startswith(inside):
                return True
            if any(op_folder in arg for arg in proc.cmdline()):
                return True
        except (psutil.Error, OSError):
            continue
    return False


def stale_locks(folder: Path, *, now: float | None = None) -> list[Path]:
    """The locks in `folder` that no living process holds (see the module's docstring for how that is judged)."""
    found = locks_in(folder)
    if not found:
        return []
    now = time.time() if now is None else now
    processes = list(psutil.process_iter())
    stale = []
    for lock in found:
        try:
            if now - lock.stat().st_mtime < MIN_AGE_S:
                continue
        except OSError:
            continue
        if not _building(os.path.realpath(lock.parent), processes):
            stale.append(lock)
    return stale


def lock_holders(folder: Path) -> str:
    """Who holds the build locks in `folder`, in words, for a run whose ranks wait on one: stale locks are removed
    ("held by nobody: removed <path>"), held ones name their builder ("<op> held by PID N (ninja)")."""
    removed = clear_stale_locks(folder)
    if removed:
        return "held by nobody: " + "; ".join(removed)
    held = []
    processes = list(psutil.process_iter())
    for lock in locks_in(folder):
        op = os.path.realpath(lock.parent)
        for proc in processes:
            try:
                if proc.cwd().startswith(op) or any(op in arg for arg in proc.cmdline()):
                    held.append(f"{lock.parent.name} lock held by PID {proc.pid} ({proc.name()}), building it")
                    break
            except (psutil.Error, OSError):
                continue
        else:
            held.append(f"{lock} is younger than {MIN_AGE_S:.0f} s: a build is starting")
    return "; ".join(held) or f"no build lock in {folder} any more"


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
        said.append(f"removed a stale build lock left by a build that was stopped {rough_duration(age)} ago: {lock}")
    return said
