"""A real supervised run whose run store is then damaged: the next command rebuilds the store from the run folders,
and the run keeps its story there: its events (from the run folder's events file) and its metrics (from output.log),
with one line saying how many of each were rebuilt."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.runhelp import get, python_job, wait_until

from traindeck.backend.core.paths import run_store_path
from traindeck.backend.runs.control.lifecycle import stop_run
from traindeck.backend.runs.record.run_store import RunStore


def truncate(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def garbage_header(path: Path) -> None:
    with open(path, "r+b") as handle:
        handle.write(b"this is not sqlite at all")


def checkpointed() -> Path:
    """The store with its write-ahead log merged into it, so that damage to the file is damage to every row."""
    import sqlite3

    path = run_store_path()
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    return path


def traindeck(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "traindeck", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("damage", [truncate, garbage_header])
def test_a_stopped_run_keeps_its_events_and_metrics_through_a_rebuilt_store(damage) -> None:  # type: ignore[no-untyped-def]
    run = python_job("--steps", "1000", "--step-time", "0.02")
    wait_until(lambda: (get(run.id).progress or {}).get("current", 0) >= 20, timeout=60)
    outcome = stop_run(RunStore(), run.id, grace_s=5)
    assert outcome.state == "stopped"
    shown = traindeck("runs", "show", run.id, "--json")
    assert shown.returncode == 0, shown.stderr
    before = json.loads(shown.stdout)
    with RunStore() as store:
        events = [(e.t, e.kind, e.text) for e in store.events(run.id)]
        losses = store.metric_series(run.id, "loss")
    kinds = [kind for _, kind, _ in events]
    for kind in ("started", "stop_requested", "launcher_exit", "finished"):
        assert kind in kinds, kinds
    assert before["end_check"] is not None and before["metrics"]["loss"] > 0 and len(losses) >= 4

    damage(checkpointed())
    again = traindeck("runs", "show", run.id, "--json")
    assert again.returncode == 0, again.stderr
    [said] = again.stderr.splitlines()
    assert said.startswith(f"traindeck: the run store {run_store_path()} was corrupt"), said
    assert f"rebuilt 1 run from their folders ({len(events)} events, " in said, said
    after = json.loads(again.stdout)
    for key in ("state", "exit_code", "state_detail", "end_check", "cgroup", "metrics"):
        assert after[key] == before[key], key
    with RunStore() as store:
        rebuilt = [(e.t, e.kind, e.text) for e in store.events(run.id)]
        got_losses = store.metric_series(run.id, "loss")
        points = sum(len(store.metric_series(run.id, name)) for name in after["metrics"])
    assert rebuilt[:-1] == events and rebuilt[-1][1] == "rebuilt"  # the same story, in order, at the same times
    assert f"{len(events)} earlier events taken back from its folder" in rebuilt[-1][2]
    assert [value for _, _, value in got_losses] == [value for _, _, value in losses]
    assert f"{len(events)} events, {points} metric points)" in said and points >= 3 * len(got_losses)
