"""What History's live comparison and run filters rest on: extend_overlay reads only a live run's new points and stops
with it; a comparison's figures follow newer rows without a read; the filter's substring, /regex/ and bad regex."""

from __future__ import annotations

import psutil
import pytest
from fixtures.history_runs import T0, make_run

from traindeck.backend.runs.control.compare import compare_many, compare_runs, extend_overlay, overlay
from traindeck.backend.runs.control.history import run_figures
from traindeck.backend.runs.control.run_filter import count_text, figures_words, parse_filter, record_words
from traindeck.backend.runs.record.run_store import RunStore


def _loss(started: float, first: int, last: int) -> list[tuple[str, int, float, float, int]]:
    return [("loss", s, started + 30 + s, 3.0 - s / 400, 0) for s in range(first, last + 1, 5)]


def _live(store: RunStore, run_id: str) -> None:
    me = psutil.Process()
    store.update_run(run_id, state="running", ended_at=None, supervisor_pid=me.pid,
                     supervisor_started=me.create_time())


@pytest.fixture
def store():
    with RunStore() as s:
        yield s


def test_extend_overlay_reads_only_the_live_runs_new_points_and_stops_when_it_ends(store):
    done = make_run(store, "done", steps=300, samples=0, port=29720, metrics=_loss(T0, 5, 300))
    live = make_run(store, "live", steps=65, started=T0 + 1000, samples=0, port=29721, metrics=_loss(T0 + 1000, 5, 65))
    _live(store, live.id)
    first = overlay(store, [done.id, live.id], "loss", equal_steps=True)
    assert first.live == (live.id,) and first.common_step == 65 and first.curves[0].last_step == 300

    reads: list[tuple[str, float | None, int]] = []
    series = store.metric_series

    def counted(run_id, name, after_t=None):
        rows = series(run_id, name, after_t)
        reads.append((run_id, after_t, len(rows)))
        return rows

    store.metric_series = counted  # type: ignore[method-assign]
    store.add_metrics(live.id, _loss(T0 + 1000, 70, 105))
    second = extend_overlay(store, first)
    assert reads == [(live.id, T0 + 1000 + 30 + 65, 8)]  # the live run only, from its last point on: 70..105
    b = second.curves[1]
    assert b.steps == list(range(5, 106, 5)) and b.times[-1] == T0 + 1000 + 30 + 105 and b.last_step == 105
    assert second.common_step == 105 and second.curves[0].steps[-1] == 105  # cut anew at the step both reached
    assert second.whole[0].last_step == 300 and len(second.whole[0].steps) == 60

    store.add_metrics(live.id, _loss(T0 + 1000, 110, 110))
    store.finish_run(live.id, "succeeded", ended_at=T0 + 1200, exit_code=0)
    third = extend_overlay(store, second)
    assert third.live == () and third.curves[1].last_step == 110  # the last points, read once more
    reads.clear()
    assert extend_overlay(store, third) == third and reads == []  # nothing live: nothing read


def test_a_comparisons_figures_follow_newer_rows(store):
    a = make_run(store, "a", steps=300, samples=0, port=29722)
    b = make_run(store, "b", steps=60, started=T0 + 1000, samples=0, port=29723)
    _live(store, b.id)
    two = compare_runs(store, a.id, b.id)
    store.update_run(b.id, progress={"current": 105, "total": 300, "rate": 2.0, "unit": "it"})
    record = store.get_run(b.id)
    assert record is not None
    now = {b.id: run_figures(store, record)}
    steps = {f.what: f for f in two.with_figures(now).figures}["Steps"]
    assert (steps.a, steps.b) == ("300", "105")
    assert two.with_figures(now).unified_diff == two.unified_diff
    many = compare_many(store, [a.id, b.id, a.id])
    rows = {row.what: row for row in many.with_figures(now).figures}
    assert rows["Steps"].values == ("300", "105", "300")


def test_the_filter_matches_words_by_substring_or_regex_and_reports_a_bad_regex(store):
    run = make_run(store, "gpt2-finetune", preset="zero3", samples=0, port=29724)
    words = record_words(run)
    assert parse_filter("FINETUNE").matches(words) and parse_filter("zero3").matches(words)
    assert parse_filter(run.id[-5:]).matches(words) and parse_filter("train.py").matches(words)
    assert parse_filter("succeeded").matches(words) and not parse_filter("llama").matches(words)
    assert parse_filter("/^gpt\\d-fine/").matches(words) and not parse_filter("/^fine/").matches(words)
    bad = parse_filter("/gpt(/")
    assert bad.error.startswith("invalid regular expression") and not bad.active and bad.matches(words)
    assert parse_filter("").matches(words) and not parse_filter("  ").active
    record = store.get_run(run.id)
    assert record is not None
    tagged = figures_words(run_figures(store, record), ("sweep: lr (4 runs)",))
    assert parse_filter("4 runs").matches(tagged)
    assert count_text(4, 31) == "4 of 31 runs" and count_text(1, 1) == "1 run"
