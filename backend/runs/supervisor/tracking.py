"""The run's processes as the supervisor sees them: which are alive, which is the launcher, which are ranks (and
their memory cgroups and rendezvous), and when and how each ended.

The supervisor's loop calls `scan` 4x a second and `ended` for every child it reaps; the stopper and the end of the
run read what is kept here. How an end is worded during a stop comes from the stopper, through `explain_end`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psutil

from traindeck.backend.runs import processes as procs
from traindeck.backend.runs.diagnosis.cgroups import memory_limit, process_cgroup
from traindeck.backend.runs.supervisor.exits import ExitWatcher
from traindeck.backend.runs.supervisor.instructions import SafeStore

CLASSIFY_FOR_S = 10.0
THOROUGH_SCAN_S = 2.0


@dataclass
class TrackedProcess:
    """One process of the run as the supervisor saw it: its role (launcher, rank, helper) and how it ended."""

    pid: int
    started: float
    name: str
    role: str
    rank: int | None
    returncode: int | None = None
    ended_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "started": self.started, "name": self.name, "role": self.role, "rank": self.rank,
                "returncode": self.returncode, "ended_at": self.ended_at}


@dataclass
class LauncherEnd:
    """How and when the launcher ended (both None while it runs), as the supervisor reaped it."""

    returncode: int | None = None
    ended_wall: float | None = None  # time.time() of the end: a late stop request is compared with it


class ProcessTracker:
    """The run's processes: `scan` lists the living ones and notes newcomers and ends; `ended` records a reaped one.

    `exclude` names the one process of the tree that is not the run's (the sentinel), `explain_end` adds a word to
    a rank's end (a signal the stop did not send), `members` lists the run's cgroup (run_cgroup.py; none without
    one): a process there is the run's even where the tree walk misses it."""

    def __init__(self, store: SafeStore, run_id: str, *, exclude: Callable[[], int | None],
                 explain_end: Callable[[int | None], str], members: Callable[[], list[int]] = list) -> None:
        self.store, self.run_id = store, run_id
        self._exclude, self._explain_end, self._members = exclude, explain_end, members
        self.tracked: dict[int, TrackedProcess] = {}
        self.exits = ExitWatcher()
        self.zombies_unseen: dict[int, tuple[float, int | None]] = {}  # first seen dead: (when, wait status)
        self.cgroups: dict[tuple[int, str], int | None] = {}  # the ranks' memory cgroups -> OOM kills at first sight
        self.rendezvous: set[tuple[str, str]] = set()  # the ranks' (MASTER_ADDR, MASTER_PORT): their /dev/shm buffers
        self._procs: dict[int, tuple[psutil.Process, int]] = {}  # pid -> (process, start ticks) seen last scan
        self._last_thorough = 0.0

    def add_launcher(self, launcher: psutil.Process) -> None:
        self.track(launcher, role="launcher")
        self._note_cgroup(launcher.pid)
        stat = procs.read_stat(launcher.pid)
        if stat is not None:
            self._procs[launcher.pid] = (launcher, stat[2])

    def ended(self, pid: int, code: int | None) -> None:
        tracked = self.tracked.get(pid)
        if tracked is None or tracked.ended_at is not None:
            return
        tracked.ended_at = time.time()
        seen = self.exits.ended(pid)
        if seen is not None:  # the exit watcher saw the moment itself, and the status if the loop came too late
            tracked.ended_at = min(tracked.ended_at, seen[0])
            if code is None and seen[1] is not None:
                code = procs.describe_wait_status(seen[1])[0]
        tracked.returncode = code
        if tracked.role == "rank":
            how = procs.describe_returncode(code) if code is not None else "ended"
            self.store.add_event(self.run_id, "rank_exit", f"rank {tracked.rank} (pid {pid}) {how}"
                                 + self._explain_end(code))
        if tracked.role != "helper":
            self.save()

    def track(self, proc: psutil.Process, role: str | None = None) -> None:
        try:
            started = proc.create_time()
            name = proc.name()
        except psutil.Error:
            return
        tracked = TrackedProcess(proc.pid, started, name, role or "helper", None)
        self.tracked[proc.pid] = tracked
        self.exits.watch(proc.pid)
        if role is None:
            self._classify(tracked, proc)
        elif role != "helper":
            self.save()

    def _classify(self, tracked: TrackedProcess, proc: psutil.Process) -> None:
        """Find out whether a process is a rank (see procs.rank_number: the topmost process with its RANK).
        Asked again during a process's first seconds: between fork and exec /proc/PID/environ still shows the
        parent's environment."""
        try:
            parent = proc.ppid()
        except psutil.Error:
            parent = None
        rank = procs.rank_number(proc.pid, parent)
        if rank is None:
            return
        # One live process per rank: a newcomer with the RANK of a live rank is that rank's child whose parent
        # left (a compiler of an op build orphaned to us), not a second rank.
        if any(t.role == "rank" and t.rank == rank and t.ended_at is None and t.pid != proc.pid
               for t in self.tracked.values()):
            return
        tracked.role, tracked.rank = "rank", rank
        try:
            tracked.name = proc.name()
        except psutil.Error:
            pass
        self._note_cgroup(proc.pid)
        addr, port = procs.environ_value(proc.pid, "MASTER_ADDR"), procs.environ_value(proc.pid, "MASTER_PORT")
        if addr and port:
            self.rendezvous.add((addr, port))
        self.save()

    def _note_cgroup(self, pid: int) -> None:
        """The memory cgroup a rank lives in and its OOM-kill counter now (to count the kills during the run)."""
        found = process_cgroup(pid)
        if found is None or found in self.cgroups:
            return
        limit = memory_limit(*found)
        self.cgroups[found] = limit.oom_kills if limit is not None else None

    def records(self) -> list[dict[str, Any]]:
        """The launcher's and the ranks' records, as the run store keeps them."""
        return [t.to_json() for t in self.tracked.values() if t.role in ("launcher", "rank")]

    def save(self) -> None:
        self.store.update_run(self.run_id, processes=self.records())

    def scan(self) -> list[psutil.Process]:
        """The run's living processes (the sentinel excluded); notes new ones and ends of tracked ones.

        Runs 4x a second, so it reads /proc directly: a quick walk every tick, a thorough one every 2 s."""
        sentinel = self._exclude()
        now = time.monotonic()
        thorough = now - self._last_thorough >= THOROUGH_SCAN_S
        if thorough:
            self._last_thorough = now
        pids = procs.descendant_pids(os.getpid(), thorough=thorough)
        if thorough:
            pids += self._members()
        else:  # keep what the thorough walk found below other threads until it is gone
            pids += [pid for pid in self._procs if pid not in pids]
        alive: list[psutil.Process] = []
        seen: set[int] = set()
        for pid in pids:
            if pid == sentinel or pid in seen:
                continue
            stat = procs.read_stat(pid)
            if stat is None:
                continue
            state, _ppid, start_ticks = stat
            seen.add(pid)
            known = self._procs.get(pid)
            if known is None or known[1] != start_ticks:
                if state == "Z":  # lived less than a scan; if the launcher's log names it a rank, this is its end
                    if pid not in self.tracked:
                        self.zombies_unseen.setdefault(pid, (time.time(), procs.zombie_exit_status(pid)))
                    continue
                try:
                    proc = psutil.Process(pid)
                except psutil.Error:
                    continue
                self._procs[pid] = (proc, start_ticks)
                previous = self.tracked.get(pid)
                if previous is None or previous.ended_at is not None or abs(previous.started - proc.create_time()) > 0.5:
                    self.track(proc)
            else:
                proc = known[0]
            tracked = self.tracked.get(pid)
            if tracked is not None and tracked.role == "helper" and time.time() - tracked.started < CLASSIFY_FOR_S:
                self._classify(tracked, proc)
            if state == "Z":
                if tracked is not None and tracked.ended_at is None and tracked.role == "rank":
                    raw = procs.zombie_exit_status(pid)
                    self.ended(pid, procs.describe_wait_status(raw)[0] if raw is not None else None)
                continue
            alive.append(proc)
        for pid in [pid for pid in self._procs if pid not in seen]:
            del self._procs[pid]
        for pid, tracked in list(self.tracked.items()):
            if pid not in seen and tracked.ended_at is None and tracked.role != "launcher":
                self.ended(pid, None)  # reaped by its own parent before we saw how it ended
        return alive

    def close(self) -> None:
        self.exits.close()
