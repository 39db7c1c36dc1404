"""Scoring: the measured window from the ranks' step records, the headroom verdict, the ranking and the winner."""

from __future__ import annotations

from traindeck.backend.steps import StepRecord
from traindeck.backend.trials import Result, measure, ranking, winner
from traindeck.backend.trials.scoring import passed_over, tightness

MIB = 2**20


def _step(rank: int, step: int, ms: float, rss: int = 100 * MIB, reserved: int | None = None) -> StepRecord:
    return StepRecord(rank=rank, step=step, t=1000.0 + step, step_ms=ms, phases_ms={"other": ms}, host_rss=rss,
                      gpu_reserved=reserved)


def test_a_step_counts_once_every_rank_has_it_and_takes_its_slowest_ranks_time() -> None:
    records = [_step(0, s, 10.0 + s) for s in range(1, 8)] + [_step(1, s, 20.0 + s) for s in range(1, 6)]
    records.append(_step(0, 9, 5.0))  # rank 0 ahead, with a gap at step 8: not counted yet
    m = measure(records, warmup=2, steps=3, ranks=2)
    assert m.done_steps == 5 and m.ranks == 2
    assert m.steps_ms == [23.0, 24.0, 25.0]  # steps 3..5, rank 1 (the slower) each
    assert m.median_ms == 24.0 and m.last_t == 1005.0
    assert measure(records, warmup=2, steps=3, ranks=3).done_steps == 0  # a rank not heard from yet


def test_peaks_are_the_largest_any_rank_reached() -> None:
    records = [_step(0, 1, 10, rss=300 * MIB, reserved=2 * MIB), _step(1, 1, 10, rss=500 * MIB, reserved=7 * MIB),
               _step(0, 2, 10, rss=400 * MIB)]
    m = measure(records, warmup=0, steps=2)
    assert (m.peak_host_bytes, m.peak_gpu_bytes) == (500 * MIB, 7 * MIB)


def test_headroom_says_which_memory_is_too_full() -> None:
    assert tightness(95, 100, 10, 100, 0.1) == "peak GPU memory 0 MiB leaves less than 10% of 0 MiB"
    assert tightness(85, 100, 10, 100, 0.1) is None
    said = tightness(None, None, 950 * MIB, 1000 * MIB, 0.1)
    assert said == "peak host memory per rank 950 MiB leaves less than 10% of 1000 MiB"


def _result(state: str, rate: float | None, step: float | None) -> Result:
    return Result(candidate={"stage": 2, "offload": "none", "micro_batch": 1}, state=state, samples_per_s=rate,
                  step_ms=step, reason="peak GPU memory high" if state == "too_tight" else None)


def test_the_fastest_measured_candidate_wins_and_a_faster_too_tight_one_is_said_passed_over() -> None:
    results = [_result("measured", 100.0, 40.0), _result("too_tight", 300.0, 10.0), _result("failed", None, None),
               _result("measured", 200.0, 30.0), _result("skipped", None, None)]
    assert ranking(results) == [3, 0]
    assert winner(results) == 3
    assert passed_over(results) == ["#1 zero2-none-mb1 was faster (300.0 samples/s) but too tight: peak GPU memory "
                                    "high"]
    assert winner([_result("failed", None, None)]) is None
