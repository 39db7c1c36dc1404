"""History's seconds per step and throughput leave the warm-up out: from the run's step-timing records (the median
after the first few steps, the rule of `runs show`'s step anatomy), else from its logged metrics after the first
steps. Two trial candidates are planted as the trial leaves them (step records in a real run store, the metrics
their scripts logged): History's figure agrees with the trial's own, and so does the order Compare puts them in."""

from __future__ import annotations

import pytest
from fixtures.history_runs import T0, make_run

from traindeck.backend.runs import compare_runs
from traindeck.backend.runs.control.history import run_figures
from traindeck.backend.runs.record.run_store import RunStore
from traindeck.backend.steps import StepRecord
from traindeck.backend.trials import Result
from traindeck.backend.trials.scoring import measure, ranking

# Each step's milliseconds on rank 0 (rank 1 is 2 ms quicker): DeepSpeed's first steps load ops and build caches.
ZERO2 = (2500.0, 800.0, 232.0, 233.0, 231.0)  # the faster one, once warm
ZERO3 = (600.0, 240.0, 237.0, 236.0, 238.0)
WARMUP, MEASURED = 2, 3  # the trial's window: steps 3 to 5


@pytest.fixture
def store():
    with RunStore() as s:
        yield s


def _candidate(store: RunStore, name: str, steps_ms: tuple[float, ...], started: float, port: int):
    ends, t = [], started + 20.0  # the script's start-up
    for ms in steps_ms:
        t += ms / 1000.0
        ends.append(t)
    run = make_run(store, name, stage=2, micro_batch=2, started=started, steps=len(steps_ms), samples=0,
                   state="stopped", port=port,
                   metrics=[("loss", s, ends[s - 1], 1.0, 0) for s in range(1, len(steps_ms) + 1)],
                   progress={"current": len(steps_ms), "total": 100, "rate": 1.0, "eta_s": 0, "unit": "it"})
    records = [StepRecord(rank, s, ends[s - 1], ms - 2.0 * rank, {"forward": ms / 3}) for rank in (0, 1)
               for s, ms in enumerate(steps_ms, start=1)]
    store.add_steps(run.id, records)
    measured = measure(records, WARMUP, MEASURED, ranks=2)
    return run, measured.median_ms


def test_a_candidates_step_time_and_throughput_agree_with_the_trials(store):
    fast, fast_ms = _candidate(store, "zero2", ZERO2, T0, 29600)
    slow, slow_ms = _candidate(store, "zero3", ZERO3, T0 + 60, 29601)
    assert (fast_ms, slow_ms) == (232.0, 237.0)

    a, b = run_figures(store, fast), run_figures(store, slow)
    assert a.seconds_per_step == pytest.approx(fast_ms / 1000, rel=0.01)
    assert b.seconds_per_step == pytest.approx(slow_ms / 1000, rel=0.01)
    assert a.seconds_per_step_source == "the middle half of 4 timed steps, the first 1 left out as warm-up"
    batch = 2 * 2  # micro batch 2 x 2 processes (make_run's preset: no train_batch_size)
    assert a.throughput == pytest.approx(batch * 1000 / fast_ms, rel=0.01)
    assert "step rate" in a.throughput_source

    # The trial's ranking (by samples/s) and Compare's agree: ZeRO-2 first.
    results = [Result({}, "measured", step_ms=ms, samples_per_s=batch * 1000 / ms) for ms in (slow_ms, fast_ms)]
    assert ranking(results) == [1, 0]
    compared = {row.what: row for row in compare_runs(store, slow.id, fast.id).figures}
    assert compared["Seconds per step"].change.endswith("(lower)")  # B (ZeRO-2) is quicker than A (ZeRO-3)
    assert compared["Throughput"].change.endswith("(higher)")


def test_without_step_records_the_logged_steps_after_the_warm_up_are_used(store):
    ends, t = [], T0 + 20.0
    for ms in (3000.0, 500.0, 500.0, 500.0, 500.0, 500.0, 500.0, 500.0, 500.0):
        t += ms / 1000.0
        ends.append(t)
    run = make_run(store, "no-timing", started=T0, steps=9, samples=0,
                   metrics=[("loss", s, ends[s - 1], 1.0, 0) for s in range(1, 10)])
    figures = run_figures(store, run)
    assert figures.seconds_per_step == pytest.approx(0.5)
    assert figures.seconds_per_step_source == "'loss' logged at steps 3 to 9 (the first 2 steps left out as warm-up)"
