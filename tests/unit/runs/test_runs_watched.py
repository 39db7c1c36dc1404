"""The watched run's model (backend/runs/control/watched_run.py) without a widget: real run stores, real reads (watch.read_view),
the model's answers checked as the Runs page would draw them."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from traindeck.backend.runs.control import view as watch
from traindeck.backend.runs.control.watched_run import STOPPED_TRACEBACK_NOTE, WatchedRun
from traindeck.backend.runs.record.run_store import RunRecord, RunStore


@pytest.fixture
def store(tmp_path: Path):  # type: ignore[no-untyped-def]
    with RunStore(tmp_path / "runs.sqlite3") as opened:
        yield opened


def _run(store: RunStore, tmp_path: Path, run_id: str = "r1") -> str:
    store.add_run(RunRecord(id=run_id, run_dir=str(tmp_path / run_id), created_at=time.time(), name=run_id,
                            started_at=time.time()))
    return run_id


def _read(model: WatchedRun, store: RunStore):  # type: ignore[no-untyped-def]
    """One poll as the page makes it: ask, read, apply."""
    generation = model.begin_poll()
    assert generation is not None
    arguments = model.read_arguments()
    view = watch.read_view(store, model.run_id, **arguments)  # type: ignore[arg-type]
    return model.apply(generation, view)


def test_a_late_answer_about_the_previous_run_is_dropped(store: RunStore, tmp_path: Path) -> None:
    model = WatchedRun()
    first, second = _run(store, tmp_path, "a"), _run(store, tmp_path, "b")
    model.open(first)
    generation = model.begin_poll()
    assert generation is not None
    late = watch.read_view(store, first, **model.read_arguments())
    assert model.open(second) and not model.open(second)  # opening the same run twice does nothing
    assert model.apply(generation, late) is None  # about `a`: dropped
    assert model.record is None and model.run_id == second
    change = _read(model, store)
    assert change is not None and change.first and change.record.id == second


def test_a_poll_asked_while_one_is_on_its_way_follows_it(store: RunStore, tmp_path: Path) -> None:
    model = WatchedRun()
    model.open(_run(store, tmp_path))
    generation = model.begin_poll()
    assert generation is not None and model.begin_poll() is None  # on its way: noted, not doubled
    view = watch.read_view(store, "r1", **model.read_arguments())
    change = model.apply(generation, view)
    assert change is not None and change.poll_again and not change.done


def _points(model: WatchedRun, name: str) -> list[tuple[float, float]]:
    xs, ys = model.series[name].points()
    return list(zip(xs, ys, strict=True))


def test_metrics_choose_the_other_series_then_chart_only_new_points(store: RunStore, tmp_path: Path) -> None:
    model = WatchedRun()
    run_id = _run(store, tmp_path)
    t0 = time.time()
    store.add_metrics(run_id, [("loss", 1, t0, 2.0, 0), ("learning_rate", 1, t0, 1e-4, 0)])
    model.open(run_id)
    change = _read(model, store)
    assert change is not None and change.names_changed and change.other_changed and change.new_metrics
    assert model.other == "learning_rate" and model.metrics == {"loss": 2.0, "learning_rate": 1e-4}
    assert change.poll_again and not change.series and not model.series  # the charts' whole series come next
    assert model.read_arguments()["whole_series"] == ["loss", "learning_rate"]
    whole = _read(model, store)
    assert whole is not None and whole.series == {"loss", "learning_rate"}
    assert _points(model, "loss") == [(1.0, 2.0)] and _points(model, "learning_rate") == [(1.0, 1e-4)]
    assert not whole.poll_again and model.read_arguments()["whole_series"] == []
    store.add_metrics(run_id, [("loss", 2, t0 + 1, 1.5, 0)])
    newer = _read(model, store)
    assert newer is not None and newer.series == {"loss"} and not newer.names_changed and newer.news
    assert _points(model, "loss") == [(1.0, 2.0), (2.0, 1.5)]  # appended once, not read whole again
    again = _read(model, store)
    assert again is not None and again.series == set() and not again.new_metrics  # nothing new: nothing drawn
    assert not again.news  # the page backs its polling off
    model.set_other("loss_scale")  # a series shown for the first time is read whole; the previous one forgotten
    assert model.read_arguments()["whole_series"] == ["loss_scale"] and "learning_rate" not in model.series


def test_points_sharing_a_timestamp_are_all_kept(store: RunStore, tmp_path: Path) -> None:
    """Steps logged in one batch share a time: a de-duplication by time dropped those read after the first poll."""
    model = WatchedRun()
    run_id = _run(store, tmp_path)
    t0 = time.time()
    store.add_metrics(run_id, [("loss", 1, t0, 3.0, 0)])
    model.open(run_id)
    _read(model, store)
    _read(model, store)  # the loss chart's whole series
    store.add_metrics(run_id, [("loss", 2, t0 + 1, 2.8, 0)])
    _read(model, store)
    store.add_metrics(run_id, [("loss", step, t0 + 1, 3.0 - step / 10, 0) for step in (3, 4)])  # same time
    change = _read(model, store)
    assert change is not None and change.series == {"loss"}
    assert [x for x, _y in _points(model, "loss")] == [1.0, 2.0, 3.0, 4.0]
    assert model.series["loss"].count == 4


def test_the_end_is_seen_once_then_polling_stops_when_nothing_remains(store: RunStore, tmp_path: Path) -> None:
    model = WatchedRun()
    ended: list[str] = []
    model.on("ended", lambda watched: ended.append(watched.run_id or ""))
    run_id = _run(store, tmp_path)
    model.open(run_id)
    store.finish_run(run_id, "succeeded", exit_code=0, ended_at=time.time())
    change = _read(model, store)
    assert change is not None and change.ended_now and change.poll_again and not change.done
    assert model.read_arguments()["check_remaining"]
    last = _read(model, store)
    assert last is not None and not last.ended_now and last.done and model.remaining == []
    assert ended == [run_id]


def test_the_stop_story_from_our_request_to_the_confirmation(store: RunStore, tmp_path: Path) -> None:
    model = WatchedRun()
    run_id = _run(store, tmp_path)
    model.open(run_id)
    assert model.stop_story() is None
    model.stop_asked(force=False, grace_s=10.0)
    title, lines = model.stop_story()  # type: ignore[misc]
    assert title == "Stopping…" and lines[0].endswith("asked the run to stop (grace 10 s)") and model.stop_pending
    store.add_event(run_id, "stop_requested", "stop requested (grace 10 s)")
    store.add_event(run_id, "confirmed", "nothing of the run remains (4 process(es) seen in all)")
    store.finish_run(run_id, "stopped", ended_at=time.time())
    store.add_event(run_id, "finished", "stopped: Stopped on request gracefully (SIGINT).")
    _read(model, store)
    _read(model, store)
    title, lines = model.stop_story()  # type: ignore[misc]
    assert title == "Stopped"
    assert lines[-2:] == [STOPPED_TRACEBACK_NOTE, "confirmed: no process of the run remains"]
    # Each thing said once: the supervisor's "stop requested" replaces our "asked", our confirmation its own, and
    # the end reads "Stopped on request ...", not "stopped: Stopped on request ...".
    text = "\n".join(lines)
    assert "asked the run to stop" not in text and text.count("stop requested (grace 10 s)") == 1
    assert "nothing of the run remains" not in text
    assert any(line.endswith("  Stopped on request gracefully (SIGINT).") for line in lines)


def test_a_failed_stop_about_another_run_is_not_told(store: RunStore, tmp_path: Path) -> None:
    model = WatchedRun()
    model.open(_run(store, tmp_path, "a"))
    generation = model.generation
    model.stop_asked(force=True, grace_s=0)
    model.open(_run(store, tmp_path, "b"))
    assert not model.stop_failed(generation, "no such process")
    assert model.stop_lines == [] and model.stop_story() is None
    assert model.stop_failed(model.generation, "permission denied")
    assert model.stop_lines == ["the stop request failed: permission denied"] and not model.stop_pending


def test_closing_drops_answers_and_an_unknown_run_says_so(store: RunStore, tmp_path: Path) -> None:
    model = WatchedRun()
    model.open(_run(store, tmp_path))
    generation = model.begin_poll()
    model.close()
    assert model.run_id is None and model.begin_poll() is None
    assert model.apply(generation or 0, watch.read_view(store, "r1")) is None and model.record is None
    model.open("nope")
    assert _read(model, store) is None and model.missing
