"""BoundedSeries: a metric series in bounded memory (recent points whole, older ones min/max folded), the chunked
whole-series read from a real run store that feeds it, what a live chart is handed of it (only the points added
since it was fed, until a fold), and the smoothing as a running state (RunningEma: ema()'s figures, bit for bit)."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest

from traindeck.backend.runs.control.metric_charts import ema
from traindeck.backend.runs.record.run_store import RunRecord, RunStore
from traindeck.backend.runs.record.series import BoundedSeries, RunningEma, load_series


def test_memory_is_bounded_whatever_the_length() -> None:
    series = BoundedSeries(recent=1000, max_buckets=200)
    sizes = []
    for start in range(0, 1_000_000, 5_000):
        xs = range(start, start + 5_000)
        series.add(xs, (math.sin(x / 100) for x in xs))
        sizes.append(len(series))
    assert series.count == 1_000_000
    assert max(sizes) <= 2 * 1000 + 200 + 1  # before a fold the recent part may reach twice its size
    assert len(series) <= 1000 + 200 + 1
    assert series.nbytes() < 2 * (2 * 1000 * 2 + 3 * 201) * 8  # arrays may over-allocate, never grow with count
    assert series.bucket_size > 1000  # the folded part doubled its buckets many times over


def test_recent_points_are_whole_and_older_ones_keep_their_extremes() -> None:
    rng = random.Random(7)
    ys = [rng.gauss(0, 1) for _ in range(50_000)]
    ys[1234] = 99.0  # a spike long folded away: must still be drawn
    ys[20_000] = -50.0
    ys[30_000] = float("nan")  # a gap the recorder could not fill: not a min or a max
    series = BoundedSeries(recent=2_000, max_buckets=100)
    for start in range(0, len(ys), 777):
        chunk = range(start, min(start + 777, len(ys)))
        series.add([float(i) for i in chunk], [ys[i] for i in chunk])
    recent_x, recent_y = series.recent_points()
    assert len(recent_x) >= 2_000
    assert list(recent_x) == [float(i) for i in range(len(ys) - len(recent_x), len(ys))]
    assert list(recent_y) == ys[-len(recent_x):]
    xs, drawn = series.points()
    finite = [y for y in ys if not math.isnan(y)]
    assert max(drawn) == 99.0 and min(drawn) == min(finite) == -50.0
    assert all(a <= b for a, b in zip(xs, xs[1:], strict=False))  # in x order: a chart draws it as a line
    assert len(xs) <= 2 * 101 + len(recent_x)


def test_add_rows_uses_steps_or_time_without_steps() -> None:
    series = BoundedSeries()
    series.add_rows([(1, 10.0, 2.0), (2, 11.0, 1.5)])
    series.add_rows([(3, 12.0, 1.2), (4, 12.0, 1.1)])  # two lines read in one go share their time: both kept
    assert list(series.recent_points()[0]) == [1.0, 2.0, 3.0, 4.0]
    assert list(series.recent_points()[1]) == [2.0, 1.5, 1.2, 1.1]
    assert series.last_t == 12.0 and not series.x_is_time
    timed = BoundedSeries()
    timed.add_rows([(None, 100.0, 0.5), (None, 101.0, 0.4)])
    assert timed.x_is_time and list(timed.recent_points()[0]) == [100.0, 101.0]


def _store_with_series(tmp_path: Path, n: int) -> RunStore:
    store = RunStore(tmp_path / "runs.sqlite3")
    store.add_run(RunRecord(id="r1", run_dir=str(tmp_path / "r1"), created_at=0.0))
    store.add_run(RunRecord(id="r2", run_dir=str(tmp_path / "r2"), created_at=0.0))
    rows = []
    for i in range(n):
        rows.append(("loss", i, 1000.0 + i * 0.02, 1.0 / (i + 1), None))
        rows.append(("lr", i, 1000.0 + i * 0.02, 1e-4, None))
    store.add_metrics("r1", rows)
    store.add_metrics("r2", [("loss", 0, 1000.0, 7.0, None)])  # another run's row is never read for r1
    store.add_metrics("r1", [("loss", n, 1000.0 + (n - 1) * 0.02, 0.0, None)])  # same t as the row before: kept
    return store


def test_chunked_read_equals_the_whole_read(tmp_path: Path) -> None:
    store = _store_with_series(tmp_path, 5_000)
    whole = store.metric_series("r1", "loss")
    chunks = list(store.metric_series_chunks("r1", "loss", chunk=333))
    assert [len(c) for c in chunks[:-1]] == [333] * (len(chunks) - 1)
    assert [row for chunk in chunks for row in chunk] == whole
    later = [row for chunk in store.metric_series_chunks("r1", "loss", chunk=100, after_t=1050.0, before_t=1060.0)
             for row in chunk]
    assert later == [row for row in whole if 1050.0 < row[1] < 1060.0]
    mark = store.metrics_mark()
    store.add_metrics("r1", [("loss", 9_999, 5000.0, 0.5, None)])
    upto = [row for chunk in store.metric_series_chunks("r1", "loss", up_to_mark=mark) for row in chunk]
    assert upto == whole  # the row after the mark is left to the next incremental read
    store.close()


def test_load_series_from_the_store_is_bounded(tmp_path: Path) -> None:
    store = _store_with_series(tmp_path, 60_000)
    series = load_series(lambda: store.metric_series_chunks("r1", "loss", chunk=4_096), recent=1_000,
                         max_buckets=300)
    assert series.count == 60_001
    assert len(series) <= 1_000 + 300 + 1
    xs, ys = series.recent_points()
    assert xs[-1] == 60_000.0 and ys[-1] == 0.0
    _, drawn = series.points()
    assert max(drawn) == 1.0  # the first step's loss, folded long ago
    store.close()


def test_no_folded_bucket_holds_more_than_bucket_size_points() -> None:
    """With y = x, a bucket's range is the points it holds: no bucket ever holds more than `bucket_size` points
    (a bucket merged while still filling may hold fewer), before and after buckets merge."""
    for count in (3, 4, 12, 40, 203, 1000):
        series = BoundedSeries(recent=2, max_buckets=8)
        series.add(range(count), range(count))
        xs, ys = series.points()
        folded = count - 2
        firsts = sorted({x for x, _ in zip(xs, ys, strict=True) if x < folded})
        spans = [b - a for a, b in zip(firsts, [*firsts[1:], folded], strict=True)]
        assert all(1 <= span <= series.bucket_size for span in spans), (count, series.bucket_size, spans)
        assert sum(spans) == folded
        assert len(firsts) <= series.max_buckets
        assert list(xs[-2:]) == [count - 2, count - 1]


def _random_values(rng: np.random.Generator, n: int) -> np.ndarray:
    """A loss-like walk with what real series have: NaN gaps, infinities, constant stretches (a fixed learning
    rate), or the whole series constant."""
    y = 2.0 + rng.normal(0, 0.1, n).cumsum()
    kind = rng.integers(0, 5)
    if kind == 1:
        y[rng.random(n) < 0.1] = np.nan
    elif kind == 2:
        y[rng.random(n) < 0.05] = rng.choice([np.nan, np.inf, -np.inf])
    elif kind == 3 and n:
        y[: int(rng.integers(0, n + 1))] = 0.001  # constant at first, then not (or constant throughout)
    elif kind == 4:
        y[:] = 0.001
        y[rng.random(n) < 0.2] = np.nan
    return y


@pytest.mark.parametrize("seed", range(40))
def test_running_smoothing_equals_ema_of_the_whole_series(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 40_000))
    y = _random_values(rng, n)
    weight = float(rng.choice([0.0, 0.3, 0.6, 0.9, 0.99, rng.random()]))
    running, parts, given = RunningEma(weight), [], 0
    while given < n:
        k = int(rng.integers(1, 5_000))  # a poll's rows: from one point to more than a block
        new = running.extend(y[given:given + k])
        if new is None:  # a constant stopped being one: its earlier values change, smoothed whole again
            running, parts = RunningEma(weight), []
            new = running.extend(y[:given + k])
            assert new is not None
        parts.append(new)
        given += k
    smoothed = np.concatenate(parts) if parts else np.empty(0)
    assert np.array_equal(smoothed, ema(y, weight), equal_nan=True)  # exactly: the same float operations


def test_running_smoothing_says_when_a_constant_stops_being_one() -> None:
    running = RunningEma(0.6)
    assert list(running.extend([0.5, float("nan"), 0.5])[[0, 2]]) == [0.5, 0.5]  # as ema() leaves a constant
    assert running.extend([0.5]) is not None
    assert running.extend([0.7]) is None


@pytest.mark.parametrize("seed", range(20))
def test_a_live_chart_is_handed_only_the_new_points_until_a_fold(seed: int) -> None:
    """What a chart holds (points() when first fed, then each points_after appended) is points() at every step;
    points_after says None exactly when a fold changed the older part, and the chart then takes points() whole."""
    rng = np.random.default_rng(seed)
    series = BoundedSeries(recent=int(rng.integers(1, 60)), max_buckets=int(rng.integers(2, 30)))
    held_x, held_y = series.arrays()
    count, reshapes, folds_seen = series.count, series.reshapes, 0
    for _ in range(200):
        k = int(rng.integers(0, 40))
        series.add(np.arange(series.count, series.count + k, dtype=np.float64), _random_values(rng, k))
        tail = series.points_after(count, reshapes)
        if tail is None:
            assert series.reshapes != reshapes
            folds_seen += 1
            held_x, held_y = series.arrays()
        else:
            assert series.reshapes == reshapes and len(tail[0]) == k
            held_x, held_y = np.concatenate((held_x, tail[0])), np.concatenate((held_y, tail[1]))
        count, reshapes = series.count, series.reshapes
        xs, ys = series.points()
        assert np.array_equal(held_x, np.frombuffer(xs)) and np.array_equal(held_y, np.frombuffer(ys), equal_nan=True)
    assert folds_seen > 0
    assert series.points_after(count + 1, reshapes) is None  # a count it never had


class _OneByOne:
    """The folding as the module's doc says it, a point at a time: the reference the batched folds must equal."""

    def __init__(self, max_buckets: int) -> None:
        self.max_buckets, self.size, self.open = max_buckets, 1, 0
        self.buckets: list[list[float]] = []  # [first x, lowest, highest]

    def fold(self, x: float, y: float) -> None:
        if self.open and self.open < self.size:
            bucket = self.buckets[-1]
            bucket[1], bucket[2] = float(np.fmin(bucket[1], y)), float(np.fmax(bucket[2], y))  # NaN: a gap
            self.open += 1
            return
        self.buckets.append([x, y, y])
        self.open = 1
        if len(self.buckets) > self.max_buckets:  # pairs merge, the oldest alone when the count is odd
            start = len(self.buckets) % 2
            merged = self.buckets[:start]
            for a, b in zip(self.buckets[start::2], self.buckets[start + 1::2], strict=True):
                merged.append([a[0], float(np.fmin(a[1], b[1])), float(np.fmax(a[2], b[2]))])
            self.buckets, self.size, self.open = merged, self.size * 2, 0


@pytest.mark.parametrize("seed", range(20))
def test_a_batch_folds_as_if_its_points_came_one_by_one(seed: int) -> None:
    """A poll's rows (or a whole read's chunk) fold into the buckets the same points folded one at a time make,
    buckets merging mid-batch included."""
    rng = np.random.default_rng(seed)
    series = BoundedSeries(int(rng.integers(1, 30)), int(rng.integers(2, 20)))
    reference = _OneByOne(series.max_buckets)
    all_x, all_y = np.empty(0), np.empty(0)
    for _ in range(30):
        k = int(rng.integers(0, 300))
        x = np.arange(series.count, series.count + k, dtype=np.float64)
        y = _random_values(rng, k)
        before = series.folded
        series.add(x, y)
        all_x, all_y = np.concatenate((all_x, x)), np.concatenate((all_y, y))
        for xi, yi in zip(all_x[before:series.folded], all_y[before:series.folded], strict=True):
            reference.fold(float(xi), float(yi))
        assert series.bucket_size == reference.size
        expected = np.array(reference.buckets).reshape(-1, 3)
        held = np.column_stack([np.frombuffer(a) if len(a) else np.empty(0)
                                for a in (series._bx, series._blo, series._bhi)])
        assert np.array_equal(held, expected, equal_nan=True)
