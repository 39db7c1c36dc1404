"""A run's processes: everything under its launcher, with ranks told apart by their RANK environment variable.

Cheap by construction, because it runs every second for days:
- on Linux each process costs one small read per sample, /proc/PID/stat (CPU time, RSS, parent), with
  os.read: about a quarter of what the same numbers cost through psutil. What moves slowly (VmLck from
  /proc/PID/status, I/O counters from /proc/PID/io) is read every `slow_every_s`. CPU % is measured against the
  previous sample of the same process. Elsewhere psutil.Process objects, kept between samples, are read inside
  oneshot();
- new children are found through /proc/PID/task/PID/children of the known processes (every `walk_every_s`)
  instead of scanning every process on the machine; a full scan (every `rescan_every_s`) still catches
  children started from a thread other than the main one, which that file does not list. A process that ends
  is dropped at the next sample, also while it waits as a zombie for its parent to reap it;
- what cannot change (name, command line, rank) is read once per process.
"""

from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import dataclass

import psutil

from traindeck.backend.core import procfs
from traindeck.backend.monitor.snapshots import RunProcess, RunSnapshot

_CMDLINE_CHARS = 160


@dataclass(slots=True)
class _Tracked:
    proc: psutil.Process
    name: str
    cmdline: str
    env_rank: int | None  # RANK as found in the environment (helpers inherit their rank's)
    rank: int | None  # set only on the process that *is* the rank, not on its children
    local_rank: int | None
    role: str
    cuda_visible_devices: str | None = None
    cuda_device_order: str | None = None
    last_cpu: tuple[float, float] | None = None  # (monotonic time, CPU seconds) at the previous sample
    slow_read_at: float = -float("inf")  # when VmLck and the I/O counters were last read
    locked: int | None = None
    read_bytes: int | None = None
    write_bytes: int | None = None


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _field(data: bytes, key: bytes) -> int | None:
    """The number after `key` ("VmRSS:", "read_bytes:") in a /proc key-value file, or None if absent."""
    at = data.find(key)
    if at < 0:
        return None
    end = data.find(b"\n", at + len(key))
    parts = data[at + len(key) : end if end >= 0 else None].split()
    if not parts:
        return None
    return int(parts[0]) * (1024 if len(parts) > 1 and parts[1] == b"kB" else 1)


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _read_stat(pid: int) -> tuple[int, float, int]:
    """(parent PID, CPU seconds used so far: user + system, RSS bytes) from /proc/PID/stat. Raises OSError when the
    process is gone or has exited: a zombie (a rank its launcher has not reaped yet) reads as 0 bytes, which charted
    as the run's memory would end its lines at 0 instead of at their last figure."""
    rest = procfs.stat_fields(pid)  # field n of proc(5) is rest[n - 3]
    if rest[0] in (b"Z", b"X"):
        raise ProcessLookupError(pid, "exited")
    return int(rest[1]), (int(rest[11]) + int(rest[12])) / _CLOCK_TICKS, int(rest[21]) * _PAGE_BYTES


def _read_locked(pid: int) -> int | None:
    """VmLck (mlock()ed memory) in bytes from /proc/PID/status; raises OSError when the process is gone."""
    return _field(procfs.read_small(f"/proc/{pid}/status"), b"\nVmLck:")


def _read_io(pid: int) -> tuple[int | None, int | None]:
    """(read_bytes, write_bytes) from /proc/PID/io: storage I/O, not page-cache hits; unreadable for other users."""
    try:
        data = procfs.read_small(f"/proc/{pid}/io")
    except PermissionError:
        return None, None
    return _field(data, b"\nread_bytes:"), _field(data, b"\nwrite_bytes:")


class RunProcessSampler:
    """Samples the process tree under `root_pid` (the launcher); see the module docstring for the costs."""

    def __init__(
        self, root_pid: int, *, walk_every_s: float = 3.0, rescan_every_s: float = 30.0, slow_every_s: float = 5.0
    ) -> None:
        self.root_pid = root_pid
        self._walk_every_s = walk_every_s
        self._rescan_every_s = rescan_every_s
        self._slow_every_s = slow_every_s
        self._last_walk = -float("inf")
        self._tracked: dict[int, _Tracked] = {}
        self._parent: dict[int, int] = {}  # known tree: pid -> parent pid (root maps to its own parent)
        self._last_scan = -float("inf")
        self._use_children_file = procfs.HAS_CHILDREN_FILE
        self._has_proc = os.path.exists(f"/proc/{os.getpid()}/status")

    def sample(self) -> RunSnapshot:
        now = time.time()
        pids = self._discover()
        processes: list[RunProcess] = []
        for pid in pids:
            tracked = self._track(pid)
            if tracked is None:
                continue
            reading = self._read(pid, tracked)
            if reading is not None:
                processes.append(reading)
        live = {p.pid for p in processes}
        for gone in set(self._tracked) - live:
            del self._tracked[gone]
        return RunSnapshot(t=now, root_pid=self.root_pid, processes=tuple(processes))

    # --- tree discovery ---

    def _discover(self) -> list[int]:
        """The root and its descendants, parents before children."""
        root_alive = os.path.exists(f"/proc/{self.root_pid}") if self._has_proc else psutil.pid_exists(self.root_pid)
        if not root_alive:
            self._parent.clear()
            return []
        monotonic = time.monotonic()
        if not self._use_children_file:
            try:
                kids = psutil.Process(self.root_pid).children(recursive=True)
            except psutil.Error:
                return []
            self._parent = {self.root_pid: 0}
            for kid in kids:
                try:
                    self._parent[kid.pid] = kid.ppid()
                except psutil.Error:
                    continue
        elif monotonic - self._last_scan >= self._rescan_every_s:
            self._last_scan = self._last_walk = monotonic
            self._parent = self._full_scan()
        elif monotonic - self._last_walk >= self._walk_every_s:
            self._last_walk = monotonic
            self._walk_children()
        return self._ordered()

    def _full_scan(self) -> dict[int, int]:
        parents = procfs.parent_map()
        children: dict[int, list[int]] = {}
        for pid, ppid in parents.items():
            children.setdefault(ppid, []).append(pid)
        tree = {self.root_pid: parents.get(self.root_pid, 0)}
        queue = deque([self.root_pid])
        while queue:
            for kid in children.get(queue.popleft(), ()):
                if kid not in tree:
                    tree[kid] = parents[kid]
                    queue.append(kid)
        return tree

    def _walk_children(self) -> None:
        """Add children that started since the last look (found through the main thread's children file)."""
        self._parent.setdefault(self.root_pid, 0)
        queue = deque(self._parent)
        seen = set(self._parent)
        while queue:
            pid = queue.popleft()
            for kid in procfs.children(pid):
                if kid not in seen:
                    seen.add(kid)
                    self._parent[kid] = pid
                    queue.append(kid)

    def _ordered(self) -> list[int]:
        children: dict[int, list[int]] = {}
        for pid, ppid in self._parent.items():
            if pid != self.root_pid:
                children.setdefault(ppid, []).append(pid)
        order: list[int] = []
        queue = deque([self.root_pid])
        while queue:
            pid = queue.popleft()
            order.append(pid)
            queue.extend(sorted(children.get(pid, ())))
        # Anything whose parent left the tree (reparented) is dropped by the next full scan; drop it now too.
        for stray in set(self._parent) - set(order):
            del self._parent[stray]
        return order

    # --- per process ---

    def _track(self, pid: int) -> _Tracked | None:
        tracked = self._tracked.get(pid)
        if tracked is not None:
            return tracked
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                name = proc.name()
                try:
                    cmdline = " ".join(" ".join(proc.cmdline()).split())  # one line, whatever `-c` code holds
                except (psutil.AccessDenied, psutil.ZombieProcess):
                    cmdline = name
                try:
                    env = proc.environ()
                except (psutil.AccessDenied, psutil.ZombieProcess, OSError):
                    env = {}
        except psutil.Error:
            self._parent.pop(pid, None)
            return None
        env_rank = _int_or_none(env.get("RANK"))
        parent = self._tracked.get(self._parent.get(pid, -1))
        is_rank = env_rank is not None and pid != self.root_pid and (parent is None or parent.env_rank != env_rank)
        if pid == self.root_pid:
            role = "launcher"
        elif is_rank:
            role = "rank"
        else:
            role = "helper"
        if len(cmdline) > _CMDLINE_CHARS:
            cmdline = cmdline[: _CMDLINE_CHARS - 1] + "…"
        tracked = _Tracked(
            proc=proc,
            name=name,
            cmdline=cmdline or name,
            env_rank=env_rank,
            rank=env_rank if is_rank else None,
            local_rank=_int_or_none(env.get("LOCAL_RANK")) if is_rank else None,
            role=role,
            cuda_visible_devices=env.get("CUDA_VISIBLE_DEVICES"),
            cuda_device_order=env.get("CUDA_DEVICE_ORDER"),
        )
        self._tracked[pid] = tracked
        return tracked

    def _read(self, pid: int, tracked: _Tracked) -> RunProcess | None:
        try:
            if self._has_proc:
                # Straight from /proc: about a quarter of psutil's cost for the same numbers (this runs every second).
                ppid, cpu_seconds, rss = _read_stat(pid)
                if time.monotonic() - tracked.slow_read_at >= self._slow_every_s:
                    tracked.slow_read_at = time.monotonic()
                    tracked.locked = _read_locked(pid)
                    tracked.read_bytes, tracked.write_bytes = _read_io(pid)
                locked, read_bytes, write_bytes = tracked.locked, tracked.read_bytes, tracked.write_bytes
            else:  # no /proc (macOS): psutil has all of it but VmLck
                proc = tracked.proc
                with proc.oneshot():
                    times = proc.cpu_times()
                    cpu_seconds = times.user + times.system
                    ppid, rss, locked = proc.ppid(), proc.memory_info().rss, None
                    try:
                        io = proc.io_counters()
                        read_bytes, write_bytes = io.read_bytes, io.write_bytes
                    except (psutil.AccessDenied, AttributeError):
                        read_bytes = write_bytes = None
        except (psutil.Error, OSError, ValueError, IndexError):
            self._parent.pop(pid, None)  # gone (or a zombie whose files no longer parse)
            return None
        now = time.monotonic()
        cpu_percent: float | None = None
        if tracked.last_cpu is not None and now > tracked.last_cpu[0]:
            cpu_percent = max(0.0, cpu_seconds - tracked.last_cpu[1]) / (now - tracked.last_cpu[0]) * 100.0
        tracked.last_cpu = (now, cpu_seconds)
        return RunProcess(
            pid=pid,
            ppid=ppid,
            name=tracked.name,
            cmdline=tracked.cmdline,
            role=tracked.role,
            rank=tracked.rank,
            local_rank=tracked.local_rank,
            cpu_percent=cpu_percent,
            rss_bytes=rss,
            locked_bytes=locked,
            read_bytes=read_bytes,
            write_bytes=write_bytes,
            cuda_visible_devices=tracked.cuda_visible_devices,
            cuda_device_order=tracked.cuda_device_order,
        )
