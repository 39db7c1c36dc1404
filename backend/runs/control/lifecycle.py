"""Starting, stopping and looking after runs from the outside (CLI, dashboard): the supervisor's clients.

Nothing here waits on a run's processes directly: a run belongs to its supervisor. Clients write requests (the
stop file), read the run store and the log, and clean up after a supervisor that is no longer there.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from traindeck.backend.core.fileio import (
    SymlinkRefused,
    atomic_write_text,
    create_private_file,
    open_private_append,
)
from traindeck.backend.runs import processes as procs
from traindeck.backend.runs.diagnosis.diagnose import Diagnosis
from traindeck.backend.runs.record.folder_record import write_identity
from traindeck.backend.runs.record.layout import RunDir, create_run_dir, mask_argv
from traindeck.backend.runs.record.run_store import RunRecord, RunStore
from traindeck.backend.runs.supervisor.liveness import (
    end_lost_run,
    run_processes,
    supervisor_alive,
    supervisor_argv,
)

if TYPE_CHECKING:
    from traindeck.backend.launch.plan import LaunchPlan



def new_run_dir() -> RunDir:
    """A fresh run directory; build the plan for it (build_plan(request, run_dir.path)), then start_run."""
    return create_run_dir()


def start_run(plan: LaunchPlan, run_dir: RunDir, *, name: str = "", preset: str | None = None,
              script: str = "", store: RunStore | None = None, stall_min_s: float = 120.0,
              recorded: bool = False) -> RunRecord:
    """Write the run directory, record the run and start its detached supervisor; returns at once.

    `recorded`: the run is in the store already (a queued run, claimed): its row is completed, not added.

    The plan's environment (secrets included) reaches the supervisor through a pipe, never a file: command.json
    and the store get it masked.
    """
    if plan.errors:
        raise ValueError("the plan has errors: " + "; ".join(plan.errors))
    from traindeck.backend.launch.environ import is_secret_name, masked_env

    own_store = store is None
    store = store or RunStore()
    log_fd: int | None = None
    try:
        refusal: SymlinkRefused | None = None
        secrets = [value for key, value in plan.env.items() if is_secret_name(key)]
        argv = mask_argv(plan.argv, secrets)
        try:
            run_dir.write_files(plan.files)
            command = {"argv": argv, "command_line": shlex.join(argv), "cwd": plan.cwd, "launcher": plan.launcher,
                       "nproc": plan.nproc, "master_port": plan.master_port,
                       "port_fixed": plan.port_fixed, "python": plan.python,
                       "env": masked_env(plan.env)}
            atomic_write_text(run_dir.command, json.dumps(command, indent=2, sort_keys=True) + "\n")
            # Both logs are new files of this run: a link found at either name is refused, never written through.
            create_private_file(run_dir.output)
            log_fd = open_private_append(run_dir.supervisor_log)
        except SymlinkRefused as exc:
            refusal = exc
        record = RunRecord(id=run_dir.run_id, run_dir=str(run_dir.path), created_at=time.time(), name=name,
                           preset=preset, launcher=plan.launcher, script=script or _script_of(plan), argv=argv,
                           cwd=plan.cwd)
        if recorded:
            store.update_run(record.id, name=name, preset=preset, launcher=plan.launcher, script=record.script,
                             argv=argv, cwd=plan.cwd, run_dir=record.run_dir, created_at=record.created_at)
        else:
            store.add_run(record)
        if refusal is None:
            _keep_identity(run_dir, record)
        if refusal is not None or log_fd is None:
            error = str(refusal)
            store.finish_run(record.id, "failed", state_detail=error,
                             diagnosis=Diagnosis(f"The run was not started: {error}.", "start_failed",
                                                 evidence=[error]).to_json())
            raise RuntimeError(error) from refusal
        instructions = {"run_id": run_dir.run_id, "store": str(store.path), "argv": plan.argv, "cwd": plan.cwd,
                        "env": plan.env, "stall_min_s": stall_min_s}
        env = {k: v for k, v in os.environ.items() if k != procs.MARKER}
        proc = subprocess.Popen(supervisor_argv(run_dir.path), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=log_fd, cwd=run_dir.path, env=env, start_new_session=True)
        os.close(log_fd)
        log_fd = None
        # The supervisor reads its instructions, forks, prints the forked pid and its first half exits: the
        # supervisor that remains is nobody's child here, so closing this process never touches it.
        out, _ = proc.communicate(json.dumps(instructions).encode(), timeout=60)
        pid_text = out.decode().strip()
        if proc.returncode != 0 or not pid_text.isdigit():
            error = f"the supervisor did not start (exit code {proc.returncode}); see {run_dir.supervisor_log}"
            store.finish_run(record.id, "failed", state_detail=error,
                             diagnosis=Diagnosis(error, "start_failed").to_json())
            raise RuntimeError(error)
        pid = int(pid_text)
        try:
            started: float | None = psutil.Process(pid).create_time()
        except psutil.Error:
            started = None
        # Only if the supervisor has not written these itself already (it does at start).
        current = store.get_run(record.id)
        if current is not None and current.supervisor_pid is None:
            store.update_run(record.id, supervisor_pid=pid, supervisor_started=started)
        return store.get_run(record.id) or record
    finally:
        if log_fd is not None:
            os.close(log_fd)
        if own_store:
            store.close()


def _keep_identity(run_dir: RunDir, record: RunRecord) -> None:
    """run.json: the run's name and preset in its folder, for a run store rebuilt from the folders; a failure to
    write it costs only that (the rebuild then names the run after its script)."""
    try:
        write_identity(run_dir.path, record.id, name=record.name, preset=record.preset, script=record.script,
                       created_at=record.created_at)
    except OSError:
        pass


def _script_of(plan: LaunchPlan) -> str:
    for arg in plan.argv[1:]:
        if arg.endswith(".py"):
            return arg
    return plan.argv[-1] if plan.argv else ""



# ---- stop -------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StopOutcome:
    state: str
    remaining: list[int]  # pids of the run still alive afterwards (should be empty)
    messages: list[str]


def stop_run(store: RunStore, run_id: str, grace_s: float = 10.0, report: Callable[[str], None] | None = None,
             wait: bool = True, timeout_s: float | None = None, reason: str | None = None) -> StopOutcome:
    """Ask the run's supervisor to stop it (SIGINT, SIGTERM after grace_s, then SIGKILL) and follow it to the end.
    `reason`: why it is stopped, where not at a user's request; the run's end reads it (state detail, diagnosis).

    Reports each step as the supervisor takes it, and finally whether anything of the run remains.
    """
    messages: list[str] = []

    def say(text: str) -> None:
        messages.append(text)
        if report:
            report(text)

    record = store.get_run(run_id)
    if record is None:
        raise KeyError(run_id)
    if record.state == "queued":  # nothing runs yet: taking it out of the queue is the stop
        say(f"run {run_id} is waiting in the queue and has not started: remove it with `traindeck queue remove "
            f"{run_id}`")
        return StopOutcome(record.state, [], messages)
    if record.finished:
        say(f"run {run_id} already ended ({record.state})")
        left = run_processes(run_id, record)
        return StopOutcome(record.state, [p.pid for p in left], messages)
    if not supervisor_alive(record):
        survivors = end_lost_run(store, run_id, "its supervisor is no longer running", report=say)
        return StopOutcome("lost", [p.pid for p in survivors], messages)
    last_event = max((e.id for e in store.events(run_id)), default=0)
    from traindeck.backend.runs.record.savestop import save_hold_s

    hold = save_hold_s(record.run_dir, grace_s)
    RunDir(Path(record.run_dir)).request_stop(grace_s, reason)
    if hold:
        say(f"asked run {run_id} to save a checkpoint and stop (its script has traindeck's companion); signals "
            f"only if it is still running after {hold:g} s")
    else:
        say(f"asked run {run_id} to stop: SIGINT now, SIGTERM after {grace_s:g} s, SIGKILL after "
            f"{grace_s + min(grace_s, 10.0):g} s if anything is still running")
    if not wait:
        return StopOutcome("running", [], messages)
    deadline = time.monotonic() + (timeout_s if timeout_s is not None else
                                   hold + grace_s + min(grace_s, 10.0) + 60.0)
    while True:
        for event in store.events(run_id, after_id=last_event):
            last_event = event.id
            if event.kind in ("stop_signal", "leftovers", "confirmed", "unconfirmed", "finished", "lost", "rank_exit",
                              "launcher_exit"):
                say(event.text)
        record = store.get_run(run_id)
        assert record is not None
        if record.finished:
            break
        if not supervisor_alive(record):
            end_lost_run(store, run_id, "its supervisor ended before the run did", report=say)
            record = store.get_run(run_id)
            assert record is not None
            break
        if time.monotonic() > deadline:
            say("the supervisor did not finish in time; ending the run's processes directly")
            procs.end_processes(functools.partial(run_processes, run_id, record), grace_s=0.0, report=say)
            break
        time.sleep(0.1)
    left = run_processes(run_id, record)
    if left:
        say(f"{len(left)} process(es) of the run are still alive: {[p.pid for p in left]}")
    else:
        say("confirmed: no process of the run remains")
    return StopOutcome(record.state, [p.pid for p in left], messages)
