"""What `runs list`, `runs show`, `stop` and `monitor --run` print, as a user reads it (real runs, real pipes).

Each test is a finding of a first-hour walk-through: a table cut at a fixed width, an ETA for a run that ended,
EXIT -2, a traceback after `| head`, `monitor --run` reading a run's digits as a PID, no resource figures in
`runs show`, and stop's lines contradicting each other.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from support.runhelp import BEHAVE, get, wait_finished, wait_until

from traindeck.backend.cli.runs_cmd import format_table
from traindeck.backend.runs.record.run_store import RunRecord, RunStore


def traindeck(*args: str, env: dict[str, str] | None = None, timeout: float = 120,
              **kwargs: object) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "traindeck", *args], capture_output=True, text=True,
                          timeout=timeout, env=full, **kwargs)  # type: ignore[call-overload]


def detached(tmp_path: Path, *args: str, name: str) -> str:
    result = traindeck("run", "--detach", "--name", name, str(BEHAVE), *args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()[-1]


def table(output: str) -> dict[str, dict[str, str]]:
    """`runs list` text as {id: {column: cell}}, cut at the header's column starts."""
    header, *rows = output.splitlines()
    names = header.split()
    starts = [header.index(n) for n in names]
    parsed = {}
    for row in rows:
        cells = [row[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
        parsed[cells[0]] = dict(zip(names, cells, strict=True))
    return parsed


@pytest.fixture
def three_runs(tmp_path: Path) -> dict[str, str]:
    """A finished run, a stopped one and a running one (with progress), as the store has them."""
    done = detached(tmp_path, "--steps", "3", "--step-time", "0", name="finished-run")
    stopped = detached(tmp_path, "--steps", "5000", "--step-time", "0.05", name="stopped-run")
    running = detached(tmp_path, "--steps", "5000", "--step-time", "0.05",
                       name="a-running-run-with-a-rather-long-name-to-cut")
    wait_finished(done, 60)
    with RunStore() as store:
        wait_until(lambda: all((store.get_run(r) or RunRecord("", "", 0)).progress for r in (stopped, running)),
                   timeout=60)
    stop = traindeck("stop", stopped, "--grace", "5")
    assert stop.returncode == 0, stop.stderr
    yield {"done": done, "stopped": stopped, "running": running}
    traindeck("stop", running, "--grace", "0")


@pytest.mark.launch
def test_runs_list_eta_exit_and_width(three_runs: dict[str, str]) -> None:
    wide = traindeck("runs", "list", env={"COLUMNS": "250"})
    assert wide.returncode == 0, wide.stderr
    rows = table(wide.stdout)
    running, done, stopped = (rows[three_runs[k]] for k in ("running", "done", "stopped"))
    # A wide terminal shows whole cells; the ETA belongs to the running run only.
    assert running["NAME"] == "a-running-run-with-a-rather-long-name-to-cut"
    assert "ETA" in running["PROGRESS"] and "it/s" in running["PROGRESS"]
    assert "ETA" not in done["PROGRESS"] and done["PROGRESS"].startswith("3/3 (100%)")
    assert "ETA" not in stopped["PROGRESS"] and stopped["PROGRESS"]
    # EXIT: the code, or the signal's name; never a negative number.
    assert done["EXIT"] == "0" and running["EXIT"] == ""
    assert stopped["STATE"] == "stopped" and stopped["EXIT"].startswith("SIG"), stopped
    assert all(not line.rstrip().endswith("-2") for line in wide.stdout.splitlines())
    assert max(len(line) for line in wide.stdout.splitlines()) <= 250
    # A narrow one: every line fits, the cut cells say so.
    narrow = traindeck("runs", "list", env={"COLUMNS": "100"})
    lines = narrow.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100, narrow.stdout
    assert any("..." in line for line in lines) and three_runs["running"] in narrow.stdout
    # Into a pipe or file (no terminal, no COLUMNS) nothing is cut.
    piped = traindeck("runs", "list")
    assert "a-running-run-with-a-rather-long-name-to-cut" in piped.stdout and "..." not in piped.stdout


def test_format_table_gives_progress_then_name_way() -> None:
    rows = [("ID", "NAME", "STATE", "PROGRESS", "EXIT"), ("r1", "n" * 30, "running", "p" * 40, "")]
    natural = format_table(rows, None)
    assert "n" * 30 in natural[1] and "p" * 40 in natural[1] and "..." not in natural[1]
    cut = format_table(rows, 80)
    assert max(len(line) for line in cut) <= 80
    assert "n" * 30 in cut[1] and "p" * 26 + "..." in cut[1]  # PROGRESS gave way first ...
    tiny = format_table(rows, 50)
    assert max(len(line) for line in tiny) <= 50
    assert "p" * 9 + "..." in tiny[1] and "n" * 14 + "..." in tiny[1]  # ... down to 12, then NAME


# What the DeepSpeed launcher does on SIGINT (deepspeed/launcher/launch.py, sigkill_handler): SIGTERM to each rank.
PASSING_LAUNCHER = """
import os, signal, subprocess, sys, time
ranks = [subprocess.Popen([sys.executable, "-c", "import time\\nwhile True: time.sleep(0.05)"],
                          env={**os.environ, "RANK": str(i), "LOCAL_RANK": str(i), "WORLD_SIZE": "2"})
         for i in range(2)]
def on_stop(signum, frame):
    for rank in ranks:
        rank.terminate()
    time.sleep(1.0)  # psutil.wait_procs polls: the ranks stay zombies a moment, where the supervisor reads them
    for rank in ranks:
        rank.wait()
    sys.exit(1)
signal.signal(signal.SIGINT, on_stop)
print("ranks started", flush=True)
while True:
    time.sleep(0.1)
"""


@pytest.mark.launch
def test_stop_messages_agree_with_the_outcome(tmp_path: Path) -> None:
    script = tmp_path / "passing_launcher.py"
    script.write_text(PASSING_LAUNCHER)
    result = traindeck("run", "--detach", str(script), cwd=tmp_path)
    run_id = result.stdout.split()[-1]
    wait_until(lambda: len([p for p in get(run_id).processes if p["role"] == "rank"]) == 2, timeout=60)
    # The launcher starts its ranks before it takes SIGINT: stopped earlier, it dies of the SIGINT itself and the
    # ranks get traindeck's own SIGTERM, another story. It prints once its handler is in place.
    wait_until(lambda: "ranks started" in Path(get(run_id).run_dir, "output.log").read_text(errors="replace"),
               timeout=60)
    stop = traindeck("stop", run_id, "--grace", "10")
    assert stop.returncode == 0, stop.stderr
    lines = stop.stdout.splitlines()
    assert get(run_id).state == "stopped" and get(run_id).state_detail == "stopped gracefully (SIGINT)"
    assert lines[-1] == "confirmed: no process of the run remains"
    # traindeck sent SIGINT only; the ranks died of the launcher's SIGTERM: said so on the rank lines, so they
    # agree with "stopped gracefully (SIGINT)".
    ranks = [line for line in lines if line.startswith("rank ")]
    assert len(ranks) == 2, lines
    for line in ranks:
        assert line.endswith("killed by SIGTERM (not sent by traindeck, which had sent SIGINT: its launcher "
                             "passed the stop on)"), lines
    assert not any("sent SIGTERM" in line or "sent SIGKILL" in line for line in lines), lines
    shown = traindeck("runs", "show", run_id).stdout
    assert "state     stopped (stopped gracefully (SIGINT))" in shown and "exit code -" not in shown


def test_runs_list_into_head_ends_quietly(tmp_path: Path) -> None:
    with RunStore() as store:
        for i in range(400):  # more than a pipe buffer of table
            store.add_run(RunRecord(id=f"20260101-0000{i:02d}-{i:04x}", run_dir=str(tmp_path / str(i)),
                                    created_at=time.time() - i, name=f"run-{i}", state="succeeded", exit_code=0))
    for command in ("runs list", "runs list --json", "presets list"):
        result = subprocess.run(f"{sys.executable} -m traindeck {command} | head -n 2", shell=True,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0
        assert len(result.stdout.splitlines()) == 2
        assert "Traceback" not in result.stderr and "BrokenPipeError" not in result.stderr, result.stderr
        assert result.stderr == "", result.stderr


@pytest.mark.launch
def test_runs_show_text_has_the_resource_figures(tmp_path: Path) -> None:
    run_id = detached(tmp_path, "--steps", "30", "--step-time", "0.1", name="sampled")
    wait_finished(run_id, 120)
    data = json.loads(traindeck("runs", "show", run_id, "--json").stdout)
    assert data["resources"]["samples"] > 0
    text = traindeck("runs", "show", run_id).stdout
    (line,) = [line for line in text.splitlines() if line.startswith("resources ")]
    assert f"{data['resources']['samples']} samples" in line
    assert "peak rank RSS" in line and "peak host RAM used" in line
    assert ("peak GPU memory" in line) or ("no GPU" in line)


def test_monitor_run_takes_what_other_commands_take(tmp_path: Path) -> None:
    me = psutil.Process()
    launcher = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        with RunStore() as store:
            # A suffix of digits (the ids' random part is hex: 1 in 9 is all digits) once went in as a PID.
            store.add_run(RunRecord(id="20260101-120000-4821", run_dir=str(tmp_path), created_at=time.time(),
                                    name="watched", supervisor_pid=me.pid, supervisor_started=me.create_time(),
                                    launcher_pid=launcher.pid))
        for text in ("watched", "4821", "20260101-12", "20260101-120000-4821"):
            shown = traindeck("runs", "show", text)  # what every other run command accepts ...
            assert shown.returncode == 0 and "20260101-120000-4821" in shown.stdout, (text, shown.stderr)
            result = traindeck("monitor", "--once", "--json", "--run", text)  # ... monitor takes too
            assert result.returncode == 0, (text, result.stderr)
            assert json.loads(result.stdout)["root_pid"] == launcher.pid, text
        # A plain number that names no run is a PID (a process started outside traindeck).
        result = traindeck("monitor", "--once", "--json", "--run", str(launcher.pid))
        assert result.returncode == 0 and json.loads(result.stdout)["root_pid"] == launcher.pid
        unknown = traindeck("monitor", "--once", "--run", "no-such-run")
        assert unknown.returncode == 2 and unknown.stderr.startswith("traindeck: no run matches 'no-such-run'")
    finally:
        launcher.kill()
        launcher.wait()


def test_foreground_follow_jumps_ahead_of_a_flood_and_says_so(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    # A run whose log already holds 10 MiB unread, as when a flood outruns the terminal: the foreground view shows
    # the newest output, says what it skipped and where every line is; the log itself is untouched.
    from traindeck.backend.cli import run_follow

    log = tmp_path / "output.log"
    count = 160_000
    with open(log, "w") as handle:
        for i in range(count):
            handle.write(f"line {i:08d} lorem ipsum dolor sit amet, consectetur adipiscing elit\n")
    size = log.stat().st_size
    assert size > 2 * run_follow.SKIP_AT_BYTES
    with RunStore() as store:
        store.add_run(RunRecord(id="20260101-120000-f100", run_dir=str(tmp_path), created_at=time.time(),
                                name="flood", state="succeeded", exit_code=0, started_at=time.time() - 5,
                                ended_at=time.time()))
        shown: list[str] = []

        class Sink:
            def write(self, text: str) -> None:
                shown.extend(text.splitlines())

            def flush(self) -> None:
                pass

        assert run_follow.follow_run(store, "20260101-120000-f100", stream=Sink()) == 0
    err = capsys.readouterr().err
    assert shown[-1] == f"line {count - 1:08d} lorem ipsum dolor sit amet, consectetur adipiscing elit"
    assert len(shown) < count // 10  # the newest lines, not the whole flood
    first_shown = int(shown[0].split()[1])
    assert shown == [f"line {i:08d} lorem ipsum dolor sit amet, consectetur adipiscing elit"
                     for i in range(first_shown, count)]  # whole lines, in order, from where it jumped to
    assert "output arrives faster than this terminal can show it: skipped" in err
    assert "(output.log keeps every line: traindeck logs 20260101-120000-f100)" in err
    assert log.stat().st_size == size


def test_a_queued_run_is_listed_as_queued_not_as_started(tmp_path: Path) -> None:
    """A run waiting in the queue has not started: STARTED says when it was queued, as such, and TIME is empty."""
    created = time.time() - 600
    with RunStore() as store:
        store.add_run(RunRecord(id="20261124-000000-qqqq", run_dir=str(tmp_path), created_at=created,
                                name="for-tonight", state="queued"))
    rows = table(traindeck("runs", "list", env={"COLUMNS": "200"}).stdout)
    row = rows["20261124-000000-qqqq"]
    assert row["STATE"] == "queued" and row["TIME"] == "-"
    assert row["STARTED"] == time.strftime("queued %H:%M", time.localtime(created))


def test_a_stalled_runs_progress_says_stalled_not_its_last_rate_and_eta() -> None:
    from traindeck.backend.cli.run_lookup import progress_text

    progress = {"current": 78, "total": 100, "rate": 8.86, "eta_s": 200, "unit": "step"}
    assert progress_text(progress) == "78/100 (78%) 8.86 step/s ETA 3:20"
    assert progress_text(progress, stalled=True) == "78/100 (78%) stalled"
    assert progress_text(progress, running=False, stalled=True) == "78/100 (78%) 8.86 step/s"
