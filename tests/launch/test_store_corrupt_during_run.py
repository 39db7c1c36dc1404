"""A run store corrupted while a real supervised run writes to it: the run's end still reaches the rebuilt store,
whether the store is rebuilt while the run goes on or only after it ended (then from the run folder's end.json)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from support.runhelp import leftovers, python_job, wait_finished, wait_until

from traindeck.backend.core.paths import run_store_path
from traindeck.backend.runs.record.run_store import RunStore
from traindeck.backend.runs.record.store_rebuild import metrics_from_log


def overwrite_the_store() -> None:
    """Garbage over the whole file, once the write-ahead log has been copied into it (while the log holds a page,
    readers take that page from the log, and the next checkpoint writes it back over the garbage)."""
    path = run_store_path()
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    size = path.stat().st_size
    with open(path, "r+b") as handle:
        handle.write((b"this is not sqlite at all " * (size // 26 + 1))[:size])


def losses_in(log: Path) -> set[tuple[int | None, float]]:
    rows, _ = metrics_from_log(log, 0.0, 1.0)
    return {(step, value) for name, step, _, value, _ in rows if name == "loss"}


def test_a_store_rebuilt_while_the_run_goes_on_gets_the_rest_of_the_run_and_its_end() -> None:
    record = python_job("--steps", "60", "--step-time", "0.1")
    wait_until(lambda: "'loss'" in Path(record.run_dir, "output.log").read_text(), timeout=60)
    overwrite_the_store()
    with RunStore() as store:  # what any command does first: the store is rebuilt from the folders
        assert store.rebuilt is not None and "rebuilt 1 run " in store.rebuilt
        running = store.get_run(record.id)
        assert running is not None and running.state == "running" and running.supervisor_pid is not None
    done = wait_finished(record.id, timeout=120)
    assert (done.state, done.exit_code) == ("succeeded", 0)
    end = json.loads(Path(record.run_dir, "end.json").read_text())
    assert end["state"] == "succeeded" and end["exit_code"] == 0 and end["ended_at"] == done.ended_at
    with RunStore() as store:
        losses = store.metric_series(record.id, "loss")
        kinds = [e.kind for e in store.events(record.id)]
    # Those before the rebuild (from output.log) and after it (the supervisor writes into the rebuilt store). The
    # supervisor's last batch before the rebuild may come twice (also parsed from output.log), its step counted
    # one bar earlier: the values are compared.
    assert {value for _, _, value in losses} == {value for _, value in losses_in(Path(record.run_dir, "output.log"))}
    assert len(losses_in(Path(record.run_dir, "output.log"))) == 12 and losses[-1][2] == round(1 / 60, 4)
    assert "rebuilt" in kinds and "finished" in kinds
    assert "it was replaced, so it is opened again" in Path(record.run_dir, "supervisor.log").read_text()
    assert leftovers(done) == []


def test_a_store_corrupted_during_the_run_and_rebuilt_after_it_has_the_end_from_end_json() -> None:
    record = python_job("--steps", "20", "--step-time", "0.1", "--end", "exit:3")
    wait_until(lambda: "'loss'" in Path(record.run_dir, "output.log").read_text(), timeout=60)
    overwrite_the_store()
    end_file = Path(record.run_dir, "end.json")
    wait_until(end_file.exists, timeout=120)
    supervisor = record.supervisor_pid
    assert supervisor is not None
    wait_until(lambda: not Path(f"/proc/{supervisor}").exists(), timeout=60)
    with RunStore() as store:
        assert store.rebuilt is not None and "was corrupt" in store.rebuilt
        got = store.get_run(record.id)
        assert got is not None and (got.state, got.exit_code) == ("failed", 3)
        assert got.diagnosis is not None and got.diagnosis == json.loads(end_file.read_text())["diagnosis"]
        got_losses = {(step, value) for step, _, value in store.metric_series(record.id, "loss")}
        assert got_losses == losses_in(Path(record.run_dir, "output.log")) and len(got_losses) == 4
    assert not [p for p in run_store_path().parent.iterdir() if ".rebuilding-" in p.name]
