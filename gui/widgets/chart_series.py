"""What a chart holds of each series, and what it draws of it: a numpy ring buffer whose visible window is one
contiguous slice (no copy for pyqtgraph), min/max folding of what leaves the ring (bounded memory for days), and
peak decimation (~2 points a pixel column, every spike kept), and the smoothing kept as a running state (new
points smoothed as they come, not the whole series again). Used by charts.py."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyqtgraph as pg

from traindeck.backend.runs import BoundedSeries, RunningEma


class Ring:
    """Up to `capacity` (x, y) float64 pairs, newest last; `view()` is one contiguous slice (no copy).

    Storage grows by doubling up to twice the capacity, or with `whole` is that size from the start, written
    through so its pages are resident at once: a chart fed for days (the Monitor's) then holds the memory it will
    ever hold from its first point, instead of creeping for its first hour (tests/perf/bench_gui_soak.py)."""

    def __init__(self, capacity: int, whole: bool = False) -> None:
        self.capacity = max(1, int(capacity))
        self.whole = whole
        size = 2 * self.capacity if whole else 0
        self._x = np.full(size, np.nan)
        self._y = np.full(size, np.nan)
        self._start = 0
        self._n = 0
        self.total = 0  # points ever stored since the last replace: total - len = index of the oldest kept

    def __len__(self) -> int:
        return self._n

    def view(self) -> tuple[np.ndarray, np.ndarray]:
        s, e = self._start, self._start + self._n
        return self._x[s:e], self._y[s:e]

    def replace(self, x: np.ndarray, y: np.ndarray) -> None:
        x, y = x[-self.capacity:], y[-self.capacity:]
        n = len(x)
        size = min(2 * self.capacity, max(n, 16))
        if not self.whole:  # a whole ring keeps its storage (always twice the capacity)
            self._x, self._y = np.empty(size), np.empty(size)
        self._x[:n], self._y[:n] = x, y
        self._start, self._n, self.total = 0, n, n

    def extend(self, x: np.ndarray, y: np.ndarray) -> None:
        k = len(x)
        if k == 0:
            return
        if k >= self.capacity:
            self.replace(x, y)
            return
        end = self._start + self._n
        if end + k > len(self._x):
            # Out of room: keep the newest points that still fit with the new ones, moved to the front. Storage
            # grows by doubling up to twice the capacity, so each point is moved O(1) times on average.
            keep = min(self._n, self.capacity - k)
            size = len(self._x)
            if keep + k > size or size < 2 * self.capacity:
                size = min(2 * self.capacity, max(16, 2 * size, keep + k))
            new_x, new_y = (np.empty(size), np.empty(size)) if size != len(self._x) else (self._x, self._y)
            new_x[:keep] = self._x[end - keep:end]
            new_y[:keep] = self._y[end - keep:end]
            self._x, self._y, self._start, self._n = new_x, new_y, 0, keep
            end = keep
        self._x[end:end + k] = x
        self._y[end:end + k] = y
        self._n += k
        self.total += k
        if self._n > self.capacity:
            self._start += self._n - self.capacity
            self._n = self.capacity


def peak_decimate(x: np.ndarray, y: np.ndarray, x_low: float, x_high: float, columns: int,
                  first_index: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The points of increasing `x` within [x_low, x_high] (plus one on each side, so lines reach the edges)
    reduced to at most ~2 per column: each bucket of k points becomes its (x, min) and (x, max), so every spike
    stays visible. Buckets start at multiples of k counted from `first_index` (the ring's absolute index of x[0]),
    so a bucket's content does not shift as new points arrive and live charts do not shimmer. NaN = a gap: a
    bucket of NaN stays NaN, and a bucket with some NaN is cut off from both neighbours (NaN before and after its
    min and max), so a gap narrower than a column still breaks the line instead of vanishing into a bucket (a
    line drawn straight across the minutes a hidden Monitor page did not sample)."""
    n = len(x)
    if n == 0:
        return x, y
    i = max(0, int(np.searchsorted(x, x_low)) - 1)
    j = min(n, int(np.searchsorted(x, x_high, side="right")) + 1)
    count = j - i
    columns = max(1, int(columns))
    if count <= 2 * columns:
        return x[i:j], y[i:j]
    k = 1 << int(math.ceil(math.log2(count / columns)))  # a power of two: stable while the count creeps up
    i = max(0, ((first_index + i) // k) * k - first_index)
    full = (j - i) // k
    head = y[i:i + full * k].reshape(full, k)
    lows, highs = np.fmin.reduce(head, axis=1), np.fmax.reduce(head, axis=1)
    xs = x[i:i + full * k:k]
    partial = np.isnan(head).any(axis=1) & ~np.isnan(lows)
    if partial.any():
        gap = np.full(full, np.nan)
        keep = np.column_stack((partial, np.ones(full, bool), np.ones(full, bool), partial)).ravel()
        bucket_x = np.repeat(xs, 4)[keep]
        bucket_y = np.column_stack((gap, lows, highs, gap)).ravel()[keep]
    else:
        bucket_x, bucket_y = np.repeat(xs, 2), np.column_stack((lows, highs)).ravel()
    rest = y[i + full * k:j]
    if len(rest):  # the newest, incomplete bucket: its points as they are
        return np.concatenate((bucket_x, x[i + full * k:j])), np.concatenate((bucket_y, rest))
    return bucket_x, bucket_y


def as_array(values: Any) -> np.ndarray:
    """Scalars, lists (None allowed: a gap) or arrays -> a 1-D float64 array."""
    if isinstance(values, np.ndarray):
        return np.asarray(values, dtype=np.float64).ravel()
    if isinstance(values, (int, float)) or values is None:
        return np.array([np.nan if values is None else values], dtype=np.float64)
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


class ChartSeries:
    def __init__(self, name: str, capacity: int, curve: pg.PlotDataItem, colour: str | None,
                 older_buckets: int = 0) -> None:
        self.name = name
        # Folded history (the Monitor's charts) is bounded memory for days: its ring is allocated whole at once.
        self.ring = Ring(capacity, whole=older_buckets > 0)
        self.curve = curve
        self.colour = colour  # None: from the theme's palette by position
        self.fill = False
        self.lone = False  # drawn as a dot: a line needs two points, and one point alone shows nothing
        # Points pushed out of the ring, folded to min/max buckets (None: dropped; see the module's doc).
        self.older = BoundedSeries(recent=1, max_buckets=older_buckets) if older_buckets else None
        self.raw_curve: pg.PlotDataItem | None = None  # the raw line, faint behind the smoothed one (smoothing on)
        # The ring's y smoothed, beside it (a ring alike), and the smoothing's running state: appended points are
        # smoothed on their own. None: not smoothed since the last replace (or change of weight).
        self._ema: RunningEma | None = None
        self._ema_weight = 0.0
        self._smoothed = Ring(capacity)

    def smoothed(self, weight: float) -> np.ndarray:
        """The ring's y smoothed with `weight` (TensorBoard's EMA, as metric_charts.ema gives it over every point
        held since the last replace): the whole ring once per replace or change of weight, then only what is
        appended."""
        if self._ema is None or self._ema_weight != weight:
            self._ema, self._ema_weight = RunningEma(weight), weight
            x, y = self.ring.view()
            smoothed = self._ema.extend(y)
            assert smoothed is not None  # (None only for a running state that has seen values before)
            self._smoothed.replace(x, smoothed)
        return self._smoothed.view()[1]

    def replace(self, x: np.ndarray, y: np.ndarray) -> None:
        if self.older is not None:
            self.older = BoundedSeries(recent=1, max_buckets=self.older.max_buckets)
            cut = max(0, len(x) - self.ring.capacity)
            if cut:
                self.older.add(x[:cut].tolist(), y[:cut].tolist())
        self.ring.replace(x, y)
        self._ema = None

    def extend(self, x: np.ndarray, y: np.ndarray) -> None:
        if self.older is not None:
            ring_x, ring_y = self.ring.view()
            pushed = len(ring_x) + len(x) - self.ring.capacity  # the oldest this many leave the ring
            if pushed > 0:
                old = min(pushed, len(ring_x))
                self.older.add(ring_x[:old].tolist() + x[:pushed - old].tolist(),
                               ring_y[:old].tolist() + y[:pushed - old].tolist())
        self.ring.extend(x, y)
        if self._ema is not None:
            smoothed = self._ema.extend(y)
            if smoothed is None:  # a constant series no longer is: smoothed whole at the next draw
                self._ema = None
            else:
                self._smoothed.extend(x, smoothed)

    def older_points(self) -> tuple[np.ndarray, np.ndarray]:
        """The folded part as points to draw ((x, min) and (x, max) a bucket); empty when nothing was folded."""
        if self.older is None or not self.older.count:
            return np.empty(0), np.empty(0)
        xs, ys = self.older.points()
        return np.frombuffer(xs, dtype=np.float64), np.frombuffer(ys, dtype=np.float64)

    def view(self) -> tuple[np.ndarray, np.ndarray]:
        """Every point held, oldest first (folded ones as min/max pairs): a copy."""
        x, y = self.ring.view()
        ox, oy = self.older_points()
        return np.concatenate((ox, x)), np.concatenate((oy, y))
