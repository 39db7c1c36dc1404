"""Is a run's supervisor there, and what to do with a run whose supervisor is gone.

How the supervisor and its sentinel are started (`internal_command`), whether a run's supervisor still lives
(`supervisor_alive`), every living process of a run (`run_processes`: its cgroup's members, its marker, its recorded
pids), and the end of a run left without its supervisor (`end_lost_run`, `reconcile`): marked lost, what is left of
it ended. Only a run with a cgroup (run_cgroup.py) can be confirmed empty then: without one, a process that dropped
the marker cannot be ruled out.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from traindeck.backend.runs import processes as procs
from traindeck.backend.runs.diagnosis.diagnose import Diagnosis
from traindeck.backend.runs.record.folder_record import read_end
from traindeck.backend.runs.record.run_store import RunRecord, RunStore
from traindeck.backend.runs.supervisor import run_cgroup

# A run whose supervisor has not written its pid after this long was never started (its starter died).
START_TIMEOUT_S = 60.0

# The modules `internal_command` starts with `python -m` (a frozen app runs its hidden commands instead).
INTERNAL_MODULES = {
    "supervisor": "traindeck.backend.runs.supervisor.process",
    "sentinel": "traindeck.backend.runs.supervisor.sentinel",
}


def supervisor_argv(run_dir: Path) -> list[str]:
    return internal_command("supervisor", str(run_dir))


def internal_command(module: str, *args: str) -> list[str]:
    """How to start the supervisor or the sentinel (INTERNAL_MODULES): `python -m` normally; a frozen app runs itself with the
    hidden `_supervise` / `_sentinel` command (its executable is not a Python)."""
    if getattr(sys, "frozen", False):
        return [sys.executable, {"supervisor": "_supervise", "sentinel": "_sentinel"}[module], *args]
    return [sys.executable, "-m", INTERNAL_MODULES[module], *args]



# ---- is the supervisor there? ---------------------------------------------------------------------------------
def supervisor_alive(record: RunRecord) -> bool:
    if record.supervisor_pid is None:
        return time.time() - record.created_at < START_TIMEOUT_S
    if record.supervisor_started is not None:
        return procs.ProcessId(record.supervisor_pid, record.supervisor_started).alive()
    try:
        proc = psutil.Process(record.supervisor_pid)
        return proc.status() != psutil.STATUS_ZOMBIE and record.run_dir in " ".join(proc.cmdline())
    except psutil.Error:
        return False


def reconcile(store: RunStore, report: Callable[[str], None] | None = None) -> list[str]:
    """Mark runs whose supervisor is gone as lost (ending what is left of them); returns their ids.

    On a full disk (or a store only open for reading) nothing is marked, whoever asks (a command, the dashboard,
    the queue keeper): the run's end, its events and alerts would fail half-way or take the last bytes. The runs
    are marked once space is back."""
    from traindeck.backend.core import disk_full

    if store.read_only or disk_full(store.path.parent):
        return []
    lost = []
    for record in store.list_runs(state="running"):
        if not supervisor_alive(record):
            end_lost_run(store, record.id, "its supervisor is no longer running", report=report)
            lost.append(record.id)
    return lost


def run_processes(run_id: str, record: RunRecord | None = None,
                  cgroup: run_cgroup.RunCgroup | None = None) -> list[psutil.Process]:
    """Every living process of the run: its cgroup's members (`cgroup`, else the one its folder records), those
    with its environment marker, and the pids the store recorded."""
    found = {p.pid: p for p in procs.marked_processes(run_id)}
    if cgroup is None and record is not None:
        cgroup = run_cgroup.for_run(record.run_dir, run_id)
    if cgroup is not None:
        for pid in cgroup.members():
            if pid != os.getpid() and pid not in found:
                try:
                    found[pid] = psutil.Process(pid)
                except psutil.Error:
                    continue
    if record is not None:
        for entry in record.processes:
            proc = procs.ProcessId(int(entry["pid"]), float(entry["started"])).process()
            if proc is not None and entry.get("returncode") is None:
                found.setdefault(proc.pid, proc)
    return procs.living(found.values())


# How long a lost run's cgroup is given to empty once killed (the kernel ends its members at once).
CGROUP_EMPTY_S = 10.0

LOST_RUN_UNCONFIRMED = (
    "no process with the run's marker remains; without the supervisor, a process that dropped the marker (a child "
    "started with an environment of its own, a daemon that left the session) cannot be ruled out")


def end_lost_run(store: RunStore, run_id: str, reason: str, report: Callable[[str], None] | None = None
                 ) -> list[psutil.Process]:
    """For a run without a supervisor: end every process left of it, mark it lost; returns survivors (none).

    A run whose folder holds its end (end.json: the supervisor finished it, but the store it wrote to was replaced
    meanwhile) gets that end instead."""
    say = report or (lambda _text: None)
    record = store.get_run(run_id)
    if record is None:
        return []
    end = read_end(record.run_dir, run_id) if record.run_dir else None
    if end is not None:  # the supervisor ended the run, but its end never reached this store (store_rebuild)
        if store.finish_run(run_id, end["state"], only_if_running=True, exit_code=end["exit_code"],
                            ended_at=end["ended_at"], diagnosis=end["diagnosis"], state_detail=end["state_detail"]):
            summary = (end["diagnosis"] or {}).get("summary") or "as its run folder's end.json says"
            store.add_event(run_id, "finished", f"{end['state']}: {summary}")
        return []
    cgroup = run_cgroup.for_run(record.run_dir, run_id)
    survivors = procs.end_processes(lambda: run_processes(run_id, record, cgroup), grace_s=3.0, report=say)
    if cgroup is not None and not cgroup.empty_out(timeout_s=CGROUP_EMPTY_S):
        survivors = run_processes(run_id, record, cgroup)
    evidence = [f"supervisor pid {record.supervisor_pid} is gone"]
    if survivors:
        evidence.append(f"{len(survivors)} process(es) could not be ended: {[p.pid for p in survivors]}")
    diagnosis = Diagnosis(f"The run was lost: {reason}; what was left of it was ended.", "lost",
                          evidence=evidence)
    if store.finish_run(run_id, "lost", only_if_running=True, diagnosis=diagnosis.to_json(),
                        state_detail=f"lost: {reason}"):
        store.add_event(run_id, "lost", f"marked lost: {reason}")
        from traindeck.backend.runs.supervisor import alerts

        alerts.announce("lost", run_id, record.name, diagnosis.summary)
        alerts.wait_all()  # the sentinel or CLI exits right after this; the alert is time-limited
        store.add_event(run_id, *_lost_run_check(survivors, cgroup))
        say(f"run {run_id} marked lost: {reason}")
    return survivors


def _lost_run_check(survivors: list[psutil.Process], cgroup: run_cgroup.RunCgroup | None) -> tuple[str, str]:
    """The end check of a lost run: (event kind, text). Without its supervisor (the run's subreaper) only the run's
    cgroup holds every process it started; without one, only processes that carry the run's marker are found."""
    if survivors:
        return "leftovers", f"{len(survivors)} process(es) still alive: {[p.pid for p in survivors]}"
    if cgroup is None:
        return "unconfirmed", LOST_RUN_UNCONFIRMED
    removed = cgroup.remove()
    return "confirmed", (f"nothing of the run remains: its cgroup {cgroup.path} is empty"
                         + (" (and removed)" if removed else ""))
