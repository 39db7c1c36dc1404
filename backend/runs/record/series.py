"""`BoundedSeries`: one metric series as a dashboard keeps it for a run that lasts days, in bounded memory.

The run store keeps every point; a window only needs what it can draw. So, as the resource store does for
samples: the newest `recent` points at full resolution, and everything older folded into min/max buckets (each
bucket keeps its first x, its lowest and its highest value, so a spike stays visible). When the buckets pass
`max_buckets`, neighbours merge in pairs (a bucket then covers twice as many points). Whatever the run's length
and logging rate, a series holds at most `recent + max_buckets + 1` entries (~24 bytes each, stdlib arrays):
about 0.4 MB with the defaults. A zoom into the old part re-reads that range from the store at full
resolution (`RunStore.metric_series(..., x_range)`), it never comes from here.

Plain Python (no Qt, no numpy needed), so the runs page, the CLI and tests use the same code.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterable, Iterator

DEFAULT_RECENT = 10_000  # points kept whole: at 50 steps/s, the last 3+ minutes; at 1 step/s, 2.8 hours
DEFAULT_MAX_BUCKETS = 4_000  # older history: ~2 values per pixel column of a wide chart, twice over


def _lower(a: float, b: float) -> float:
    """min() that treats NaN (a gap) as absent."""
    if math.isnan(a):
        return b
    if math.isnan(b):
        return a
    return a if a <= b else b


def _higher(a: float, b: float) -> float:
    if math.isnan(a):
        return b
    if math.isnan(b):
        return a
    return a if a >= b else b


class BoundedSeries:
    """(x, y) points in the order recorded (x: step, or time when a run reports no steps)."""

    def __init__(self, recent: int = DEFAULT_RECENT, max_buckets: int = DEFAULT_MAX_BUCKETS) -> None:
        self.recent = max(1, int(recent))
        self.max_buckets = max(2, int(max_buckets))
        self._x = array("d")  # the recent points, whole (up to 2 x recent before a fold: amortised moves)
        self._y = array("d")
        self._bx = array("d")  # folded buckets: first x, lowest y, highest y
        self._blo = array("d")
        self._bhi = array("d")
        self.bucket_size = 1  # points per folded bucket (doubles when buckets merge)
        self._open_count = 0  # points in the newest bucket, still filling (0: none open)
        self.count = 0  # every point ever added
        self.last_x: float | None = None
        self.last_t: float | None = None  # the newest point's time (add_rows)
        self.x_is_time = False  # x is the time, not the step (a series recorded without steps)
        self.first_x: float | None = None
        self.low = math.inf  # lowest and highest value ever added (NaN skipped): a chart fitted to the data
        self.high = -math.inf  # needs a redraw when a new point falls outside what it drew

    def __len__(self) -> int:
        """Entries held (recent points + buckets): the memory bound is on this."""
        return len(self._x) + len(self._bx)

    @property
    def folded(self) -> int:
        """Points no longer held whole (their range is in buckets)."""
        return self.count - len(self._x)

    @property
    def first_recent_x(self) -> float | None:
        """The oldest x held at full resolution: a zoom before it needs the store."""
        return self._x[0] if self._x else None

    def add(self, xs: Iterable[float], ys: Iterable[float]) -> None:
        """Append points (x increasing); the oldest beyond `recent` are folded into buckets."""
        x_new, y_new = array("d", xs), array("d", ys)
        if len(x_new) != len(y_new):
            raise ValueError(f"{len(x_new)} x values but {len(y_new)} y values")
        if not x_new:
            return
        self._x.extend(x_new)
        self._y.extend(y_new)
        self.count += len(x_new)
        if self.first_x is None:
            self.first_x = x_new[0]
        self.last_x = x_new[-1]
        finite = [y for y in y_new if y == y]
        if finite:
            self.low, self.high = min(self.low, min(finite)), max(self.high, max(finite))
        if len(self._x) > 2 * self.recent:
            self._fold(len(self._x) - self.recent)

    def add_rows(self, rows: Iterable[tuple[int | None, float, float]]) -> None:
        """Append store rows (step, t, value); x is the step, or t for a series recorded without steps."""
        xs, ys = array("d"), array("d")
        last_t = self.last_t
        for step, t, value in rows:
            if step is None and not self.x_is_time and self.count + len(xs) == 0:
                self.x_is_time = True
            xs.append(t if self.x_is_time or step is None else float(step))
            ys.append(value)
            last_t = t
        self.last_t = last_t
        self.add(xs, ys)

    def _fold(self, n: int) -> None:
        xs, ys = self._x[:n], self._y[:n]
        del self._x[:n]
        del self._y[:n]
        k = self.bucket_size
        for x, y in zip(xs, ys, strict=True):
            if self._open_count and self._open_count < k:
                self._blo[-1] = _lower(self._blo[-1], y)
                self._bhi[-1] = _higher(self._bhi[-1], y)
                self._open_count += 1
                continue
            self._bx.append(x)
            self._blo.append(y)
            self._bhi.append(y)
            self._open_count = 1
            if len(self._bx) > self.max_buckets:
                self._merge()
                k = self.bucket_size

    def _merge(self) -> None:
        """Halve the buckets: pairs become one (the newest, filling bucket pairs with the one before it)."""
        bx, lo, hi = self._bx, self._blo, self._bhi
        start = len(bx) % 2  # an odd count: the oldest bucket stays as it is
        new_x = array("d", bx[:start])
        new_lo = array("d", lo[:start])
        new_hi = array("d", hi[:start])
        for i in range(start, len(bx), 2):
            new_x.append(bx[i])
            new_lo.append(_lower(lo[i], lo[i + 1]))
            new_hi.append(_higher(hi[i], hi[i + 1]))
        self._bx, self._blo, self._bhi = new_x, new_lo, new_hi
        self.bucket_size *= 2
        self._open_count = 0  # the next point starts a bucket of the new size

    def points(self) -> tuple[array[float], array[float]]:
        """What to draw: each bucket as (x, min) and (x, max), then the recent points as they are."""
        xs, ys = array("d"), array("d")
        for x, lo, hi in zip(self._bx, self._blo, self._bhi, strict=True):
            if lo == hi or math.isnan(lo):
                xs.append(x)
                ys.append(lo)
            else:
                xs.extend((x, x))
                ys.extend((lo, hi))
        xs.extend(self._x)
        ys.extend(self._y)
        return xs, ys

    def recent_points(self) -> tuple[array[float], array[float]]:
        return array("d", self._x), array("d", self._y)

    def nbytes(self) -> int:
        """Bytes held by the arrays (the bound docs/dashboard.md states)."""
        return sum(a.buffer_info()[1] * a.itemsize for a in (self._x, self._y, self._bx, self._blo, self._bhi))


def load_series(read: Callable[[], Iterator[list[tuple[int | None, float, float]]]], recent: int = DEFAULT_RECENT,
                max_buckets: int = DEFAULT_MAX_BUCKETS) -> BoundedSeries:
    """A whole series from the store, chunk by chunk (`read()` yields lists of (step, t, value)): memory stays
    bounded however long the run, where a list of every row of a 3-day run would take gigabytes."""
    series = BoundedSeries(recent, max_buckets)
    for chunk in read():
        series.add_rows(chunk)
    return series
