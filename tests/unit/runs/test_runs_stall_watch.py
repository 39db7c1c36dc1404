"""StallWatch over the real run store: a quiet run stalls; a build (in the log or as compiler processes) is shown
instead and delays the stall; a stop freezes the verdict; the stall's stacks reach the diagnosis only for a hang."""

from __future__ import annotations

import time

from traindeck.backend.runs.diagnosis.stall import Quiet, StallWatch
from traindeck.backend.runs.record.layout import create_run_dir
from traindeck.backend.runs.record.run_store import RunRecord, RunStore


def _watch(store: RunStore) -> tuple[StallWatch, str]:
    run_dir = create_run_dir()
    store.add_run(RunRecord(id=run_dir.run_id, run_dir=str(run_dir.path), created_at=time.time()))
    return StallWatch(store, run_dir.run_id, run_dir.path, 120.0, lambda text: None), run_dir.run_id


def _story(store: RunStore, run_id: str) -> list[tuple[str, str]]:
    return [(e.kind, e.text) for e in store.events(run_id)]


def _detail(store: RunStore, run_id: str) -> str:
    record = store.get_run(run_id)
    assert record is not None
    return record.state_detail


def test_quiet_run_stalls_and_resumes() -> None:
    with RunStore() as store:
        watch, run_id = _watch(store)
        watch.check(100.0, Quiet(0.0, 0.0, [], {}), [], list)
        assert not watch.stalled and _story(store, run_id) == []
        watch.check(121.0, Quiet(0.0, 0.0, [], {}), [], list)
        assert watch.stalled and _detail(store, run_id) == "stalled: no output or progress for 2 min"
        watch.check(125.0, Quiet(124.0, 0.0, [], {}), [], list)
        assert not watch.stalled and _detail(store, run_id) == ""
        assert [k for k, _ in _story(store, run_id)] == ["stall", "resumed"]


def test_a_build_in_the_log_is_shown_instead_of_a_stall_and_quiet_counts_from_its_end() -> None:
    with RunStore() as store:
        watch, run_id = _watch(store)
        building = {"cpu_adam": 5.0}
        for now in (10.0, 200.0, 400.0):  # 400 s without a line: a build, not a stall
            watch.check(now, Quiet(5.0, 0.0, [], building), [], list)
        assert not watch.stalled
        assert _detail(store, run_id) == "building DeepSpeed's cpu_adam (first use, a few minutes)"
        watch.check(405.0, Quiet(404.0, 0.0, [], {}), [], list)  # "Time to load cpu_adam op" came
        assert _detail(store, run_id) == "" and _story(store, run_id)[-1] == ("op_built", "cpu_adam built in about 7 min")
        watch.check(500.0, Quiet(404.0, 0.0, [], {}), [], list)
        assert not watch.stalled, "quiet counts from the build's end (400 s), not from the last line"
        watch.check(530.0, Quiet(404.0, 0.0, [], {}), [], list)
        assert watch.stalled


def test_a_build_still_shown_when_the_run_ends_is_closed() -> None:
    with RunStore() as store:
        watch, run_id = _watch(store)
        watch.check(10.0, Quiet(5.0, 0.0, [], {"cpu_adam": 5.0}), [], list)
        watch.run_ended(100.0)  # built, loaded and exited between two checks
        assert _story(store, run_id)[-1] == ("op_built", "cpu_adam built in about 90 s")


def test_a_logged_build_without_its_end_is_trusted_for_ten_minutes_only() -> None:
    with RunStore() as store:
        watch, _run_id = _watch(store)
        watch.check(700.0, Quiet(5.0, 0.0, [], {"tiny_op": 5.0}), [], list)
        assert watch.stalled, "torch 2.x logs no 'loaded' line: an old announcement alone is not a build"


def test_stacks_reach_the_diagnosis_only_for_a_run_stopped_while_stalled() -> None:
    with RunStore() as store:
        watch, _run_id = _watch(store)
        watch.stall_stacks = "rank 1 is in train.py:88 load_batch; rank 0 waits in all_reduce (train.py:40 main)"
        watch.check(200.0, Quiet(0.0, 0.0, [], {}), [], list)
        assert watch.stalled
        assert watch.hang_stacks(last_progress=0.0) == watch.stall_stacks  # failed while hung
        watch.stop_requested()
        watch.check(300.0, Quiet(299.0, 0.0, [], {}), [], list)  # the ranks' KeyboardInterrupt tracebacks
        assert watch.stalled, "a stop freezes the verdict"
        assert watch.hang_stacks(last_progress=0.0) == watch.stall_stacks

        other, _ = _watch(store)
        other.stall_stacks = "rank 0 is in train.py:12 step"
        other.stop_requested()  # stopped while running normally
        assert other.hang_stacks(last_progress=0.0) == ""


def test_slow_steps_raise_the_stall_threshold_above_the_minimum() -> None:
    """With 30 s steps a run may be quiet for 10 x 30 s = 300 s before it counts as stalled, not the 120 s minimum."""
    with RunStore() as store:
        watch, run_id = _watch(store)
        steps = [30.0, 29.0, 31.0, 30.0, 30.5]
        watch.check(200.0, Quiet(0.0, 0.0, steps, {}), [], list)
        assert not watch.stalled and _story(store, run_id) == []
        watch.check(301.0, Quiet(0.0, 0.0, steps, {}), [], list)
        assert watch.stalled
        assert _detail(store, run_id) == "stalled: no output or progress for 5 min; a step usually takes 30.0 s"
