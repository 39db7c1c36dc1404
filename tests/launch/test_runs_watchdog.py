"""The loss watchdog and alerts: rules on values, then real runs whose notify command records what it was told."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

from support import TESTS
from support.runhelp import wait_finished, wait_until

from traindeck.backend.logparse import LineAssembler, OutputParser
from traindeck.backend.runs.record.run_store import RunRecord, RunStore
from traindeck.backend.runs.supervisor.loss_guard import LossCheck, is_loss

JOB = TESTS / "fixtures" / "scripts" / "queue_job.py"
RECORDER = "import json, os, sys; open(sys.argv[1], 'a').write(json.dumps({k: v for k, v in os.environ.items() " \
           "if k.startswith('TRAINDECK_') and k not in ('TRAINDECK_HOME',)}) + '\\n')"


def cli(*args: str, cwd: Path = JOB.parent) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "traindeck", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd)


def test_loss_rules():
    assert is_loss("loss") and is_loss("eval_loss") and is_loss("train/loss") and not is_loss("lossy")
    check = LossCheck(jump_factor=10)
    assert check.feed("learning_rate", 1, math.nan) is None  # not a loss
    for step, value in enumerate([1.0, 0.9, 0.8, 0.85, 0.7], start=1):
        assert check.feed("loss", step, value) is None
    jump = check.feed("loss", 6, 8.0)
    assert jump is None  # 8.0 < 10 x the median 0.85
    jump = check.feed("loss", 7, 20.0)
    assert jump is not None and jump.kind == "jump" and "at step 7" in jump.text
    nan = check.feed("loss", 8, math.nan)
    assert nan is not None and nan.text == "loss became NaN at step 8"
    assert check.feed("loss", 9, math.nan) is None  # said once
    inf = check.feed("eval_loss", None, math.inf)
    assert inf is not None and inf.text == "eval_loss became inf"


def test_trainer_nan_lines_are_parsed_and_a_nan_does_not_lose_the_batch():
    parser, lines = OutputParser(), LineAssembler().feed(b"{'loss': nan, 'grad_norm': inf, 'step': 4}\n")
    metrics = [m for line in lines for m in parser.feed(line)]
    assert [(m.name, m.step) for m in metrics] == [("loss", 4), ("grad_norm", 4)]
    assert math.isnan(metrics[0].value) and metrics[1].value == math.inf
    with RunStore() as store:
        store.add_run(RunRecord(id="r", run_dir="/tmp/r", created_at=time.time()))
        store.add_metrics("r", [("loss", 4, 1.0, math.nan, None), ("grad_norm", 4, 1.0, math.inf, None),
                                ("lr", 4, 1.0, 1e-5, None)])
        assert store.last_metrics("r") == {"grad_norm": math.inf, "lr": 1e-5}


def _events(path: Path, count: int) -> list[dict[str, str]]:
    def read() -> list[dict[str, str]] | None:
        lines = path.read_text().splitlines() if path.exists() else []
        return [json.loads(x) for x in lines] if len(lines) >= count else None

    return wait_until(read, 60)


def test_notify_gets_succeeded_failed_and_nan_and_stop_on_nan_stops_within_seconds(tmp_path: Path):
    out = tmp_path / "events.jsonl"
    assert cli("notify", "--command", sys.executable, "-c", RECORDER, str(out)).returncode == 0
    ok = cli("run", "--detach", "--launcher", "python", "--name", "fine", JOB.name, "--steps", "2")
    assert ok.returncode == 0, ok.stderr
    ok_id = ok.stdout.strip().splitlines()[-1]
    assert wait_finished(ok_id).state == "succeeded"
    bad = cli("run", "--detach", "--launcher", "python", "--name", "broken", JOB.name, "--steps", "1", "--exit", "4")
    bad_id = bad.stdout.strip().splitlines()[-1]
    assert wait_finished(bad_id).state == "failed"

    stamp = tmp_path / "nan.json"
    nan = cli("run", "--detach", "--launcher", "python", "--stop-on-nan", "--name", "diverges", JOB.name,
              "--steps", "600", "--step-time", "0.1", "--nan-at", "12", "--stamp", str(stamp))
    nan_id = nan.stdout.strip().splitlines()[-1]
    record = wait_finished(nan_id, timeout=120)
    printed = json.loads(stamp.read_text())["nan_printed"]
    assert record.state == "stopped"
    assert record.diagnosis is not None and record.diagnosis["summary"] == "stopped: loss became NaN at step 12"
    with RunStore() as store:
        events = store.events(nan_id)
    asked = next(e.t for e in events if e.kind == "watchdog_stop")
    print(f"\nstop-on-nan: NaN line printed -> stop asked {asked - printed:.2f} s, -> run ended "
          f"{record.ended_at - printed:.2f} s")
    # How fast is measured (tests/perf/bench_queue.py), not asserted; "stopped" already says it did not run on.

    events_seen = _events(out, 4)
    by_run = {(e["TRAINDECK_RUN_ID"], e["TRAINDECK_EVENT"]): e for e in events_seen}
    assert by_run[(ok_id, "succeeded")]["TRAINDECK_RUN_NAME"] == "fine"
    assert by_run[(bad_id, "failed")]["TRAINDECK_DIAGNOSIS"]
    assert by_run[(nan_id, "nan")]["TRAINDECK_DIAGNOSIS"] == "loss became NaN at step 12"
    assert by_run[(nan_id, "stopped")]["TRAINDECK_DIAGNOSIS"] == "stopped: loss became NaN at step 12"
    assert len(events_seen) == 4


def test_a_hanging_or_failing_notify_command_never_affects_the_run(tmp_path: Path):
    assert cli("notify", "--time-limit", "1", "--command", "sleep", "60").returncode == 0
    run = cli("run", "--detach", "--launcher", "python", JOB.name, "--steps", "1")
    record = wait_finished(run.stdout.strip().splitlines()[-1])
    assert record.state == "succeeded"
    from traindeck.backend.runs.supervisor import alerts

    log = wait_until(lambda: alerts.log_path().exists() and alerts.log_path().read_text(), 30)
    assert "killed after 1 s (time limit)" in log
    assert cli("notify", "--command", "/nonexistent/tool").returncode == 0
    assert "could not start" in cli("notify", "--test").stdout + alerts.log_path().read_text()
    assert cli("notify", "--off").returncode == 0 and "alerts off" in cli("notify").stdout


def test_stalled_and_lost_runs_are_announced(tmp_path: Path):
    import os
    import signal

    from support.runhelp import start

    out = tmp_path / "events.jsonl"
    assert cli("notify", "--command", sys.executable, "-c", RECORDER, str(out)).returncode == 0
    # Quiet for 8 s with a 2 s stall threshold (checked every 5 s): stalled, then it ends by itself.
    quiet = start([sys.executable, str(JOB), "--steps", "1", "--step-time", "8"], cwd=JOB.parent, name="quiet",
                  stall_min_s=2.0)
    # Its supervisor SIGKILLed: the sentinel marks it lost.
    doomed = start([sys.executable, str(JOB), "--steps", "300", "--step-time", "0.1"], cwd=JOB.parent, name="doomed")
    with RunStore() as store:  # started for real (its sentinel is up once the launcher is)
        record = wait_until(lambda: (lambda r: r if r.launcher_pid else None)(store.get_run(doomed.id)), 30)
    os.kill(record.supervisor_pid, signal.SIGKILL)
    assert wait_finished(doomed.id).state == "lost"
    assert wait_finished(quiet.id).state == "succeeded"
    seen = {(e["TRAINDECK_RUN_NAME"], e["TRAINDECK_EVENT"]) for e in _events(out, 3)}
    assert {("quiet", "stalled"), ("doomed", "lost"), ("quiet", "succeeded")} <= seen
