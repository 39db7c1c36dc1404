"""The processes of a run: finding every one of them, signalling them, and telling how each one ended.

A run's processes are found two ways, because neither alone is complete:
- the process tree below the supervisor (the supervisor is a child subreaper, so processes orphaned by a dead
  launcher are re-parented to it and stay in its tree);
- the marker variable TRAINDECK_RUN_ID=<run id> that every process of the run inherits from the launcher's
  environment, read from /proc/PID/environ. It still finds them when the supervisor itself is gone and the tree
  is lost (the processes were re-parented to init), which is what the sentinel and the "lost" clean-up rely on.
Linux only (prctl, /proc); elsewhere the functions degrade to the tree walk.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import psutil

from traindeck.backend.core import procfs

MARKER = "TRAINDECK_RUN_ID"
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def become_child_subreaper() -> bool:
    """Orphaned descendants are re-parented to this process instead of init (Linux 3.4+)."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent() -> None:
    """For preexec_fn: the child gets SIGKILL when the thread that started it dies.

    Runs between fork and exec, so it may only use async-signal-safe calls; prctl and getppid are.
    """
    parent = os.getppid()
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


@dataclass(frozen=True)
class ProcessId:
    """A process by pid and start time: a pid alone may have been reused by an unrelated process."""

    pid: int
    started: float

    @classmethod
    def of(cls, proc: psutil.Process) -> ProcessId:
        return cls(proc.pid, proc.create_time())

    def process(self) -> psutil.Process | None:
        """The live process (zombies included), or None when it is gone or the pid now names another process."""
        try:
            proc = psutil.Process(self.pid)
            if abs(proc.create_time() - self.started) > 0.5:
                return None
            return proc
        except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
            return None

    def alive(self) -> bool:
        proc = self.process()
        if proc is None:
            return False
        try:
            return proc.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def read_stat(pid: int) -> tuple[str, int, int] | None:
    """(state letter, parent pid, start time in clock ticks since boot) from /proc/PID/stat, or None if gone."""
    try:
        fields = procfs.stat_fields(pid)
        return fields[0].decode(), int(fields[1]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def descendant_pids(root: int, thorough: bool = False) -> list[int]:
    """Pids below `root` (see procfs.descendants; the thorough walk also finds children forked by other
    threads). Falls back to psutil where /proc cannot be listed."""
    if not thorough or os.path.isdir("/proc"):
        return procfs.descendants(root, thorough=thorough)
    return [p.pid for p in descendants(root)]


def environ_value(pid: int, name: str) -> str | None:
    """One variable of a process's start-up environment, read from /proc (None if absent or unreadable)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    key = name.encode() + b"="
    for entry in data.split(b"\0"):
        if entry.startswith(key):
            return entry[len(key):].decode("utf-8", "replace")
    return None


def rank_number(pid: int, parent_pid: int | None) -> int | None:
    """The rank a process is, if it is one of the launcher's rank processes, else None.

    A rank is the topmost process carrying RANK: its children (compilers of a DeepSpeed op build, data-loader
    workers, py-cpuinfo) inherit the variable and are never ranks. A child is told by its parent's RANK, or, when
    the parent is already gone or unreadable (a zombie's environment cannot be read), by the run's sitecustomize
    stamp TRAINDECK_RANK_TAGS_PID: the rank writes its own pid there, so a process started by a rank inherits
    another process's pid in it.
    """
    rank_text = environ_value(pid, "RANK")
    if rank_text is None or not rank_text.isdigit():
        return None
    parent_rank = environ_value(parent_pid, "RANK") if parent_pid else None
    if parent_rank == rank_text:
        return None
    stamped = environ_value(pid, "TRAINDECK_RANK_TAGS_PID")
    if stamped is not None and stamped.isdigit() and stamped != str(pid):
        # Stamped by an ancestor: a rank (gone, or with our RANK) makes us its child; a launcher that happened to
        # run with RANK set itself (another RANK) does not.
        if environ_value(int(stamped), "RANK") in (None, rank_text):
            return None
    return int(rank_text)


def marked_processes(run_id: str, exclude: Iterable[int] = ()) -> list[psutil.Process]:
    """Every live process whose environment carries TRAINDECK_RUN_ID=run_id (zombies are not counted)."""
    skip = set(exclude) | {os.getpid()}
    needle = f"{MARKER}={run_id}".encode() + b"\0"
    found = []
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []
    for pid in pids:
        if pid in skip:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                data = handle.read() + b"\0"
        except OSError:
            continue
        if needle in data and (data.startswith(needle) or b"\0" + needle in data):
            try:
                proc = psutil.Process(pid)
                if proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(proc)
            except psutil.Error:
                continue
    return found


def zombie_exit_status(pid: int) -> int | None:
    """The wait status of a process that has ended but not been reaped yet (field 52 of /proc/PID/stat), or None.

    A rank's parent (deepspeed's launch.py polls once a second) reaps it a moment after it dies; reading the
    zombie in that moment tells how the rank ended even though the supervisor is not its parent.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()
    # fields[0] is field 3 (state); exit_code is field 52.
    if not fields or fields[0] != "Z" or len(fields) < 50:
        return None
    try:
        return int(fields[49])
    except ValueError:
        return None


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def describe_wait_status(status: int) -> tuple[int, str]:
    """(Python-style return code: negative = killed by that signal, human text) from a raw waitpid status."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return -sig, f"killed by {signal_name(sig)}"
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else status
    return code, f"exit code {code}"


def describe_returncode(code: int) -> str:
    if code < 0:
        return f"killed by {signal_name(-code)}"
    return f"exit code {code}"


def send(procs: Iterable[psutil.Process], sig: int) -> int:
    """Send `sig` to each process individually (ranks may sit in sessions of their own); returns how many got it."""
    sent = 0
    for proc in procs:
        try:
            proc.send_signal(sig)
            sent += 1
        except (psutil.NoSuchProcess, ProcessLookupError):
            continue
        except psutil.AccessDenied:
            continue
    return sent


def living(procs: Iterable[psutil.Process]) -> list[psutil.Process]:
    alive = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except psutil.Error:
            continue
    return alive


def end_processes(find: Callable[[], list[psutil.Process]], grace_s: float = 5.0,
                  report: Callable[[str], None] | None = None, reap: Callable[[], None] | None = None,
                  first_signal: int = signal.SIGTERM) -> list[psutil.Process]:
    """Blocking: `first_signal` to everything `find` returns, SIGKILL after `grace_s`; returns what is still alive.

    `find` is called again at every step so processes started in the meantime are caught too; `reap` (optional)
    collects exited children so they do not linger as zombies.
    """
    say = report or (lambda _text: None)
    procs = living(find())
    if not procs:
        return []
    say(f"sent {signal_name(first_signal)} to {send(procs, first_signal)} process(es)")
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if reap:
            reap()
        procs = living(find())
        if not procs:
            return []
        send(procs, first_signal)  # newcomers get it too; repeating it is harmless for the others
        time.sleep(0.1)
    for _attempt in range(3):
        procs = living(find())
        if not procs:
            return []
        say(f"sent SIGKILL to {send(procs, signal.SIGKILL)} process(es) still alive after {grace_s:g} s")
        end = time.monotonic() + 5.0
        while time.monotonic() < end:
            if reap:
                reap()
            if not living(procs):
                break
            time.sleep(0.05)
    return living(find())
