"""The queue with real runs on the CPU: order, one at a time, failures, and a keeper killed with SIGKILL.

Every run here is a real supervised run of a small stdlib script; the keeper is the real detached process,
started by the real CLI, which has exited before the runs start.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
from support import TESTS
from support.runhelp import wait_until

from traindeck.backend.queue.entries import QueuedLaunch, QueueStore
from traindeck.backend.runs.record.run_store import RunStore

JOB = TESTS / "fixtures" / "scripts" / "queue_job.py"


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "traindeck", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd or JOB.parent)


def add(*args: str) -> str:
    proc = cli("queue", "add", "--launcher", "python", *args)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


def runs(ids: list[str]) -> list:  # type: ignore[type-arg]
    with RunStore() as store:
        return [store.get_run(i) for i in ids]


def all_ended(ids: list[str], timeout: float = 240.0) -> list:  # type: ignore[type-arg]
    return wait_until(lambda: (lambda rs: rs if all(r.finished for r in rs) else None)(runs(ids)), timeout, 0.5)


def started_events(run_id: str) -> int:
    with RunStore() as store:
        return sum(1 for e in store.events(run_id) if e.kind == "started")


def keeper_pid() -> int | None:
    data = json.loads(cli("queue", "list", "--json").stdout)
    return data["keeper_pid"]


def test_three_queued_runs_start_in_order_one_at_a_time_and_all_succeed():
    assert cli("queue", "--max-running", "1").returncode == 0
    ids = [add("--name", f"q{i}", JOB.name, "--steps", "4", "--step-time", "0.25") for i in range(3)]
    # The CLI has exited: what starts the runs is the keeper, in a session of its own, not our child.
    pid = wait_until(keeper_pid, 30)
    keeper = psutil.Process(pid)
    assert keeper.ppid() != os.getpid() and os.getsid(pid) != os.getsid(0)
    records = all_ended(ids)
    assert [r.state for r in records] == ["succeeded"] * 3
    assert [r.name for r in records] == ["q0", "q1", "q2"]
    for before, after in zip(records, records[1:], strict=False):
        assert before.started_at < after.started_at  # in order
        assert before.ended_at <= after.started_at, "two runs of a one-at-a-time queue overlapped"
    assert all(started_events(i) == 1 for i in ids)
    gaps = [after.started_at - before.ended_at for before, after in zip(records, records[1:], strict=False)]
    print(f"\nqueue: gaps between one run's end and the next one's start: {[f'{g:.2f} s' for g in gaps]}")
    listing = cli("queue", "list", "--all", "--json")
    rows = json.loads(listing.stdout)["runs"]
    assert [(r["name"], r["state"], r["position"]) for r in rows] == [
        ("q0", "succeeded", None), ("q1", "succeeded", None), ("q2", "succeeded", None)]


def test_a_failed_run_does_not_stop_the_next_and_a_killed_keeper_loses_nothing():
    cli("queue", "--max-running", "1")
    # Long enough (10 s) to be still running when its keeper is killed, however busy the machine.
    first = add("--name", "fails", JOB.name, "--steps", "40", "--step-time", "0.25", "--exit", "3")
    second = add("--name", "second", JOB.name, "--steps", "2")
    third = add("--name", "third", JOB.name, "--steps", "2")
    wait_until(lambda: runs([first])[0].state == "running", 60)
    pid = keeper_pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, 10)
    # Nothing lost: the two waiting runs are still queued, in order, and nothing started them meanwhile.
    time.sleep(2.0)
    assert runs([first])[0].state == "running", "the first run ended before the test could kill its keeper"
    assert [r.state for r in runs([second, third])] == ["queued", "queued"]
    rows = json.loads(cli("queue", "list", "--json").stdout)["runs"]  # looking at the queue restarts the keeper
    assert [(r["id"], r["position"]) for r in rows if r["state"] == "queued"] == [(second, 1), (third, 2)]
    records = all_ended([first, second, third])
    assert [r.state for r in records] == ["failed", "succeeded", "succeeded"]
    assert records[0].exit_code == 3
    assert [started_events(i) for i in (first, second, third)] == [1, 1, 1]
    assert records[0].ended_at <= records[1].started_at <= records[1].ended_at <= records[2].started_at


def test_a_paused_queue_starts_nothing_and_stop_on_failure_pauses_it():
    cli("queue", "--max-running", "1", "--stop-on-failure")
    first = add("--name", "bad", JOB.name, "--steps", "1", "--exit", "1")
    second = add("--name", "after", JOB.name, "--steps", "1")
    all_ended([first])
    data = wait_until(lambda: (lambda d: d if d["paused"] else None)(json.loads(cli("queue", "list", "--json")
                                                                                 .stdout)), 30)
    assert first in data["pause_reason"]
    (row,) = data["runs"]
    assert row["id"] == second and row["waiting_for"].startswith("the queue is paused")
    time.sleep(2.0)
    assert runs([second])[0].state == "queued"
    assert cli("queue", "resume").returncode == 0
    assert all_ended([second])[0].state == "succeeded"


def test_remove_hold_move_and_start_now():
    cli("queue", "pause")
    a, b, c = (add("--name", n, JOB.name, "--steps", "1") for n in ("a", "b", "c"))
    assert cli("queue", "move", c, "1").returncode == 0
    assert cli("queue", "hold", a).returncode == 0
    assert cli("queue", "remove", b).returncode == 0
    rows = json.loads(cli("queue", "list", "--json").stdout)["runs"]
    assert [(r["name"], r["position"], r["held"]) for r in rows] == [("c", 1, False), ("a", 2, True)]
    assert runs([b]) == [None]  # a removed run never ran: it is gone from the run store
    started = cli("queue", "start", a)  # now, although held and the queue paused
    assert started.returncode == 0, started.stderr
    assert all_ended([a])[0].state == "succeeded"
    assert runs([c])[0].state == "queued"
    assert cli("queue", "remove", a).returncode == 2  # it ran: not in the queue any more


def test_claim_starts_a_run_once_whoever_asks():
    with QueueStore() as queue:
        record = queue.add(QueuedLaunch(script="x.py"), name="x")

    def claim(_: int) -> bool:
        with QueueStore() as mine:
            return mine.claim(record.id)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(claim, range(16)))
    assert results.count(True) == 1


def test_queue_add_says_what_is_wrong_in_one_line():
    bad = cli("queue", "add", "--gpus", "any:x", JOB.name)
    assert bad.returncode == 2 and bad.stderr.strip() == (
        "traindeck: --gpus any:x: after 'any:' give how many GPUs (any:2)")
    missing = cli("queue", "add", "nope.py")
    assert missing.returncode == 2 and "script not found: nope.py" in missing.stderr
    assert "Traceback" not in bad.stderr + missing.stderr


def test_a_run_whose_starter_died_mid_start_goes_back_in_the_queue_and_runs_once():
    cli("queue", "pause")
    run_id = add("--name", "interrupted", JOB.name, "--steps", "1")
    # A starter claims the run (queued -> running) and is SIGKILLed before any supervisor exists.
    code = ("import os, sys; from traindeck.backend.queue.entries import QueueStore; q = QueueStore(); "
            f"assert q.claim({run_id!r}); os.kill(os.getpid(), 9)")
    starter = subprocess.run([sys.executable, "-c", code], timeout=60)
    assert starter.returncode == -signal.SIGKILL
    assert runs([run_id])[0].state == "running"
    assert cli("queue", "resume").returncode == 0
    (record,) = all_ended([run_id])
    assert record.state == "succeeded"
    assert started_events(run_id) == 1
    with RunStore() as store:
        assert [e.kind for e in store.events(run_id)].count("requeued") == 1


def test_a_run_someone_else_claimed_is_not_started_again(tmp_path: Path):
    """start_queued acts on claim()'s answer: a run another starter claimed gets no second run directory, plan
    or supervisor from this one."""
    from traindeck.backend.queue.starting import start_queued

    script = tmp_path / "x.py"
    script.write_text("print('hello')\n")
    with QueueStore() as queue:
        record = queue.add(QueuedLaunch(script=str(script), launcher="python"), name="x")
        entry = queue.entry(record.id)
        assert entry is not None
        with QueueStore() as other:
            assert other.claim(record.id)
        assert start_queued(queue, entry, None) is False
        assert not Path(record.run_dir).exists()
        after = queue.runs.get_run(record.id)
        assert after is not None and after.supervisor_pid is None and after.state == "running"


def test_a_queued_run_keeps_its_request_and_provenance_and_can_be_rerun():
    """A run the queue starts gets what a run started at once gets: request.json (rerun, resume) and the sidecar's
    provenance."""
    run_id = add("--name", "kept", JOB.name, "--steps", "2", "--step-time", "0.1")
    (record,) = all_ended([run_id])
    assert record.state == "succeeded"
    folder = Path(record.run_dir)
    request = json.loads((folder / "request.json").read_text())
    assert request["script"] == JOB.name and request["script_args"] == ["--steps", "2", "--step-time", "0.1"]
    wait_until(lambda: (folder / "provenance.json").is_file(), 60, 0.5)
    again = cli("rerun", run_id, "--detach")
    assert again.returncode == 0, again.stderr
    (rerun,) = all_ended([again.stdout.strip().splitlines()[-1]])
    assert rerun.state == "succeeded" and rerun.id != run_id
