"""The supervisor with real processes (a stdlib-only stand-in script, plain python launcher): output, progress,
metrics, stop, kills of the launcher and of the supervisor itself, rank deaths. Each ending is checked by
counting the processes of the run that are left (none) and reading the diagnosis."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import stat
import sys
import time
from pathlib import Path

import psutil
import pytest
from support.runhelp import (
    BEHAVE,
    events,
    get,
    job_env,
    leftovers,
    metrics,
    python_job,
    start,
    wait_finished,
    wait_until,
)

from traindeck.backend.runs.control.lifecycle import stop_run
from traindeck.backend.runs.control.view import force_stop
from traindeck.backend.runs.record.layout import RunDir
from traindeck.backend.runs.record.run_store import RunRecord, RunStore
from traindeck.backend.runs.supervisor.liveness import LOST_RUN_UNCONFIRMED, reconcile
from traindeck.backend.runs.supervisor.stop_sequence import KILL_AFTER_TERM_MAX_S


def test_plain_python_run_records_output_progress_and_metrics() -> None:
    run = python_job("--steps", "10", "--step-time", "0.02")
    done = wait_finished(run.id, 60)
    assert done.state == "succeeded", done.diagnosis
    assert done.exit_code == 0 and done.diagnosis is None
    log = Path(done.run_dir, "output.log").read_bytes()
    assert b"behave: rank 0 done" in log and b"\r" in log  # raw bytes, redraws included
    assert done.progress is not None and done.progress["current"] == 10 and done.progress["total"] == 10
    assert metrics(run.id)["loss"] == pytest.approx(0.1)
    # "; its cgroup is empty (and removed)" follows where the run had a cgroup of its own (run_cgroup.py)
    assert any(kind == "confirmed" and text.startswith("nothing of the run remains (1 process(es) seen in all)")
               for kind, text in events(run.id)), events(run.id)
    assert leftovers(done) == []


def test_run_directory_is_private_and_command_is_recorded() -> None:
    run = python_job("--steps", "1", "--step-time", "0")
    done = wait_finished(run.id, 60)
    path = Path(done.run_dir)
    assert stat.S_IMODE(path.stat().st_mode) == 0o700
    command = json.loads((path / "command.json").read_text())
    assert command["argv"][1:] == [str(BEHAVE), "--steps", "1", "--step-time", "0"]
    assert stat.S_IMODE((path / "output.log").stat().st_mode) == 0o600


def test_hostile_arguments_reach_the_script_verbatim_and_secrets_reach_no_file(tmp_path: Path) -> None:
    hostile = ["a; rm -rf /tmp/nothing", "$(touch /tmp/pwned)", "`id`", "it's \"quoted\"", "line1\nline2", "",
               "--name", "x", "-h", "--", "*", "~", "${HOME}", "\\", "é ✓"]
    dump = tmp_path / "dump.json"
    token, wandb = "hf_SECRETtoken_0123456789", "wandb_SECRET_abcdef987654"
    run = python_job("--steps", "1", "--step-time", "0", "--dump", str(dump), "--", *hostile,
                     env=job_env(HF_TOKEN=token, WANDB_API_KEY=wandb))
    done = wait_finished(run.id, 60)
    assert done.state == "succeeded", done.diagnosis
    seen = json.loads(dump.read_text())
    assert seen["argv"][seen["argv"].index("--") + 1:] == hostile
    assert seen["HF_TOKEN"] == token and seen["WANDB_API_KEY"] == wandb  # the job gets them...
    assert seen["marker"] == run.id
    # The supervisor writes its last lines (log, events) after the state turns final: scan once it is gone.
    wait_until(lambda: not _alive(done.supervisor_pid), timeout=30)  # type: ignore[arg-type]
    written = [p for p in Path(done.run_dir).rglob("*") if p.is_file()]
    written += [Path(str(RunStore().path) + suffix) for suffix in ("", "-wal", "-shm")]
    for path in written:  # ...but no file traindeck writes has them
        if path.exists():
            data = path.read_bytes()
            assert token.encode() not in data and wandb.encode() not in data, path
    command = json.loads(Path(done.run_dir, "command.json").read_text())
    assert command["env"]["HF_TOKEN"] == "***" and command["env"]["WANDB_API_KEY"] == "***"


def test_lines_reach_the_log_within_a_second_though_the_script_never_flushes(tmp_path: Path) -> None:
    from traindeck.backend.launch.environ import training_env

    script = tmp_path / "quiet_printer.py"
    script.write_text("import time\nfor i in range(5):\n    print(f'T {time.time():.6f}')\n    time.sleep(0.5)\n"
                      "time.sleep(1)\n")
    run = start([sys.executable, str(script)], env=training_env())  # the environment real runs get
    log = Path(run.run_dir, "output.log")
    delays = []
    seen = 0
    until = time.monotonic() + 60
    while seen < 5:
        lines = [line for line in log.read_text().splitlines() if line.startswith("T ")]
        for line in lines[seen:]:
            delays.append(time.time() - float(line.split()[1]))
        seen = len(lines)
        time.sleep(0.01)
        assert time.monotonic() < until, "lines did not arrive"
    assert max(delays) < 1.0, delays
    wait_finished(run.id, 30)


def test_stop_is_graceful_when_the_job_obeys_sigint() -> None:
    run = python_job("--steps", "1000", "--step-time", "0.05")
    wait_until(lambda: (get(run.id).progress or {}).get("current", 0) >= 2, timeout=30)
    messages: list[str] = []
    outcome = stop_run(RunStore(), run.id, grace_s=5, report=messages.append)
    assert outcome.state == "stopped" and outcome.remaining == []
    done = get(run.id)
    assert done.state_detail == "stopped gracefully (SIGINT)"
    assert done.diagnosis is not None and done.diagnosis["kind"] == "stopped"
    assert any("SIGINT" in m for m in messages) and messages[-1] == "confirmed: no process of the run remains"
    assert not any("SIGKILL" in m for m in messages[1:]), messages
    assert leftovers(done) == []


def test_stop_escalates_to_sigkill_and_ends_processes_in_their_own_session() -> None:
    run = python_job("--steps", "2", "--step-time", "0.01", "--end", "ignore_signals", "--orphan")
    wait_until(lambda: b"hangs" in Path(run.run_dir, "output.log").read_bytes(), timeout=30)
    wait_until(lambda: len(get(run.id).processes) >= 1 and len(_tree(run)) >= 2, timeout=10)
    messages: list[str] = []
    outcome = stop_run(RunStore(), run.id, grace_s=0.5, report=messages.append)
    assert outcome.state == "stopped" and outcome.remaining == []
    assert any("SIGTERM" in m for m in messages) and any("SIGKILL" in m for m in messages)
    assert get(run.id).state_detail == "stopped forcefully (SIGKILL)"
    assert leftovers(get(run.id)) == []


def test_a_second_request_with_no_grace_forces_a_stop_under_way() -> None:
    # What a second Ctrl+C in `traindeck run` and the dashboard's Force stop rely on.
    run = python_job("--steps", "2", "--step-time", "0.01", "--end", "ignore_signals")
    wait_until(lambda: b"hangs" in Path(run.run_dir, "output.log").read_bytes(), timeout=30)
    layout = RunDir(Path(run.run_dir))
    layout.request_stop(600)  # SIGINT now, which the job ignores; SIGTERM only after 10 minutes
    wait_until(lambda: get(run.id).state_detail == "stopping (SIGINT)", timeout=10)
    layout.request_stop(0)
    done = wait_finished(run.id, 20)
    assert done.state == "stopped" and done.state_detail == "stopped forcefully (SIGKILL)"
    texts = [e.text for e in RunStore().events(run.id)]
    assert any("stop hurried: grace now 0 s" in t for t in texts)
    # SIGKILL came without a SIGTERM before it: the event says the stop was forced, not "after SIGTERM".
    assert any(t.startswith("sent SIGKILL to") and t.endswith("(forced stop)") for t in texts), texts
    assert not any("after SIGTERM" in t for t in texts), texts
    assert leftovers(done) == []


# A job that ignores SIGINT and SIGTERM and notes when each arrives (wall clock), one "NAME TIME" line each. SIGKILL
# cannot be noted: its moment is when the process ended, as the supervisor recorded it.
SIGNAL_DIARY = """
import signal, sys, time
diary = open(sys.argv[1], "a", buffering=1)
def note(signum, _frame):
    diary.write(f"{signal.Signals(signum).name} {time.time():.6f}\\n")
signal.signal(signal.SIGINT, note)
signal.signal(signal.SIGTERM, note)
print("listening", flush=True)
while True:
    time.sleep(0.01)
"""
# How late a signal may come after it is due, on a busy machine (the supervisor looks 4x a second).
LATE_S = 2.0


def _signal_diary_job(tmp_path: Path) -> tuple[RunRecord, Path]:
    script = tmp_path / "diary.py"
    script.write_text(SIGNAL_DIARY)
    diary = tmp_path / "signals.txt"
    run = start([sys.executable, str(script), str(diary)])
    wait_until(lambda: b"listening" in Path(run.run_dir, "output.log").read_bytes(), timeout=30)
    return run, diary


def _signals(diary: Path) -> list[tuple[str, float]]:
    lines = diary.read_text().split() if diary.exists() else []
    return [(name, float(when)) for name, when in zip(lines[::2], lines[1::2], strict=True)]


def _launcher_end(record: RunRecord) -> tuple[float, int]:
    """(when, return code) of the run's launcher (here the job itself), as the supervisor recorded them."""
    [launcher] = [p for p in record.processes if p["role"] == "launcher"]
    return launcher["ended_at"], launcher["returncode"]


def _stop_signals_sent(run_id: str) -> list[str]:
    return [text for kind, text in events(run_id) if kind == "stop_signal"]


def test_a_stop_sends_sigint_then_sigterm_after_the_grace_then_sigkill_after_a_further_grace(
        tmp_path: Path) -> None:
    grace = 1.0
    run, diary = _signal_diary_job(tmp_path)
    asked = time.time()
    stop_run(RunStore(), run.id, grace_s=grace, wait=False)
    done = wait_finished(run.id, 30)
    got = _signals(diary)
    assert [name for name, _ in got] == ["SIGINT", "SIGTERM"], got
    (_, sigint), (_, sigterm) = got
    killed, code = _launcher_end(done)
    assert code == -signal.SIGKILL
    # The grace periods count from the moment the supervisor takes the request, which comes after `asked`.
    further = min(grace, KILL_AFTER_TERM_MAX_S)
    assert asked <= sigint < sigterm < killed
    assert sigint < asked + LATE_S
    assert asked + grace <= sigterm < asked + grace + LATE_S
    assert asked + grace + further <= killed < asked + grace + further + LATE_S
    assert done.state == "stopped" and done.state_detail == "stopped forcefully (SIGKILL)"
    assert [text.split()[1] for text in _stop_signals_sent(run.id)] == ["SIGINT", "SIGTERM", "SIGKILL"]
    assert leftovers(done) == []


def test_the_dashboards_force_stop_sends_sigkill_at_once_and_no_other_signal(tmp_path: Path) -> None:
    run, diary = _signal_diary_job(tmp_path)
    asked = time.time()
    with RunStore() as store:
        force_stop(store, run.id)
    assert RunDir(Path(run.run_dir)).stop_request()["grace_s"] == 0  # type: ignore[index]
    done = wait_finished(run.id, 30)
    assert _signals(diary) == []
    killed, code = _launcher_end(done)
    assert code == -signal.SIGKILL
    assert asked <= killed < asked + LATE_S
    assert done.state == "stopped" and done.state_detail == "stopped forcefully (SIGKILL)"
    assert [text.split()[1] for text in _stop_signals_sent(run.id)] == ["SIGKILL"]
    assert leftovers(done) == []


def test_the_dashboards_force_stop_hurries_a_graceful_stop_to_sigkill_at_once(tmp_path: Path) -> None:
    run, diary = _signal_diary_job(tmp_path)
    stop_run(RunStore(), run.id, grace_s=600, wait=False)  # SIGINT now, which the job ignores
    wait_until(lambda: _signals(diary), timeout=10)
    asked = time.time()
    with RunStore() as store:
        force_stop(store, run.id)
    done = wait_finished(run.id, 30)
    assert [name for name, _ in _signals(diary)] == ["SIGINT"]
    killed, code = _launcher_end(done)
    assert code == -signal.SIGKILL
    assert asked <= killed < asked + LATE_S
    assert done.state == "stopped" and done.state_detail == "stopped forcefully (SIGKILL)"
    assert any("stop hurried: grace now 0 s (SIGKILL now)" in text for _, text in events(run.id))
    assert [text.split()[1] for text in _stop_signals_sent(run.id)] == ["SIGINT", "SIGKILL"]
    assert leftovers(done) == []


def _tree(run) -> list[psutil.Process]:  # type: ignore[no-untyped-def]
    record = get(run.id)
    return psutil.Process(record.supervisor_pid).children(recursive=True) if record.supervisor_pid else []


def test_supervisor_sigterm_is_a_stop_request() -> None:
    run = python_job("--steps", "1000", "--step-time", "0.05")
    wait_until(lambda: (get(run.id).progress or {}).get("current", 0) >= 2, timeout=30)
    os.kill(get(run.id).supervisor_pid, signal.SIGTERM)  # type: ignore[arg-type]
    done = wait_finished(run.id, 30)
    assert done.state == "stopped"
    assert leftovers(done) == []


def test_killed_launcher_fails_the_run_and_its_orphans_are_ended() -> None:
    run = python_job("--steps", "1000", "--step-time", "0.05", "--orphan")
    record = wait_until(lambda: (r := get(run.id)).launcher_pid and len(_tree(r)) >= 3 and r, timeout=30)
    os.kill(record.launcher_pid, signal.SIGKILL)
    done = wait_finished(run.id, 30)
    assert done.state == "failed" and done.exit_code == -signal.SIGKILL
    assert done.diagnosis is not None and "SIGKILL" in done.diagnosis["summary"]
    assert any(kind == "leftovers" and "outlived the launcher" in text for kind, text in events(run.id))
    assert leftovers(done) == []


def test_killed_supervisor_leaves_no_process_and_the_run_is_marked_lost() -> None:
    run = python_job("--steps", "1000", "--step-time", "0.05", "--orphan")
    record = wait_until(lambda: (r := get(run.id)).launcher_pid and len(_tree(r)) >= 3 and r, timeout=30)
    job = [p.pid for p in _tree(record)]
    os.kill(record.supervisor_pid, signal.SIGKILL)  # type: ignore[arg-type]
    done = wait_finished(run.id, 30)  # the sentinel ends the processes and marks the run
    assert done.state == "lost"
    assert done.diagnosis is not None and done.diagnosis["kind"] == "lost"
    wait_until(lambda: not any(_alive(pid) for pid in job), timeout=15)
    assert leftovers(done) == []


STRAY = """
import os, subprocess, sys, time
# A child with an environment of its own (no run marker), in a session of its own: only the supervisor, as the
# run's subreaper, could know it is the run's.
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env={"PATH": os.environ["PATH"]},
                         start_new_session=True)
open(sys.argv[1], "w").write(str(child.pid))
print("stray started", flush=True)
while True:
    time.sleep(0.05)
"""


def test_a_lost_runs_end_check_never_confirms_what_it_cannot_see(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINDECK_RUN_CGROUP", "off")  # no cgroup: the stray is out of reach (test_runs_cgroup_launch.py)
    script = tmp_path / "stray.py"
    script.write_text(STRAY)
    pid_file = tmp_path / "stray.pid"
    run = start([sys.executable, str(script), str(pid_file)])
    wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), timeout=30)
    stray = int(pid_file.read_text())
    try:
        record = wait_until(lambda: (r := get(run.id)).supervisor_pid and r, timeout=30)
        os.kill(record.supervisor_pid, signal.SIGKILL)  # type: ignore[arg-type]
        done = wait_finished(run.id, 30)
        assert done.state == "lost"
        kinds = [kind for kind, _text in events(run.id)]
        assert "confirmed" not in kinds, events(run.id)
        assert ("unconfirmed", LOST_RUN_UNCONFIRMED) in events(run.id)
    finally:
        os.kill(stray, signal.SIGKILL)


def test_a_reader_marks_a_run_lost_when_supervisor_and_sentinel_are_both_gone() -> None:
    run = python_job("--steps", "1000", "--step-time", "0.05", "--orphan")
    record = wait_until(lambda: (r := get(run.id)).launcher_pid and len(_tree(r)) >= 3 and r, timeout=30)
    tree = _tree(record)
    sentinel = [p for p in tree if "sentinel" in " ".join(p.cmdline())]
    assert len(sentinel) == 1
    os.kill(sentinel[0].pid, signal.SIGKILL)
    os.kill(record.supervisor_pid, signal.SIGKILL)  # type: ignore[arg-type]
    time.sleep(0.5)
    # The launcher died with its parent (PR_SET_PDEATHSIG); the orphan in its own session is still there.
    assert get(run.id).state == "running"
    with RunStore() as store:
        assert reconcile(store) == [run.id]
    done = get(run.id)
    assert done.state == "lost"
    assert leftovers(done) == []


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.mark.parametrize(("end", "kind", "code", "words"), [
    ("exception", "exception", 1, "RuntimeError: boom on rank 0"),
    ("exit:3", "exit_code", 3, "exited with code 3"),
    ("sigkill", "killed", -signal.SIGKILL, "SIGKILL"),
    ("cuda_oom", "cuda_oom", 1, "out of GPU memory"),
    ("missing_module", "missing_module", 1, "traindeck_no_such_module"),
])
def test_rank_deaths_are_diagnosed(end: str, kind: str, code: int, words: str) -> None:
    run = python_job("--steps", "3", "--step-time", "0.01", "--end", end)
    done = wait_finished(run.id, 60)
    assert done.state == "failed"
    assert done.exit_code == code
    assert done.diagnosis is not None and done.diagnosis["kind"] == kind, done.diagnosis
    assert words in done.diagnosis["summary"] + " ".join(done.diagnosis["evidence"])
    assert leftovers(done) == []


def test_launcher_that_cannot_start_is_a_failed_run() -> None:
    run = start(["/nonexistent/python", "x.py"])
    done = wait_finished(run.id, 30)
    assert done.state == "failed" and done.diagnosis is not None
    assert done.diagnosis["kind"] == "start_failed"
    assert "could not start" in Path(done.run_dir, "output.log").read_text()


def test_stall_warning_appears_and_clears() -> None:
    run = python_job("--steps", "3", "--step-time", "0.01", "--end", "hang", stall_min_s=1.0)
    wait_until(lambda: any(k == "stall" for k, _ in events(run.id)), timeout=30, interval=0.5)
    assert get(run.id).state_detail.startswith("stalled: no output or progress for")
    stop_run(RunStore(), run.id, grace_s=1)
    assert leftovers(get(run.id)) == []


def test_reader_never_blocks_the_writer(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "s.sqlite3")
    reader = sqlite3.connect(str(store.path), timeout=0.1)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM runs").fetchone()  # an open read transaction
    run_id = "20260101-000000-aaaa"
    from traindeck.backend.runs.record.run_store import RunRecord

    store.add_run(RunRecord(id=run_id, run_dir=str(tmp_path), created_at=time.time()))
    store.update_run(run_id, progress={"current": 1})
    reader.execute("COMMIT")
    assert store.get_run(run_id) is not None


def test_stop_request_file_round_trips(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path)
    assert run_dir.stop_request() is None
    run_dir.request_stop(3.5)
    assert run_dir.stop_request()["grace_s"] == 3.5  # type: ignore[index]


def test_sentinel_exits_quietly_after_a_normal_end() -> None:
    run = python_job("--steps", "1", "--step-time", "0")
    done = wait_finished(run.id, 60)
    assert leftovers(done) == []
    log = Path(done.run_dir, "supervisor.log").read_text()
    assert "sentinel:" not in log and "Traceback" not in log


def test_the_engine_imports_no_heavy_module() -> None:
    import subprocess

    code = ("import sys, traindeck.backend.runs.supervisor.process, traindeck.backend.runs.control.lifecycle; "
            "print(sorted(m for m in ('torch', 'deepspeed', 'accelerate', 'PySide6') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_processes_record_the_launchers_exit() -> None:
    run = python_job("--steps", "2", "--step-time", "0.01", "--end", "exit:4")
    done = wait_finished(run.id, 60)
    launcher = [p for p in done.processes if p["role"] == "launcher"]
    assert len(launcher) == 1 and launcher[0]["returncode"] == 4 and launcher[0]["pid"] == done.launcher_pid


def test_frozen_app_starts_supervisor_and_sentinel_through_its_own_executable(monkeypatch: pytest.MonkeyPatch,
                                                                             tmp_path: Path) -> None:
    from traindeck.backend.runs.supervisor import liveness

    monkeypatch.setattr(sys, "frozen", True, raising=False)
    assert liveness.internal_command("sentinel", "ID", "S")[1:] == ["_sentinel", "ID", "S"]
    # A stand-in for the frozen executable: like the bundle, it is traindeck's CLI (argv[1] is the command). The
    # real supervisor_argv/internal_command build the commands, so a wrong hidden command name fails the run here.
    python = sys.executable
    app = tmp_path / "traindeck-frozen"
    app.write_text(f"#!/bin/sh\nexec '{python}' -m traindeck \"$@\"\n")
    app.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(app))
    assert liveness.supervisor_argv(tmp_path / "r") == [str(app), "_supervise", str(tmp_path / "r")]
    run = start([python, str(BEHAVE), "--steps", "2", "--step-time", "0"])
    assert wait_finished(run.id, 60).state == "succeeded"


PDSH_STANDIN = """
import os, shutil, subprocess, sys, time
# A job that drives other nodes through pdsh as DeepSpeed's runner does when accelerate's own multi-node settings
# start it (no traindeck node agent): a process named pdsh runs under the launcher for the run's whole life.
standin = os.path.join(sys.argv[1], "pdsh")
shutil.copy(shutil.which("sleep"), standin)
child = subprocess.Popen([standin, "600"])
print("runner up", flush=True)
try:
    while True:
        time.sleep(0.1)
except KeyboardInterrupt:
    child.terminate()
"""


def test_a_stop_that_signals_pdshs_runner_says_what_deepspeed_will_do_on_the_nodes_first(tmp_path: Path) -> None:
    script = tmp_path / "runner.py"
    script.write_text(PDSH_STANDIN)
    run = start([sys.executable, str(script), str(tmp_path)], env=job_env())
    wait_until(lambda: b"runner up" in Path(get(run.id).run_dir, "output.log").read_bytes(), timeout=30)
    outcome = stop_run(RunStore(), run.id, grace_s=5)
    assert outcome.state == "stopped" and outcome.remaining == []
    said = [text for kind, text in events(run.id) if kind == "stop_signal"]
    assert said and said[0].startswith("multi-node run through pdsh without traindeck's node agents"), said
    assert "`pkill -f`" in said[0] and "--hostfile" in said[0]
    assert any(text.startswith("sent SIGINT") for text in said[1:]), said  # said before the signal, not after
