"""The end of a run, for the supervisor: make sure nothing of it remains (its process tree, its cgroup, processes
carrying its marker, GPUs still listing its PIDs), free what DeepSpeed's CPU collectives leave in /dev/shm, gather the evidence
(how every rank and the launcher ended, the log's tail, OOM kills, memory limits and peaks, stall stacks, the
scheduler's word) and write the final state with its diagnosis.

`RunEnd` is built by the supervisor when the run starts (it notes the OOM counters and the boot clock then) and
reads the run's processes through `RunProcesses` (the supervisor's process tracker); of the stop it knows only how
it ended the run, of the launcher only its return code.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import psutil

from traindeck.backend.core.fileio import atomic_write_text
from traindeck.backend.core.masking import mask_json
from traindeck.backend.core.paths import disk_full
from traindeck.backend.runs import processes as procs
from traindeck.backend.runs.diagnosis.cgroups import MemoryLimit, memory_limit
from traindeck.backend.runs.diagnosis.diagnose import (
    Diagnosis,
    Evidence,
    ProcessEnd,
    diagnose,
    evidence_to_json,
)
from traindeck.backend.runs.diagnosis.evidence import (
    boot_time_offset,
    free_space_of,
    kernel_gpu_xids,
    kernel_oom_kills,
    launcher_spawned_ranks,
    log_tail,
    oom_kill_counters,
)
from traindeck.backend.runs.diagnosis.scheduler_end import read_scheduler_end
from traindeck.backend.runs.record.folder_record import write_end
from traindeck.backend.runs.record.launch_settings import launch_settings
from traindeck.backend.runs.record.layout import RunDir
from traindeck.backend.runs.supervisor.instructions import SafeStore
from traindeck.backend.runs.supervisor.loss_guard import Watchdog
from traindeck.backend.runs.supervisor.node_diagnosis import remote_ends, with_nodes
from traindeck.backend.runs.supervisor.run_cgroup import RunCgroup
from traindeck.backend.runs.supervisor.shm_leftovers import free_buffers
from traindeck.backend.runs.supervisor.tracking import LauncherEnd, TrackedProcess

logger = logging.getLogger("traindeck.supervisor")


class RunProcesses(Protocol):
    """What the end of a run reads of its processes (the supervisor's ProcessTracker)."""

    tracked: dict[int, TrackedProcess]
    zombies_unseen: dict[int, tuple[float, int | None]]
    cgroups: dict[tuple[int, str], int | None]
    rendezvous: set[tuple[str, str]]

    def save(self) -> None: ...


class RunEnd:
    """Nothing of the run left behind, the evidence and the diagnosis, the final state.

    `sentinel_pid` names the one process of the supervisor's tree that is not the run's, `reap` collects the
    supervisor's children that end while leftovers are ended, `stop_detail` says how a stop ended the run (None
    when none was asked), `secrets` are the values of the run's secret variables: masked, beside credential shapes,
    in the diagnosis and the evidence (an exception's text may quote a token), `cgroup` the run's own cgroup (None
    without one): what is in it is the run's, and only its emptiness proves that nothing of the run remains."""

    def __init__(self, run_dir: RunDir, store: SafeStore, run_id: str, store_path: str, processes: RunProcesses,
                 launcher: LauncherEnd, watchdog: Watchdog, *, sentinel_pid: Callable[[], int | None],
                 reap: Callable[[], None], stop_detail: Callable[[], str | None], secrets: Sequence[str] = (),
                 cgroup: Callable[[], RunCgroup | None] = lambda: None) -> None:
        self.run_dir, self.store, self.run_id, self.store_path = run_dir, store, run_id, store_path
        self._cgroup = cgroup
        self.secrets = list(secrets)
        self.processes, self.launcher, self.watchdog = processes, launcher, watchdog
        self._sentinel_pid, self._reap, self._stop_detail = sentinel_pid, reap, stop_detail
        self.oom_before = oom_kill_counters()
        self.boot_s_at_start = boot_time_offset()
        self.started_at = time.time()

    def free_shared_memory(self) -> None:
        """DeepSpeed's CPU collectives never unlink their /dev/shm buffers (shm_leftovers.py): free this run's."""
        removed, freed = free_buffers(self.processes.rendezvous)
        if removed:
            self.store.add_event(self.run_id, "shm_freed", f"removed {removed} shared-memory buffer(s) DeepSpeed's "
                                 f"CPU collectives leave in /dev/shm ({freed / 2**20:.0f} MiB of RAM)")

    def note_nvme_leftovers(self) -> None:
        """ZeRO-Infinity's swap files outlive the run (DeepSpeed clears them at the next start): say where."""
        from traindeck.backend.launch.builders import nvme_leftovers

        for line in nvme_leftovers(self.run_dir.path):
            self.store.add_event(self.run_id, "nvme_leftovers", line)

    def confirm_nothing_remains(self) -> list[psutil.Process]:
        """Ends what is left of the run and says whether anything remains; returns what could not be ended."""
        cgroup = self._cgroup()

        def find() -> list[psutil.Process]:
            sentinel = self._sentinel_pid()
            found = {p.pid: p for p in procs.living(procs.descendants(os.getpid())) if p.pid != sentinel}
            for proc in procs.marked_processes(self.run_id, exclude=[sentinel] if sentinel else []):
                found.setdefault(proc.pid, proc)
            for pid in cgroup.members() if cgroup is not None else []:
                if pid not in found and pid != sentinel:
                    try:
                        found[pid] = psutil.Process(pid)
                    except psutil.Error:
                        continue
            return procs.living(found.values())

        leftovers = find()
        if leftovers:
            self.store.add_event(self.run_id, "leftovers",
                                 f"{len(leftovers)} process(es) of the run outside its tree: ending them")
            leftovers = procs.end_processes(find, grace_s=3.0, reap=self._reap)
        emptied, still_held = "", False
        if cgroup is not None:
            if cgroup.empty_out(timeout_s=10.0, reap=self._reap):
                emptied = "; its cgroup is empty" + (" (and removed)" if cgroup.remove() else "")
            else:
                leftovers, still_held = find(), True
        tracked = self.processes.tracked
        gpus = _gpu_holders(set(tracked))  # none, these PIDs, or cannot tell (and why)
        text = f"nothing of the run remains ({len(tracked)} process(es) seen in all){emptied}"
        kind = "confirmed"
        if gpus.pids:
            text, kind = f"GPUs still list pids {sorted(gpus.pids)} of the run", "leftovers"
        elif leftovers:
            text, kind = f"{len(leftovers)} process(es) of the run are still alive", "leftovers"
        elif still_held:
            text, kind = f"the run's cgroup {cgroup.path if cgroup else ''} still holds processes", "leftovers"
        elif gpus.pids is None:
            text = (f"no process of the run remains ({len(tracked)} seen in all); whether GPUs still hold "
                    f"memory for it is unknown: {gpus.unknown}")
            kind = "unconfirmed"
        self.store.add_event(self.run_id, kind, text)
        return leftovers

    def _name_ranks_from_launcher_log(self) -> None:
        """Ranks the scans could not name (dead within a scan, or before their RANK was readable), named from
        DeepSpeed's launch.py log: without them the first failure would be blamed on a rank that was ended after it."""
        changed = False
        known = self.processes.tracked
        for pid, rank in launcher_spawned_ranks(self.run_dir.output).items():
            tracked = known.get(pid)
            if tracked is not None:
                if tracked.role == "helper":
                    tracked.role, tracked.rank, changed = "rank", rank, True
                continue
            seen = self.processes.zombies_unseen.get(pid)  # never tracked, so never watched: at best seen as a zombie
            starts = [t.started for t in known.values() if t.role in ("rank", "launcher")]
            # Never seen alive: it ended within one scan of starting, so before any rank that was seen.
            when = seen[0] if seen is not None else (min(starts) if starts else time.time())
            code = procs.describe_wait_status(seen[1])[0] if seen is not None and seen[1] is not None else None
            known[pid] = TrackedProcess(pid, when, "?", "rank", rank, code, when)
            changed = True
        if changed:
            self.processes.save()

    def evidence(self, *, stall_stacks: str, recorder_ran: bool) -> Evidence:
        """Everything the diagnosis reads; `stall_stacks` from the stall watch, memory peaks if the recorder ran."""
        self._name_ranks_from_launcher_log()
        ends = [ProcessEnd(t.pid, t.role, t.rank, t.ended_at or time.time(), t.returncode)
                for t in self.processes.tracked.values() if t.role in ("launcher", "rank") and t.ended_at is not None]
        tail = log_tail(self.run_dir.output, max_bytes=1 << 20, max_lines=2000)
        ends += remote_ends(self.run_dir.path, tail)  # other nodes' ranks, as their agents saw them end
        after = oom_kill_counters()
        deltas = [after[k] - self.oom_before[k] for k in after if k in self.oom_before]
        our_pids = set(self.processes.tracked)
        kernel = kernel_oom_kills(since_boot_s=self.boot_s_at_start)
        memory = self._resource_summary() if recorder_ran else {}
        limit, cgroup_kills = self._memory_limit()
        stop_detail = self._stop_detail()
        return Evidence(
            launcher_returncode=self.launcher.returncode,
            ends=ends,
            log_tail=tail,
            stop_requested=stop_detail is not None,
            stop_detail=stop_detail or "",
            stop_requested_at=_requested_at(self.run_dir.stop_request()) if stop_detail is not None else None,
            stop_reason=_reason(self.run_dir.stop_request()) if stop_detail is not None else "",
            oom_kills_during_run=max(deltas) if deltas else None,
            kernel_oom_pids={pid: text for pid, text in (kernel or {}).items() if pid in our_pids},
            kernel_log_readable=kernel is not None,
            peak_rank_rss=memory.get("peak_ranks_rss_bytes"),
            total_ram=memory.get("ram_total_bytes") or psutil.virtual_memory().total,
            min_available_ram=memory.get("min_host_available_bytes"),
            memory_limit=limit,
            cgroup_oom_kills_during_run=cgroup_kills,
            settings=launch_settings(self.run_dir),
            stall_stacks=stall_stacks,
            scheduler_end=read_scheduler_end(self.run_dir.path),
            free_space=free_space_of(tail),
            gpu_xids=self._gpu_xids(recorder_ran),
        )

    def _memory_limit(self) -> tuple[MemoryLimit | None, int | None]:
        """The tightest memory limit over the run's ranks (and launcher), with its OOM kills during the run."""
        best: tuple[MemoryLimit, int | None] | None = None
        for (version, path), before in self.processes.cgroups.items():
            limit = memory_limit(version, path)
            if limit is None:
                continue
            kills = limit.oom_kills - before if limit.oom_kills is not None and before is not None else None
            if best is None or (limit.limit_bytes is not None and (
                    best[0].limit_bytes is None or limit.limit_bytes < best[0].limit_bytes)):
                best = (limit, kills)
        return best if best is not None else (None, None)

    def _gpu_xids(self, recorder_ran: bool) -> list[dict[str, Any]]:
        """The XID errors of the run's time: those the resource recorder saw (NVML's event set, and the kernel log's
        it read) and the driver's lines in the kernel log since the start, whether or not the recorder ran:
        [{"gpu" (an index, or the bus id of a GPU NVML did not list), "xid", "t", "source"[, "text"]}], first seen
        first, one per GPU and XID."""
        seen: dict[tuple[str, int], dict[str, Any]] = {}
        bus_ids: dict[int, str | None] = {}
        try:
            from traindeck.backend.monitor.store_read import read_gpu_bus_ids, read_gpu_health

            if recorder_ran:
                bus_ids = read_gpu_bus_ids(self.store_path, self.run_id)
                for gpu, _t, health in read_gpu_health(self.store_path, self.run_id):
                    for event in health.get("xid") or ():
                        if float(event["t"]) >= self.started_at - 1.0:  # the kernel log's older ones are not the run's
                            seen.setdefault((str(gpu), int(event["xid"])), {
                                "gpu": gpu, "xid": int(event["xid"]), "t": float(event["t"]),
                                "source": event.get("source", "nvml")})
        except Exception as exc:  # evidence is best-effort; the diagnosis works without it
            logger.warning("GPU health unavailable: %r", exc)
        for event in kernel_gpu_xids(bus_ids, since_boot_s=self.boot_s_at_start) or ():
            key = (str(event["gpu"]), int(event["xid"]))
            if key in seen:
                seen[key].setdefault("text", event["text"])
            else:
                seen[key] = {k: event[k] for k in ("gpu", "xid", "t", "source", "text")}
        return sorted(seen.values(), key=lambda x: x["t"])

    def _resource_summary(self) -> Mapping[str, Any]:  # a ResourceSummary, or {}
        """Memory peaks from the resource recorder's samples in the store."""
        try:
            from traindeck.backend.monitor.store_read import resource_summary

            return resource_summary(self.store_path, self.run_id)
        except Exception as exc:  # evidence is best-effort; the diagnosis works without it
            logger.warning("resource summary unavailable: %r", exc)
            return {}

    def finish(self, evidence: Evidence, state: str, note: str = "") -> None:
        """The diagnosis (kept in evidence.json with its evidence), the final state (in end.json and the store), the
        end announced. `note` is added to the state's detail (a log cut by a full disk). A store that cannot take
        the end (a full disk) is asked again every END_RETRY_S, for up to END_WAIT_S: the end, exit code included,
        lands when space comes back, instead of the run being taken for lost."""
        diagnosis = with_nodes(self.run_dir.path, self.watchdog.explain(state, diagnose(evidence)), state)
        # Everything below (evidence.json, the store, the notify command, supervisor.log) gets it masked.
        diagnosis = Diagnosis(**mask_json(diagnosis.to_json(), self.secrets))
        try:  # kept for whoever wants to know why the diagnosis says what it says (and for replays)
            atomic_write_text(self.run_dir.evidence, json.dumps(mask_json(
                {"evidence": evidence_to_json(evidence), "diagnosis": diagnosis.to_json()}, self.secrets), indent=1))
        except OSError as exc:
            logger.warning("could not write %s: %s", self.run_dir.evidence, exc)
        detail = ""
        stop_detail = self._stop_detail()
        if state == "stopped" and stop_detail is not None:
            detail = _reason(self.run_dir.stop_request()) or f"stopped {stop_detail}"
        elif state == "failed":
            detail = diagnosis.summary
        if note:
            detail = f"{detail}; {note}" if detail else note
        ended_at = time.time()
        kept = None if state == "succeeded" else diagnosis.to_json()
        try:  # the end in the run folder too: a run store rebuilt from the folders still knows it (store_rebuild)
            write_end(self.run_dir.path, self.run_id, state, exit_code=self.launcher.returncode, ended_at=ended_at,
                      diagnosis=kept, state_detail=detail)
        except OSError as exc:
            logger.warning("could not write the run's end into its folder: %s", exc)
        waited = 0.0
        # Asked again only while the disk is full: any other failure (a store corrupted meanwhile) is left to the
        # end.json above, from which the store is rebuilt.
        while self.store.finish_run(self.run_id, state, exit_code=self.launcher.returncode, ended_at=ended_at,
                                    diagnosis=kept, state_detail=detail) is None \
                and waited < END_WAIT_S and disk_full(Path(self.store_path).parent):
            if not waited:
                logger.warning("the run store cannot take the run's end: the disk is full; asking again every "
                               "%.0f s", END_RETRY_S)
            time.sleep(END_RETRY_S)
            waited += END_RETRY_S
        self.store.add_event(self.run_id, "finished", f"{state}: {diagnosis.summary}")
        self.watchdog.announce_end(state, diagnosis)
        logger.info("run %s %s: %s", self.run_id, state, diagnosis.summary)


END_RETRY_S = 5.0
END_WAIT_S = 24 * 3600.0


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


def _reason(request: dict[str, Any] | None) -> str:
    """Why the stop was asked for, where the request says (a trial's measured candidate); "" for a user's stop."""
    reason = (request or {}).get("reason")
    return reason.strip() if isinstance(reason, str) else ""


def _requested_at(request: dict[str, Any] | None) -> float | None:
    """When the stop was asked for, from the run's stop request (None where it does not say)."""
    try:
        return float((request or {})["requested_at"])
    except (KeyError, TypeError, ValueError):
        return None
