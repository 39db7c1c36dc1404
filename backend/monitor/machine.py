"""The whole machine's processes, as htop and nvitop list them: user, CPU %, RSS, GPU memory, command, and which
traindeck run each belongs to.

Cheap by construction, because a page may show it for hours (a snapshot every 2 s at most, on the sampling thread):
- on Linux each process costs one small read per snapshot, /proc/PID/stat (CPU time, RSS, parent, start time),
  with os.read; CPU % is measured against the same process's previous snapshot (htop keeps its process structs
  between refreshes for the same reason). Elsewhere psutil.Process objects are kept between snapshots and read
  inside oneshot();
- what cannot change for one process (user, command line, its run) is read once per PID and start time: the
  environment (/proc/PID/environ, where the run marker is) is the expensive read, and a recycled PID has another
  start time, so it is read again;
- kernel threads are left out, as htop does by default: they have no command, user memory or run.

A zombie (ended, not yet reaped by its parent) and a process in the middle of exiting hold no memory: their RSS is
None (a viewer shows "-"), not a misleading 0 B. `command` is what a table shows: the program's basename and its
arguments, a script run by an interpreter named by its basename too (`python -u train.py --deepspeed ...`), since
nearly every row of a training machine starts with the same long interpreter path.

A run's processes carry TRAINDECK_RUN_ID=<run id> in their environment (the launcher's, inherited by every rank
and helper; see backend/runs/processes.py, a floor above this package). Other users' environments cannot be read:
their run is None, which is right, since traindeck only starts runs as the person using it.
"""

from __future__ import annotations

import os
import pwd
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psutil

from traindeck.backend.core import procfs
from traindeck.backend.monitor.snapshots import MachineProcess, MachineSnapshot

RUN_MARKER = "TRAINDECK_RUN_ID"  # backend/runs/processes.MARKER; tests/unit check the two agree
MACHINE_EVERY_S = 2.0  # the most often a viewer should take a snapshot (what htop refreshes at by default is 1.5 s)

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_PF_KTHREAD = 0x00200000  # a kernel thread (the flags field of /proc/PID/stat)
_CMDLINE_CHARS = 400


@dataclass(slots=True)
class _Known:
    """What one process (a PID and its start time) does not change, read once, and its previous CPU reading."""

    start: float  # start time: clock ticks since boot (Linux) or psutil's create_time
    user: str
    name: str
    cmdline: str
    run_id: str | None
    command: str = ""
    uid: int | None = None
    proc: psutil.Process | None = None  # without /proc only
    started_at: float | None = None  # Unix time it started
    last_cpu: tuple[float, float] | None = None  # (monotonic time, CPU seconds) at the previous snapshot


_BOOT: list[float] = []


def _boot_time() -> float:
    """When the machine booted (Unix time), read once: /proc's start times count from it."""
    if not _BOOT:
        _BOOT.append(psutil.boot_time())
    return _BOOT[0]


def _user(uid: int, cache: dict[int, str]) -> str:
    name = cache.get(uid)
    if name is None:
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:  # a UID without a passwd entry (a container's): shown as the number
            name = str(uid)
        cache[uid] = name
    return name


def _run_in(environ: bytes) -> str | None:
    """The run marker's value in a NUL-separated environment block, or None."""
    key = RUN_MARKER.encode() + b"="
    at = environ.find(key)
    while at > 0 and environ[at - 1] != 0:  # inside another variable's value: look further
        at = environ.find(key, at + 1)
    if at < 0:
        return None
    end = environ.find(b"\0", at)
    return environ[at + len(key): end if end >= 0 else None].decode("utf-8", "replace") or None


def _one_line(parts: Sequence[str]) -> str:
    line = " ".join(" ".join(parts).split())  # one line, whatever `-c` code holds
    return line[: _CMDLINE_CHARS - 1] + "…" if len(line) > _CMDLINE_CHARS else line


_INTERPRETERS = ("python", "pypy", "bash", "sh", "zsh", "dash", "perl", "ruby", "node", "uv", "accelerate",
                 "torchrun", "deepspeed")
_TAKES_VALUE = frozenset({"-W", "-X", "-Q"})  # interpreter options whose value is the next argument


def short_command(argv: Sequence[str]) -> str:
    """The program's basename and its arguments, on one line: `/venv/bin/python -u /a/b/train.py --x` reads
    `python -u train.py --x`. After an interpreter (python, bash, torchrun...) the script's path is cut to its
    basename too; `-m module` and `-c code` stay as they are, and so does every other argument."""
    if not argv or not argv[0]:
        return ""
    program = os.path.basename(argv[0].rstrip("/")) or argv[0]
    parts = [program, *argv[1:]]
    if program.rstrip("0123456789.").removesuffix("-") in _INTERPRETERS:
        index = 1
        while index < len(parts):
            arg = parts[index]
            if arg in ("-m", "-c") or arg == "--":
                break
            if arg.startswith("-"):
                index += 2 if arg in _TAKES_VALUE else 1
                continue
            if "/" in arg:
                parts[index] = os.path.basename(arg.rstrip("/")) or arg
            break
    return _one_line(parts)


class MachineProcessSampler:
    """Takes `MachineSnapshot`s of every (user-space) process; CPU % is over the time since the previous one.

    `sample(gpu_memory, gpu_use)` takes each PID's GPU memory from `gpu_memory` (bytes by PID, from NVML's process
    lists: `gpu_processes.gpu_memory_by_pid`), None where NVML cannot tell, and the GPUs it is on with its SM use
    from `gpu_use` (`gpu_processes.gpu_use_by_pid`)."""

    def __init__(self) -> None:
        self._known: dict[int, _Known] = {}
        self._users: dict[int, str] = {}
        self._has_proc = os.path.isdir(f"/proc/{os.getpid()}")

    def sample(self, gpu_memory: Mapping[int, int] | None = None,
               gpu_use: Mapping[int, tuple[tuple[int, ...], float | None]] | None = None) -> MachineSnapshot:
        started = time.perf_counter()
        now = time.time()
        readings = self._read_proc() if self._has_proc else self._read_psutil()
        processes = []
        seen = set()
        for pid, ppid, known, cpu_seconds, rss, zombie in readings:
            seen.add(pid)
            tick = time.monotonic()
            cpu: float | None = None
            if known.last_cpu is not None and tick > known.last_cpu[0]:
                cpu = max(0.0, cpu_seconds - known.last_cpu[1]) / (tick - known.last_cpu[0]) * 100.0
            known.last_cpu = (tick, cpu_seconds)
            processes.append(MachineProcess(
                pid=pid, ppid=ppid, user=known.user, name=known.name, cmdline=known.cmdline, cpu_percent=cpu,
                # A user-space process that lives holds some memory: 0 is a zombie's or an exiting one's "none".
                rss_bytes=rss if rss and not zombie else None,
                gpu_memory_bytes=None if gpu_memory is None else gpu_memory.get(pid),
                run_id=known.run_id, command=known.command, zombie=zombie, uid=known.uid,
                gpu_indices=use[0] if (use := (gpu_use or {}).get(pid)) else (),
                gpu_sm_percent=use[1] if use else None, started_at=known.started_at))
        for gone in set(self._known) - seen:
            del self._known[gone]
        return MachineSnapshot(t=now, processes=tuple(processes), cpu_count=psutil.cpu_count() or 1,
                               gpu_memory_known=gpu_memory is not None, took_s=time.perf_counter() - started)

    # --- Linux: /proc read directly ---

    def _read_proc(self) -> Iterator[tuple[int, int, _Known, float, int, bool]]:
        try:
            pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
        except OSError:
            return
        for pid in pids:
            try:
                data = procfs.read_small(f"/proc/{pid}/stat")
                close = data.rfind(b")")
                rest = data[close + 2:].split()  # field n of proc(5) is rest[n - 3]
                if int(rest[6]) & _PF_KTHREAD:
                    continue
                start = float(rest[19])
                known = self._known.get(pid)
                if known is None or known.start != start:
                    known = self._learn(pid, start, data[data.find(b"(") + 1: close].decode("utf-8", "replace"))
                    self._known[pid] = known
                yield (pid, int(rest[1]), known, (int(rest[11]) + int(rest[12])) / _CLOCK_TICKS,
                       int(rest[21]) * _PAGE_BYTES, rest[0] in (b"Z", b"X"))
            except (OSError, ValueError, IndexError):
                continue  # ended between the listing and the read

    def _learn(self, pid: int, start: float, name: str) -> _Known:
        uid: int | None
        try:
            uid = os.stat(f"/proc/{pid}").st_uid
            user = _user(uid, self._users)
        except OSError:
            uid, user = None, "?"
        try:
            argv = procfs.read_small(f"/proc/{pid}/cmdline").decode("utf-8", "replace").rstrip("\0").split("\0")
        except OSError:
            argv = []
        cmdline = _one_line(argv) or name
        try:
            run_id = _run_in(procfs.read_small(f"/proc/{pid}/environ"))
        except OSError:  # another user's process: its environment is not ours to read
            run_id = None
        return _Known(start, user, name, cmdline, run_id, short_command(argv) or name, uid,
                      started_at=_boot_time() + start / _CLOCK_TICKS)

    # --- elsewhere: psutil ---

    def _read_psutil(self) -> Iterator[tuple[int, int, _Known, float, int, bool]]:
        for proc in psutil.process_iter():
            try:
                with proc.oneshot():
                    start = proc.create_time()
                    known = self._known.get(proc.pid)
                    if known is None or known.start != start:
                        known = self._learn_psutil(proc, start)
                        self._known[proc.pid] = known
                    times = proc.cpu_times()
                    zombie = proc.status() == psutil.STATUS_ZOMBIE
                    yield (proc.pid, proc.ppid(), known, times.user + times.system, proc.memory_info().rss,
                           zombie)
            except psutil.Error:
                continue

    @staticmethod
    def _learn_psutil(proc: psutil.Process, start: float) -> _Known:
        name = proc.name()
        try:
            user = proc.username()
        except (psutil.AccessDenied, KeyError):
            user = "?"
        try:
            argv = proc.cmdline()
        except (psutil.AccessDenied, psutil.ZombieProcess):
            argv = []
        cmdline = _one_line(argv) or name
        try:
            uid: int | None = proc.uids().real
        except (psutil.AccessDenied, AttributeError):
            uid = None
        try:
            run_id = proc.environ().get(RUN_MARKER) or None
        except (psutil.AccessDenied, psutil.ZombieProcess, OSError):
            run_id = None
        return _Known(start, user, name, cmdline, run_id, short_command(argv) or name, uid, proc=proc,
                      started_at=start)


# ------------------------------------------------------------------------------------------- the table's model
# The Processes tab's columns in order: "gpu" is its GPU memory, "gpus" the GPUs it is on, "sm" its SM use,
# "time" how long it has run.
PROCESS_SORT_KEYS = ("pid", "user", "cpu", "rss", "gpus", "sm", "gpu", "run", "time", "command")


class ProcessTable:
    """The process table as a viewer shows it, without the viewer: the newest snapshot, filtered by a text and
    sorted by a column, with the watched run's processes first among equals. A Qt model reads `rows`.

    `filter_text` matches (case-insensitively) the PID, user, command or run id; several words must all match.
    Sorting a number column puts unknown values (None) last in either order.

    With `tree` on, children follow their parent (a launcher, then its ranks), siblings in the column's order;
    `depths[i]` is how deep `rows[i]` sits (0: its parent is not among the rows)."""

    def __init__(self) -> None:
        self.snapshot: MachineSnapshot | None = None
        self.sort_key = "cpu"
        self.descending = True
        self.filter_text = ""
        self.watched_run: str | None = None
        self.tree = False
        self.rows: list[MachineProcess] = []
        self.depths: list[int] = []

    def show(self, snapshot: MachineSnapshot) -> None:
        self.snapshot = snapshot
        self._build()

    def sort_by(self, key: str, descending: bool) -> None:
        if key not in PROCESS_SORT_KEYS:
            raise ValueError(f"no column {key!r}; one of {', '.join(PROCESS_SORT_KEYS)}")
        self.sort_key, self.descending = key, descending
        self._build()

    def set_filter(self, text: str) -> None:
        self.filter_text = text
        self._build()

    def watch(self, run_id: str | None) -> None:
        self.watched_run = run_id
        self._build()

    def set_tree(self, tree: bool) -> None:
        self.tree = tree
        self._build()

    def find(self, pid: int) -> MachineProcess | None:
        """The process with this PID in the newest snapshot (shown or filtered out), or None."""
        for process in self.snapshot.processes if self.snapshot is not None else ():
            if process.pid == pid:
                return process
        return None

    def descendants(self, pid: int) -> list[MachineProcess]:
        """Its children, theirs, and so on, in the newest snapshot: parents before children."""
        children: dict[int, list[MachineProcess]] = {}
        for process in self.snapshot.processes if self.snapshot is not None else ():
            if process.pid != process.ppid:
                children.setdefault(process.ppid, []).append(process)
        out: list[MachineProcess] = []
        queue = [pid]
        seen = {pid}
        while queue:
            for kid in children.get(queue.pop(0), ()):
                if kid.pid not in seen:
                    seen.add(kid.pid)
                    out.append(kid)
                    queue.append(kid.pid)
        return out

    def watched(self, process: MachineProcess) -> bool:
        return self.watched_run is not None and process.run_id == self.watched_run

    def _build(self) -> None:
        processes = list(self.snapshot.processes) if self.snapshot is not None else []
        words = self.filter_text.lower().split()
        if words:
            processes = [p for p in processes if all(w in _haystack(p) for w in words)]
        key = self.sort_key
        if key == "run":  # a run's processes together and first, in either order; the runs' order flips
            marked = sorted((p for p in processes if p.run_id is not None), key=lambda p: (p.run_id or "", p.pid),
                            reverse=self.descending)
            processes = marked + sorted((p for p in processes if p.run_id is None), key=lambda p: p.pid)
        elif key in ("pid", "user", "command"):
            text = {"pid": lambda p: (0, "", p.pid), "user": lambda p: (0, p.user.lower(), p.pid),
                    "command": lambda p: (0, (p.command or p.cmdline).lower(), p.pid)}[key]
            processes.sort(key=text, reverse=self.descending)
        else:
            value: Callable[[MachineProcess], Any] = {
                "cpu": lambda p: p.cpu_percent, "rss": lambda p: p.rss_bytes, "gpu": lambda p: p.gpu_memory_bytes,
                "sm": lambda p: p.gpu_sm_percent, "gpus": lambda p: p.gpu_indices or None,
                "time": lambda p: None if p.started_at is None else -p.started_at}[key]  # how long it has run
            known = [p for p in processes if value(p) is not None]
            known.sort(key=lambda p: (value(p), -p.pid), reverse=self.descending)
            processes = known + [p for p in processes if value(p) is None]  # unknown last in either order
        if self.tree:
            self.rows, self.depths = _as_tree(processes)
        else:
            self.rows, self.depths = processes, [0] * len(processes)


def _as_tree(ordered: list[MachineProcess]) -> tuple[list[MachineProcess], list[int]]:
    """`ordered` with each process's children right under it (depth first), siblings kept in their order."""
    shown = {p.pid for p in ordered}
    children: dict[int, list[MachineProcess]] = {}
    roots = []
    for process in ordered:
        if process.ppid in shown and process.ppid != process.pid:
            children.setdefault(process.ppid, []).append(process)
        else:
            roots.append(process)
    rows: list[MachineProcess] = []
    depths: list[int] = []
    stack = [(p, 0) for p in reversed(roots)]
    placed: set[int] = set()
    while stack:
        process, depth = stack.pop()
        if process.pid in placed:  # a parent loop (PIDs reused between reads): each process once
            continue
        placed.add(process.pid)
        rows.append(process)
        depths.append(depth)
        stack.extend((kid, depth + 1) for kid in reversed(children.get(process.pid, ())))
    rows.extend(p for p in ordered if p.pid not in placed)  # in a loop with no root: shown at the top level
    depths.extend(0 for _ in range(len(rows) - len(depths)))
    return rows, depths


def _haystack(p: MachineProcess) -> str:
    return f"{p.pid} {p.user} {p.cmdline} {p.command} {p.run_id or ''}".lower()
