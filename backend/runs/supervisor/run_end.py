"""The end of a run, for the supervisor: make sure nothing of it remains (its process tree, processes carrying its
marker, GPUs still listing its PIDs), free what DeepSpeed's CPU collectives leave in /dev/shm, gather the evidence
(how every rank and the launcher ended, the log's tail, OOM kills, memory limits and peaks, stall stacks, the
scheduler's word) and write the final state with its diagnosis.

A part of the Supervisor (supervisor.py; it inherits RunEnd), split out along the seam its docstring named: these
methods read the state the supervisor's loop kept, declared below, and change nothing of it but the tracked ranks'
names.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psutil

from traindeck.backend.core.fileio import atomic_write_text
from traindeck.backend.runs import processes as procs
from traindeck.backend.runs.diagnosis.cgroups import MemoryLimit, memory_limit
from traindeck.backend.runs.diagnosis.diagnose import Evidence, ProcessEnd, diagnose, evidence_to_json
from traindeck.backend.runs.diagnosis.evidence import (
    kernel_oom_kills,
    launcher_spawned_ranks,
    log_tail,
    oom_kill_counters,
)
from traindeck.backend.runs.diagnosis.scheduler_end import read_scheduler_end
from traindeck.backend.runs.record.launch_settings import launch_settings
from traindeck.backend.runs.supervisor.node_diagnosis import remote_ends, with_nodes
from traindeck.backend.runs.supervisor.shm_leftovers import free_buffers

if TYPE_CHECKING:
    import subprocess

    from traindeck.backend.runs.diagnosis.stall import StallWatch
    from traindeck.backend.runs.record.layout import RunDir
    from traindeck.backend.runs.supervisor.loss_guard import Watchdog
    from traindeck.backend.runs.supervisor.output_drain import OutputFollower
    from traindeck.backend.runs.supervisor.process import Instructions, SafeStore
    from traindeck.backend.runs.supervisor.stop_sequence import StopSequence

logger = logging.getLogger("traindeck.supervisor")


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



class RunEnd:
    # The supervisor's state these methods read (set in Supervisor.__init__ and its loop).
    run_id: str
    run_dir: RunDir
    spec: Instructions
    store: SafeStore
    tracked: dict[int, TrackedProcess]
    _zombies_unseen: dict[int, tuple[float, int | None]]
    sentinel: subprocess.Popen[bytes] | None
    stop: StopSequence | None
    launcher_returncode: int | None
    oom_before: dict[str, int]
    cgroups: dict[tuple[int, str], int | None]
    rendezvous: set[tuple[str, str]]
    boot_s_at_start: float | None
    recorder: Any
    watchdog: Watchdog
    stall: StallWatch
    follower: OutputFollower
    _reap: Callable[[], None]
    _save_processes: Callable[[], None]

    def _free_shared_memory(self) -> None:
        """DeepSpeed's CPU collectives never unlink their /dev/shm buffers (shm_leftovers.py): free this run's."""
        removed, freed = free_buffers(self.rendezvous)
        if removed:
            self.store.add_event(self.run_id, "shm_freed", f"removed {removed} shared-memory buffer(s) DeepSpeed's "
                                 f"CPU collectives leave in /dev/shm ({freed / 2**20:.0f} MiB of RAM)")

    def _confirm_nothing_remains(self) -> list[psutil.Process]:
        def find() -> list[psutil.Process]:
            sentinel = self.sentinel.pid if self.sentinel is not None else None
            found = {p.pid: p for p in procs.living(procs.descendants(os.getpid())) if p.pid != sentinel}
            for proc in procs.marked_processes(self.run_id, exclude=[sentinel] if sentinel else []):
                found.setdefault(proc.pid, proc)
            return list(found.values())

        leftovers = find()
        if leftovers:
            self.store.add_event(self.run_id, "leftovers",
                                 f"{len(leftovers)} process(es) of the run outside its tree: ending them")
            leftovers = procs.end_processes(find, grace_s=3.0, reap=self._reap)
        gpus = _gpu_holders(set(self.tracked))  # none, these PIDs, or cannot tell (and why)
        text = f"nothing of the run remains ({len(self.tracked)} process(es) seen in all)"
        kind = "confirmed"
        if gpus.pids:
            text, kind = f"GPUs still list pids {sorted(gpus.pids)} of the run", "leftovers"
        elif leftovers:
            text, kind = f"{len(leftovers)} process(es) of the run are still alive", "leftovers"
        elif gpus.pids is None:
            text = (f"no process of the run remains ({len(self.tracked)} seen in all); whether GPUs still hold "
                    f"memory for it is unknown: {gpus.unknown}")
            kind = "unconfirmed"
        self.store.add_event(self.run_id, kind, text)
        return leftovers

    def _name_ranks_from_launcher_log(self) -> None:
        """Ranks the scans could not name (dead within a scan, or before their RANK was readable), named from
        DeepSpeed's launch.py log: without them the first failure would be blamed on a rank that was ended after it."""
        changed = False
        for pid, rank in launcher_spawned_ranks(self.run_dir.output).items():
            tracked = self.tracked.get(pid)
            if tracked is not None:
                if tracked.role == "helper":
                    tracked.role, tracked.rank, changed = "rank", rank, True
                continue
            seen = self._zombies_unseen.get(pid)  # never tracked, so never watched: at best seen as a zombie
            starts = [t.started for t in self.tracked.values() if t.role in ("rank", "launcher")]
            # Never seen alive: it ended within one scan of starting, so before any rank that was seen.
            when = seen[0] if seen is not None else (min(starts) if starts else time.time())
            code = procs.describe_wait_status(seen[1])[0] if seen is not None and seen[1] is not None else None
            self.tracked[pid] = TrackedProcess(pid, when, "?", "rank", rank, code, when)
            changed = True
        if changed:
            self._save_processes()

    def _evidence(self) -> Evidence:
        self._name_ranks_from_launcher_log()
        ends = [ProcessEnd(t.pid, t.role, t.rank, t.ended_at or time.time(), t.returncode)
                for t in self.tracked.values() if t.role in ("launcher", "rank") and t.ended_at is not None]
        tail = log_tail(self.run_dir.output, max_bytes=1 << 20, max_lines=2000)
        ends += remote_ends(self.run_dir.path, tail)  # other nodes' ranks, as their agents saw them end
        after = oom_kill_counters()
        deltas = [after[k] - self.oom_before[k] for k in after if k in self.oom_before]
        our_pids = set(self.tracked)
        kernel = kernel_oom_kills(since_boot_s=self.boot_s_at_start)
        memory = self._resource_summary()
        limit, cgroup_kills = self._memory_limit()
        return Evidence(
            launcher_returncode=self.launcher_returncode,
            ends=ends,
            log_tail=tail,
            stop_requested=self.stop is not None,
            stop_detail=self.stop.detail if self.stop is not None else "",
            oom_kills_during_run=max(deltas) if deltas else None,
            kernel_oom_pids={pid: text for pid, text in (kernel or {}).items() if pid in our_pids},
            kernel_log_readable=kernel is not None,
            peak_rank_rss=memory.get("peak_ranks_rss_bytes"),
            total_ram=memory.get("ram_total_bytes") or psutil.virtual_memory().total,
            min_available_ram=memory.get("min_host_available_bytes"),
            memory_limit=limit,
            cgroup_oom_kills_during_run=cgroup_kills,
            settings=launch_settings(self.run_dir),
            stall_stacks=self.stall.hang_stacks(self.follower.last_progress_change),
            scheduler_end=read_scheduler_end(self.run_dir.path),
        )

    def _memory_limit(self) -> tuple[MemoryLimit | None, int | None]:
        """The tightest memory limit over the run's ranks (and launcher), with its OOM kills during the run."""
        best: tuple[MemoryLimit, int | None] | None = None
        for (version, path), before in self.cgroups.items():
            limit = memory_limit(version, path)
            if limit is None:
                continue
            kills = limit.oom_kills - before if limit.oom_kills is not None and before is not None else None
            if best is None or (limit.limit_bytes is not None and (
                    best[0].limit_bytes is None or limit.limit_bytes < best[0].limit_bytes)):
                best = (limit, kills)
        return best if best is not None else (None, None)

    def _resource_summary(self) -> Mapping[str, Any]:  # a ResourceSummary, or {}
        """Memory peaks from the resource recorder (empty when it did not run)."""
        if self.recorder is None:
            return {}
        try:
            from traindeck.backend.monitor.store_read import resource_summary

            return resource_summary(self.spec.store, self.run_id)
        except Exception as exc:  # evidence is best-effort; the diagnosis works without it
            logger.warning("resource summary unavailable: %r", exc)
            return {}

    def _finish(self, evidence: Evidence, state: str) -> None:
        diagnosis = with_nodes(self.run_dir.path, self.watchdog.explain(state, diagnose(evidence)), state)
        try:  # kept for whoever wants to know why the diagnosis says what it says (and for replays)
            atomic_write_text(self.run_dir.evidence, json.dumps(
                {"evidence": evidence_to_json(evidence), "diagnosis": diagnosis.to_json()}, indent=1))
        except OSError as exc:
            logger.warning("could not write %s: %s", self.run_dir.evidence, exc)
        detail = ""
        if state == "stopped" and self.stop is not None:
            detail = f"stopped {self.stop.detail}"
        elif state == "failed":
            detail = diagnosis.summary
        self.store.finish_run(self.run_id, state, exit_code=self.launcher_returncode,
                              diagnosis=None if state == "succeeded" else diagnosis.to_json(), state_detail=detail)
        self.store.add_event(self.run_id, "finished", f"{state}: {diagnosis.summary}")
        self.watchdog.announce_end(state, diagnosis)
        logger.info("run %s %s: %s", self.run_id, state, diagnosis.summary)


def _gpu_holders(pids: set[int]) -> Any:
    """Which of `pids` GPUs still list (NVML, one session polled up to 10 s); never raises."""
    try:
        from traindeck.backend.monitor.gpu_processes import GpuHolders
        from traindeck.backend.monitor.nvml import wait_for_gpus_to_let_go
    except ImportError as exc:
        from types import SimpleNamespace
        return SimpleNamespace(pids=None, unknown=f"the GPU check is unavailable: {exc}")
    try:
        return wait_for_gpus_to_let_go(pids)
    except Exception as exc:  # noqa: BLE001 - the end-of-run check reports, it never fails a run
        return GpuHolders(None, f"the GPU check failed: {exc!r}")
