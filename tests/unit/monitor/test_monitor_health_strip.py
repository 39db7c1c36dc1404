"""The health strip's spans: GPU health readings (the run store's rows) cut into time spans with one state each,
and the step running at a time."""

from __future__ import annotations

from traindeck.backend.monitor import HealthTimeline, health_spans, span_at, spans_by_gpu, step_at

LINK_FULL = {"gen": 4, "max_gen": 4, "width": 16, "max_width": 16}
LINK_DOWN = {"gen": 2, "max_gen": 4, "width": 8, "max_width": 16}


def row(throttle=(), pcie=LINK_FULL, util=90.0, xid=()):  # type: ignore[no-untyped-def]
    return {"throttle": list(throttle), "throttle_known": True, "pcie": pcie, "pcie_replays": 0, "ecc": None,
            "xid": list(xid), "util": util}


def test_a_throttle_episode_and_a_slow_link_while_busy_are_spans_of_their_own() -> None:
    rows = [(0.0, row(["gpu_idle"], util=0.0)), (10.0, row()), (20.0, row(["sw_power_cap", "gpu_idle"])),
            (25.0, row(["hw_thermal_slowdown"])), (30.0, row(pcie=LINK_DOWN)), (40.0, row(pcie=LINK_DOWN, util=5.0))]
    spans = health_spans(rows, until=50.0)
    assert [(s.start, s.end, s.state, s.reasons) for s in spans] == [
        (0.0, 20.0, "ok", ()),  # idle then busy at full link: one "ok" span
        (20.0, 25.0, "throttled", ("sw_power_cap",)),
        (25.0, 30.0, "throttled", ("hw_thermal_slowdown",)),
        (30.0, 40.0, "pcie", ()),
        (40.0, 50.0, "ok", ()),  # the same slow link on an idle GPU is the link resting
    ]
    assert spans[1].text == "throttled: power cap" and spans[3].text == "PCIe link at Gen2 x8 of Gen4 x16 while busy"


def test_an_xid_is_a_mark_at_its_own_time_once_however_many_rows_repeat_it() -> None:
    event = {"xid": 79.0, "t": 12.0, "source": "kernel"}
    rows = [(0.0, row()), (11.0, row(["sw_power_cap"])), (15.0, row(["sw_power_cap"], xid=[event])),
            (16.0, row(xid=[event]))]
    spans = health_spans(rows, until=20.0, xid_mark_s=2.0)
    assert [(s.start, s.end, s.state) for s in spans] == [
        (0.0, 11.0, "ok"), (11.0, 12.0, "throttled"), (12.0, 14.0, "xid"), (14.0, 16.0, "throttled"),
        (16.0, 20.0, "ok")]
    assert spans[2].text == "XID 79 (kernel log)" and span_at(spans, 13.0) == spans[2]


def test_unreadable_health_is_unknown_and_rows_group_by_gpu() -> None:
    blind = {"throttle": [], "throttle_known": False, "pcie": None, "xid": [], "util": None}
    by_gpu = spans_by_gpu([(1, 5.0, blind), (0, 0.0, row()), (0, 8.0, row(["hw_slowdown"]))], until=10.0)
    assert [(s.state, s.start, s.end) for s in by_gpu[1]] == [("unknown", 5.0, 10.0)]
    assert [s.state for s in by_gpu[0]] == ["ok", "throttled"]


def test_the_timeline_keeps_a_reading_only_when_it_says_something_new() -> None:
    timeline = HealthTimeline()
    assert timeline.add(0, 1.0, row(util=80.0))
    assert not timeline.add(0, 2.0, row(util=95.0))  # still busy: nothing new
    assert timeline.add(0, 3.0, row(util=10.0))  # idle now (a slow link would stop counting)
    assert not timeline.add(0, 2.5, row(["sw_power_cap"]))  # older than what is held
    assert [t for t, _ in timeline.rows[0]] == [1.0, 3.0]


def test_the_step_at_a_time_is_the_first_that_ends_after_it() -> None:
    steps = [(10.0, 1), (15.0, 2), (20.0, 3)]
    assert [step_at(steps, t) for t in (5.0, 10.0, 12.0, 19.9, 25.0)] == [1, 1, 2, 3, None]
    assert step_at([], 3.0) is None


def test_an_xid_from_before_the_recording_is_not_said_of_the_runs_steps() -> None:
    """The kernel log's XIDs reach back to boot: one older than the recording is not the run's."""
    from traindeck.backend.monitor import health_during

    old = {"xid": 79.0, "t": 5.0, "source": "kernel"}
    new = {"xid": 94.0, "t": 150.0, "source": "kernel"}
    changes = [(0, 100.0, row(xid=[old])), (0, 150.0, row(xid=[old, new]))]
    assert health_during(changes, [(110.0, 200.0)]) == ["GPU 0 reported XID 94"]
