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

Ranks found waiting on a lock (their stacks are in torch's file_baton.py) are told per op who holds it, "DeepSpeed's
cpu_adam build lock (held by PID 1234, ninja -v)", or "(held by nobody: removed)" once a stale one is gone.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

import psutil

from traindeck.backend.core import rough_duration
from traindeck.backend.core.masking import mask_argv

LOCK = "lock"
MIN_AGE_S = 10.0  # a lock just made belongs to a build starting now, whatever the process table says


def locks_in(folder: Path) -> list[Path]:
    """The build locks present in an extensions folder (one per op folder)."""
    try:
        return sorted(p for p in Path(folder).glob(f"*/{LOCK}") if p.is_file())
    except OSError:
        return []


def _builder(op_folder: str, processes: Iterable[psutil.Process]) -> psutil.Process | None:
    """The process building in `op_folder` (its working folder is there, or its command line names it), the oldest
    of them (ninja before the compilers it starts); None when nothing builds there."""
    try:  # ourselves and the shell or make that started us build nothing
        mine = {os.getpid(), *(parent.pid for parent in psutil.Process().parents())}
    except psutil.Error:
        mine = {os.getpid()}
    inside = op_folder.rstrip(os.sep) + os.sep
    found: list[tuple[float, psutil.Process]] = []
    for proc in processes:
        try:
            if proc.pid in mine:
                continue
            cwd = proc.cwd()
            if cwd == op_folder or cwd.startswith(inside) or any(op_folder in arg for arg in proc.cmdline()):
                found.append((proc.create_time(), proc))
        except (psutil.Error, OSError):
            continue
    return min(found, key=lambda item: (item[0], item[1].pid))[1] if found else None


def stale_locks(folder: Path, *, now: float | None = None) -> list[Path]:
    """The locks in `folder` that no living process holds (see the module's docstring for how that is judged)."""
    found = locks_in(folder)
    if not found:
        return []
    now = time.time() if now is None else now
    processes = list(psutil.process_iter())
    return [lock for lock in found if _young(lock, now) is False
            and _builder(os.path.realpath(lock.parent), processes) is None]


def _young(lock: Path, now: float) -> bool | None:
    """Whether `lock` is younger than MIN_AGE_S; None when it is gone."""
    try:
        return now - lock.stat().st_mtime < MIN_AGE_S
    except OSError:
        return None


def extensions_folders(environ: Mapping[str, str]) -> list[Path]:
    """Where a process with `environ` keeps its JIT-built ops: TORCH_EXTENSIONS_DIR, else torch's default
    <cache>/torch_extensions/<python and CUDA tag>/ (every tag found, as the tag needs torch to be known)."""
    if environ.get("TORCH_EXTENSIONS_DIR"):
        return [Path(environ["TORCH_EXTENSIONS_DIR"])]
    cache = environ.get("XDG_CACHE_HOME") or os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".cache")
    try:
        return sorted(p for p in Path(cache, "torch_extensions").iterdir() if p.is_dir())
    except OSError:
        return []


def _environ(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            raw = handle.read()
    except OSError:
        return {}
    pairs = (item.decode("utf-8", "replace").partition("=") for item in raw.split(b"\0") if item)
    return {name: value for name, _eq, value in pairs}


def waited_locks(pids: Iterable[int]) -> list[str]:
    """For processes waiting in torch's FileBaton: each build lock in their extensions folders with who holds it,
    "DeepSpeed's cpu_adam build lock (held by PID 1234, ninja -v)"; a stale one is removed (the waiters go on) and
    said "(held by nobody: removed)". Their folder comes from their own environment (what torch reads)."""
    folders: list[Path] = []
    for pid in pids:
        for folder in extensions_folders(_environ(pid)):
            if folder not in folders:
                folders.append(folder)
    return [said for folder in folders for said in lock_waits(folder)]


def lock_waits(folder: Path) -> list[str]:
    """Each build lock in `folder` with who holds it, for processes waiting on one (see waited_locks)."""
    processes = list(psutil.process_iter())
    said = []
    for lock in locks_in(folder):
        young = _young(lock, time.time())
        if young is None:  # released since it was listed: its waiters go on
            continue
        holder = _builder(os.path.realpath(lock.parent), processes)
        if holder is not None:
            whom = f"held by PID {holder.pid}, {_command(holder)}"
        elif young:
            whom = "being taken: a build is starting"
        else:
            try:
                lock.unlink()
                whom = "held by nobody: removed"
            except FileNotFoundError:
                continue
            except OSError as exc:
                whom = f"held by nobody, but it could not be removed ({exc.strerror or exc}): remove {lock} by hand"
        said.append(f"DeepSpeed's {lock.parent.name} build lock ({whom})")
    return said


def _command(proc: psutil.Process, limit: int = 120) -> str:
    """A process's command line as words a user reads (secrets masked, long ones shortened)."""
    try:
        argv = proc.cmdline()
        text = " ".join(mask_argv(argv)) if argv else proc.name()
    except (psutil.Error, OSError):
        return "its command cannot be read"
    return text if len(text) <= limit else text[: limit - 3] + "..."


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
