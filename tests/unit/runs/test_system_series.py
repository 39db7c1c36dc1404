"""The System view's reader over a real recording of ranks that do not all live as long as the run: a rank that
exits before the others ends its line where it exited (also where the first read buckets the run), the recording says
when, the "all ranks" sum counts the ranks alive, and a later read tells of an exit it has no point of."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pytest
from fixtures.monitor_samples import training_sample

from traindeck.backend.monitor.sample_store import ResourceWriter
from traindeck.backend.monitor.snapshots import ResourceSample
from traindeck.backend.runs import RunStore, read_system_series

RANKS = 4


def sample(i: int, gone: Iterable[int] = ()) -> ResourceSample:
    """Sample `i` of a 4-rank run, without the ranks in `gone` (their processes exited)."""
    whole = training_sample(i, gpus=RANKS, ranks=RANKS)
    assert whole.run is not None
    left = tuple(p for p in whole.run.processes if p.rank not in set(gone))
    return dataclasses.replace(whole, run=dataclasses.replace(whole.run, processes=left))


def record(path: Path, samples: list[ResourceSample], writer: ResourceWriter | None = None) -> ResourceWriter:
    """The samples written as a run's supervisor records them (the writer left open for more)."""
    writer = writer or ResourceWriter(path, "r1", interval_s=1.0, started_at=samples[0].t)
    for one in samples:
        writer.write(one, commit=False)
    writer.commit()
    return writer


def rss(one: ResourceSample, rank: int) -> float:
    assert one.run is not None
    return float(next(p.rss_bytes for p in one.run.ranks if p.rank == rank))


@pytest.mark.parametrize("max_points", [2_000, 7])  # every sample, or a first read's buckets of about 15
def test_a_rank_that_exits_early_ends_its_line_and_the_read_says_when(tmp_path: Path, max_points: int) -> None:
    samples = [sample(i, gone=(3,) if i >= 43 else ()) for i in range(100)]
    path = tmp_path / "runs.sqlite3"
    record(path, samples).close()
    with RunStore(path) as store:
        read = read_system_series(store, "r1", max_points=max_points)
    lines = read.lines["rank_rss"]
    exited = samples[42]  # rank 3's last sample
    t, y = lines["rank 3"]
    assert t[-1] == exited.t and y[-1] == rss(exited, 3)  # its line ends where it exited, bucketed or not
    assert read.ended == {"rank_rss": {"rank 3": exited.t}}
    assert all(lines[f"rank {r}"][0][-1] > exited.t for r in range(3))  # the others go on
    # The sum counts the ranks alive: at the end, what the three left hold.
    assert lines["all ranks"][1][-1] == pytest.approx(sum(rss(samples[-1], r) for r in range(3)), rel=0.01)


def test_a_later_read_tells_of_an_exit_it_has_no_point_of(tmp_path: Path) -> None:
    """The run read live: rank 3 is in the newest sample of one read and in none of the next. The next read has no
    point of rank 3, and says it ended at the sample the first read ended with."""
    path = tmp_path / "runs.sqlite3"
    writer = record(path, [sample(i) for i in range(30)])
    with RunStore(path) as store:
        first = read_system_series(store, "r1", live=True)
        assert first.ended == {}
        record(path, [sample(i, gone=(3,)) for i in range(30, 50)], writer)
        then = read_system_series(store, "r1", first.last_t, live=True)
        assert "rank 3" not in then.lines["rank_rss"]
        assert then.ended == {"rank_rss": {"rank 3": first.last_t}}
        record(path, [sample(i, gone=(3,)) for i in range(50, 60)], writer)
        assert read_system_series(store, "r1", then.last_t, live=True).ended == {}  # said once, by the read it fell in
    writer.close()


@pytest.mark.parametrize("max_points", [2_000, 9])
def test_every_rank_gone_while_the_recording_goes_on_ends_the_sum_too(tmp_path: Path, max_points: int) -> None:
    """The run ends rank by rank, and the supervisor records a few more seconds (the launcher's shutdown)."""
    ends = {0: 70, 1: 72, 2: 75, 3: 75}  # each rank's first sample without it
    samples = [sample(i, gone=[r for r, end in ends.items() if i >= end]) for i in range(80)]
    path = tmp_path / "runs.sqlite3"
    record(path, samples).close()
    with RunStore(path) as store:
        read = read_system_series(store, "r1", max_points=max_points)
    assert read.ended == {"rank_rss": {"rank 0": samples[69].t, "rank 1": samples[71].t, "rank 2": samples[74].t,
                                       "rank 3": samples[74].t, "all ranks": samples[74].t}}
    t, y = read.lines["rank_rss"]["all ranks"]
    assert t[np.isfinite(y)][-1] == samples[74].t  # the sum's line ends with the last rank's
    assert y[np.isfinite(y)][-1] == pytest.approx(sum(rss(samples[74], r) for r in (2, 3)))


def test_ranks_that_end_with_the_recording_have_not_exited_and_a_returning_rank_is_not_joined_up(
        tmp_path: Path) -> None:
    """Samples stop with the ranks (nothing was recorded after them): no rank is said to have exited. Rank 1 away
    for a while and back (a restart) draws two pieces, not one line across the time it was away."""
    samples = [sample(i, gone=(1,) if 20 <= i < 30 else ()) for i in range(50)]
    path = tmp_path / "runs.sqlite3"
    record(path, samples).close()
    with RunStore(path) as store:
        read = read_system_series(store, "r1")
    t, y = read.lines["rank_rss"]["rank 1"]
    gap = np.flatnonzero(np.isnan(y))
    assert len(gap) == 1 and samples[19].t < t[gap[0]] < samples[30].t
    assert np.count_nonzero(np.isfinite(y)) == 40
    assert read.ended == {}


def test_the_legends_say_which_ranks_exited_and_forget_it_when_one_is_back(tmp_path: Path) -> None:
    """SystemLines over a live run's reads: rank 3 exits (its legend says when, in place of a figure; the sum's how
    many ranks it counts), then comes back (a restart: its figure again)."""
    from traindeck.backend.runs import SystemLines

    path = tmp_path / "runs.sqlite3"
    lines = SystemLines()
    moment = "t={:.0f}".format
    writer = record(path, [sample(i) for i in range(20)])
    with RunStore(path) as store:
        read = read_system_series(store, "r1", live=True)
        lines.take(read)
        assert set(lines.legend_notes("rank_rss", moment).values()) == {None}
        record(path, [sample(i, gone=(3,)) for i in range(20, 30)], writer)
        read = read_system_series(store, "r1", read.last_t, live=True)
        lines.take(read)
        notes = lines.legend_notes("rank_rss", moment)
        assert notes["rank 3"] == (f"exited at t={training_sample(19).t:.0f}", False)
        assert notes["all ranks"] == ("(3 live)", True) and notes["rank 0"] is None
        record(path, [sample(i) for i in range(30, 35)], writer)
        read = read_system_series(store, "r1", read.last_t, live=True)
        t, y = read.lines["rank_rss"]["rank 3"]
        assert np.isnan(y[0]) and t[0] < t[1]  # not drawn across the time it was away
        lines.take(read)
        assert set(lines.legend_notes("rank_rss", moment).values()) == {None}
    writer.close()


def test_a_live_views_rank_lines_end_by_the_same_rule_and_a_rank_that_is_back_is_live() -> None:
    """SystemLines.take_ranks (the Monitor's live samples): a rank missing from the newest sample exited at its
    newest point, as read_system_series says of a recording; back in a later sample, it is live again; with no rank
    left, the sum ends with the last of them."""
    from traindeck.backend.runs import SystemLines

    lines = SystemLines()
    lines.take_ranks("ranks", {"rank 0": 1.0, "rank 1": 1.0}, ["rank 0", "rank 1"])
    lines.take_ranks("ranks", {"rank 0": 2.0}, ["rank 0"])
    assert lines.ended == {"ranks": {"rank 1": 1.0}}
    notes = lines.legend_notes("ranks", "t={:.0f}".format)
    assert notes == {"rank 0": None, "rank 1": ("exited at t=1", False), "all ranks": ("(1 live)", True)}
    lines.take_ranks("ranks", {"rank 0": 3.0, "rank 1": 3.0}, ["rank 0", "rank 1"])
    assert lines.ended == {"ranks": {}}
    lines.take_ranks("ranks", {}, [])
    assert lines.ended == {"ranks": {"rank 0": 3.0, "rank 1": 3.0, "all ranks": 3.0}}
