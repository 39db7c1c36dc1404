"""What the run view reads and says: a run's view (incremental events and series), the runs list, the words for
progress, duration and stalls (a real store, no processes)."""

from __future__ import annotations

import time
from array import array
from pathlib import Path

import pytest

from traindeck.backend.runs.control import view as watch
from traindeck.backend.runs.record.run_store import RunRecord, RunStore


def add(store: RunStore, run_id: str, created: float, state: str = "running", **fields: object) -> None:
    store.add_run(RunRecord(id=run_id, run_dir=f"/nonexistent/{run_id}", created_at=created, name=run_id,
                            **fields))  # type: ignore[arg-type]
    if state != "running":
        store.finish_run(run_id, state, ended_at=created + 60)


def test_progress_in_words() -> None:
    text = watch.progress_text({"current": 1240, "total": 2000, "rate": 6.53, "eta_s": 116.0, "unit": "it"})
    assert text is not None
    assert text.fraction == pytest.approx(0.62)
    assert (text.count, text.rate, text.eta) == ("1,240 / 2,000 it", "6.53 it/s", "1:56")
    assert text.line() == "1,240 / 2,000 it (62%) · 6.53 it/s · 1:56 left"  # not "ETA 1:56": a time of day?
    slow = watch.progress_text({"current": 3, "total": None, "rate": 0.25, "eta_s": None, "unit": "step"})
    assert slow is not None and slow.fraction is None
    assert (slow.count, slow.rate, slow.eta) == ("3 steps", "4 s/step", "")
    done = watch.progress_text({"current": 10, "total": 10, "rate": 2.0, "eta_s": 0.0, "unit": "it"})
    assert done is not None and done.eta == ""  # nothing left to wait for
    assert watch.progress_text(None) is None and watch.progress_text({}) is None


def test_durations() -> None:
    assert watch.duration_text(7.9) == "0:07"
    assert watch.duration_text(754) == "12:34"
    assert watch.duration_text(3723) == "1:02:03"
    assert watch.duration_text(3 * 86400 + 4 * 3600 + 5 * 60 + 6) == "3 d 04:05:06"
    record = RunRecord(id="r", run_dir="/x", created_at=100.0, started_at=110.0, ended_at=170.0)
    assert watch.run_duration(record) == 60.0
    running = RunRecord(id="r", run_dir="/x", created_at=100.0, started_at=110.0)
    assert watch.run_duration(running, now=125.0) == 15.0


def test_stall_warning_only_while_running_and_stalled() -> None:
    stalled = RunRecord(id="r", run_dir="/x", created_at=1.0,
                        state_detail="stalled: no output or progress for 12 min; a step usually takes 1.5 s")
    assert watch.stall_warning(stalled) == stalled.state_detail
    assert watch.stall_warning(RunRecord(id="r", run_dir="/x", created_at=1.0, state_detail="stopping")) is None
    ended = RunRecord(id="r", run_dir="/x", created_at=1.0, state="failed", state_detail="stalled: no output")
    assert watch.stall_warning(ended) is None


def test_chart_names_put_losses_together_and_pick_a_useful_other() -> None:
    losses, others = watch.chart_names(["loss", "epoch", "eval_loss", "learning_rate", "grad_norm", "loss"])
    assert losses == ["eval_loss", "loss"]
    assert others == ["epoch", "grad_norm", "learning_rate"]
    assert watch.default_other(others) == "learning_rate"
    assert watch.default_other(["epoch", "zeta"]) == "epoch"
    assert watch.default_other(["alpha", "zeta"]) == "alpha"
    assert watch.default_other([]) is None


def test_read_view_returns_only_what_is_new(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.sqlite3")
    add(store, "r1", time.time())
    add(store, "other", time.time())
    store.add_event("r1", "started", "launcher started (pid 1)")
    store.add_metrics("r1", [("loss", 1, 10.0, 2.0, None), ("lr", 1, 10.0, 0.1, None), ("loss", 2, 11.0, 1.5, None)])
    first = watch.read_view(store, "r1", whole_series=["loss"])
    assert first is not None
    assert [e.kind for e in first.events] == ["started"]
    assert first.metrics == {"loss": 1.5, "lr": 0.1}  # every series' latest value
    assert first.series == {}
    assert list(first.whole) == ["loss"] and first.whole["loss"].recent_points() == (array("d", [1, 2]),
                                                                                      array("d", [2.0, 1.5]))
    assert first.remaining is None
    store.add_event("r1", "stop_requested", "stop requested (grace 10 s)")
    store.add_metrics("other", [("loss", 1, 11.5, 9.0, None)])  # another run's rows are not this one's
    store.add_metrics("r1", [("loss", 3, 12.0, 1.2, None), ("acc", 3, 12.0, 0.5, None)])
    second = watch.read_view(store, "r1", after_event=first.events[-1].id, metric_mark=first.metric_mark,
                             whole_series=["lr"])
    assert second is not None
    assert [e.kind for e in second.events] == ["stop_requested"]
    assert second.metrics == {"loss": 1.2, "acc": 0.5}  # only what changed
    assert second.series == {"loss": [(3, 12.0, 1.2)], "acc": [(3, 12.0, 0.5)]}
    assert second.whole["lr"].recent_points() == (array("d", [1]), array("d", [0.1]))
    assert second.whole["lr"].last_t == 10.0
    third = watch.read_view(store, "r1", after_event=second.events[-1].id, metric_mark=second.metric_mark)
    assert third is not None and third.metrics == {} and third.series == {} and third.events == []
    assert third.metric_mark == second.metric_mark
    assert watch.read_view(store, "nope") is None


def test_last_metrics_of_a_long_run(tmp_path: Path) -> None:
    # 60k rows: one pass takes milliseconds; the per-row correlated subquery this replaced ran for many minutes
    # (past pytest's timeout) on such a run.
    store = RunStore(tmp_path / "runs.sqlite3")
    add(store, "long", time.time())
    store.add_metrics("long", [(name, step, float(step), step * 0.5, None)
                               for step in range(20_000) for name in ("loss", "lr", "epoch")])
    assert store.last_metrics("long") == {"epoch": 9999.5, "loss": 9999.5, "lr": 9999.5}


def test_read_view_checks_for_remaining_processes_once_ended(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.sqlite3")
    add(store, "r1", time.time(), state="failed")
    view = watch.read_view(store, "r1", check_remaining=True)
    assert view is not None and view.remaining == []


def test_runs_for_list_puts_running_runs_first_and_marks_orphans_lost(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.sqlite3")
    now = time.time()
    add(store, "old-done", now - 500, state="succeeded")
    add(store, "older-running", now - 30)  # no supervisor yet, but started recently: still starting
    add(store, "new-done", now - 10, state="failed")
    add(store, "newer-running", now - 5)
    add(store, "orphan", now - 3600)  # no supervisor for an hour: lost
    records = watch.runs_for_list(store)
    assert [r.id for r in records] == ["newer-running", "older-running", "new-done", "old-done", "orphan"]
    assert {r.id: r.state for r in records}["orphan"] == "lost"
    newest = watch.newest_running(records)
    assert newest is not None and newest.id == "newer-running"
    assert watch.newest_running([r for r in records if r.state != "running"]) is None


def test_force_stop_of_an_ended_run_says_so(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.sqlite3")
    add(store, "r1", time.time(), state="stopped")
    assert watch.force_stop(store, "r1") == ["run r1 already ended (stopped)"]
    with pytest.raises(KeyError):
        watch.force_stop(store, "missing")
