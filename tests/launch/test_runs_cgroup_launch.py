"""A run in its own cgroup (v2), with real processes: a launcher that starts a child with an empty environment (no
run marker) and a double-forked daemon (setsid + fork, its parent gone, its environment empty too). Killed with
its supervisor (kill -9), the run's end check finds both through the cgroup, ends them and says "confirmed"; a
later `stop` does the same when the sentinel is gone too; without a cgroup the end check says "unconfirmed"."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import psutil
import pytest
from support.runhelp import events, get, start, wait_finished, wait_until

from traindeck.backend.cli.runs_cmd import run_summary
from traindeck.backend.runs import processes as procs
from traindeck.backend.runs.control.lifecycle import stop_run
from traindeck.backend.runs.record.folder_record import read_cgroup
from traindeck.backend.runs.record.run_store import RunStore
from traindeck.backend.runs.supervisor import run_cgroup
from traindeck.backend.runs.supervisor.liveness import LOST_RUN_UNCONFIRMED


def _no_cgroup_reason() -> str:
    placement = run_cgroup.place(f"probe-{os.getpid()}")
    if placement.cgroup is None:
        return placement.reason or "only a systemd scope can be had here"
    placement.cgroup.remove()
    return ""


NO_CGROUP = _no_cgroup_reason()
needs_cgroup = pytest.mark.skipif(bool(NO_CGROUP), reason=f"no writable cgroup v2 here: {NO_CGROUP}")

ESCAPER = """
import os, subprocess, sys, time
sleeper = [sys.executable, "-c", "import time; time.sleep(300)"]
# A child started with an empty environment, in a session of its own: it carries no run marker.
child = subprocess.Popen(sleeper, env={}, start_new_session=True)
# A daemon: fork, setsid, fork again and let the middle process go (the daemon is re-parented away from us), then
# exec with an empty environment, so it carries no marker either.
read_end, write_end = os.pipe()
middle = os.fork()
if middle == 0:
    os.setsid()
    if os.fork():
        os._exit(0)
    os.close(read_end)
    os.write(write_end, str(os.getpid()).encode())
    os.close(write_end)
    os.execve(sys.executable, sleeper, {})
os.close(write_end)
os.waitpid(middle, 0)
daemon = b""
while chunk := os.read(read_end, 64):  # the end of the pipe (closed on exec): the daemon runs without the marker
    daemon += chunk
with open(sys.argv[1] + ".tmp", "w") as handle:
    handle.write(f"{child.pid} {int(daemon)}")
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
print("escapers started", flush=True)
if len(sys.argv) > 2:  # "exit": the launcher ends and leaves both behind
    sys.exit(0)
while True:
    time.sleep(0.05)
"""


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _start_escapers(tmp_path: Path, *extra: str) -> tuple[str, list[int]]:
    script = tmp_path / "escaper.py"
    script.write_text(ESCAPER)
    pid_file = tmp_path / "escapers.pid"
    run = start([sys.executable, str(script), str(pid_file), *extra])
    wait_until(pid_file.exists, timeout=30)
    pids = [int(word) for word in pid_file.read_text().split()]
    for pid in pids:  # what makes them escapers: neither carries the run's marker
        assert procs.environ_value(pid, procs.MARKER) is None
    return run.id, pids


def _end_check(run_id: str) -> dict[str, str]:
    """The run's events by kind, once its end check has been written (just after its final state)."""
    wait_until(lambda: any(kind in ("confirmed", "unconfirmed", "leftovers") for kind, _ in events(run_id)),
               timeout=30)
    return dict(events(run_id))


def _clean_up(run_id: str, pids: list[int]) -> None:
    """Whatever a failed test leaves: the escapers, the run's cgroup."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    cgroup = run_cgroup.for_run(get(run_id).run_dir, run_id)
    if cgroup is not None:
        cgroup.empty_out(timeout_s=5.0)
        cgroup.remove()


@needs_cgroup
def test_a_killed_supervisors_run_is_ended_through_its_cgroup_and_confirmed(tmp_path: Path) -> None:
    run_id, pids = _start_escapers(tmp_path)
    try:
        record = wait_until(lambda: (r := get(run_id)).supervisor_pid and r, timeout=30)
        cgroup = run_cgroup.for_run(record.run_dir, run_id)
        assert cgroup is not None and set(pids) <= set(cgroup.members())
        assert ("cgroup", f"the run's processes are kept in cgroup {cgroup.path}") in events(run_id)
        with RunStore() as store:  # `runs show` says where
            assert run_summary(store, record)["cgroup"] == f"the run's processes are kept in cgroup {cgroup.path}"
        os.kill(record.supervisor_pid, signal.SIGKILL)  # type: ignore[arg-type]
        done = wait_finished(run_id, 30)  # the sentinel ends the run
        assert done.state == "lost"
        kinds = _end_check(run_id)
        assert all(_gone(pid) for pid in pids)
        assert "unconfirmed" not in kinds, events(run_id)
        assert kinds["confirmed"] == f"nothing of the run remains: its cgroup {cgroup.path} is empty (and removed)"
        assert not cgroup.path.exists()
    finally:
        _clean_up(run_id, pids)


@needs_cgroup
def test_stop_after_supervisor_and_sentinel_died_finds_the_escapers_through_the_cgroup(tmp_path: Path) -> None:
    run_id, pids = _start_escapers(tmp_path)
    try:
        record = wait_until(lambda: (r := get(run_id)).supervisor_pid and r, timeout=30)
        supervisor = psutil.Process(record.supervisor_pid)  # type: ignore[arg-type]
        sentinel = [p for p in supervisor.children() if "sentinel" in " ".join(p.cmdline())]
        assert len(sentinel) == 1
        os.kill(sentinel[0].pid, signal.SIGKILL)
        os.kill(supervisor.pid, signal.SIGKILL)
        wait_until(lambda: _gone(supervisor.pid), timeout=10)
        assert get(run_id).state == "running" and not any(_gone(pid) for pid in pids)
        with RunStore() as store:
            outcome = stop_run(store, run_id)  # a later traindeck: the cgroup from the run folder
        assert outcome.state == "lost" and outcome.remaining == []
        kinds = _end_check(run_id)
        assert all(_gone(pid) for pid in pids)
        assert "unconfirmed" not in kinds and kinds["confirmed"].startswith("nothing of the run remains: its cgroup")
        assert read_cgroup(record.run_dir, run_id) is not None  # recorded in the folder, so a later reader has it
    finally:
        _clean_up(run_id, pids)


@needs_cgroup
def test_a_launcher_that_leaves_escapers_behind_ends_with_an_empty_cgroup(tmp_path: Path) -> None:
    run_id, pids = _start_escapers(tmp_path, "exit")
    try:
        done = wait_finished(run_id, 60)
        assert done.state == "succeeded", done.diagnosis
        kinds = _end_check(run_id)
        assert all(_gone(pid) for pid in pids)
        assert kinds["confirmed"].endswith("its cgroup is empty (and removed)"), events(run_id)
    finally:
        _clean_up(run_id, pids)


def test_without_a_cgroup_a_lost_runs_end_check_is_unconfirmed(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(run_cgroup.OPT_OUT, "off")  # the supervisor inherits it
    run_id, pids = _start_escapers(tmp_path)
    try:
        record = wait_until(lambda: (r := get(run_id)).supervisor_pid and r, timeout=30)
        assert run_cgroup.for_run(record.run_dir, run_id) is None
        os.kill(record.supervisor_pid, signal.SIGKILL)  # type: ignore[arg-type]
        done = wait_finished(run_id, 30)
        assert done.state == "lost"
        kinds = _end_check(run_id)
        assert not any(_gone(pid) for pid in pids)  # out of reach without the cgroup: still there after the check
        assert "confirmed" not in kinds and kinds["unconfirmed"] == LOST_RUN_UNCONFIRMED, events(run_id)
    finally:
        _clean_up(run_id, pids)
