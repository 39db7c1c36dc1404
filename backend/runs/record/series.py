"""`BoundedSeries`: one metric series as a dashboard keeps it for a run that lasts days, in bounded memory.

The run store keeps every point; a window only needs what it can draw. So, as the resource store does for
samples: the newest `recent` points at full resolution, and everything older folded into min/max buckets (each
bucket keeps its first x, its lowest and its highest value, so a spike stays visible). When the buckets pass
`max_buckets`, neighbours merge in pairs (a bucket then covers twice as many points). Whatever the run's length
and logging rate, a series holds at most `recent + max_buckets + 1` entries (~24 bytes each, stdlib arrays):
about 0.4 MB with the defaults. A zoom into the old part re-reads that range from the store at full
resolution (`RunStore.metric_series(..., x_range)`), it never comes from here.

A live chart draws only what is new: `reshapes` counts the folds and revisions (the changes to what `points()`
gives other than points added at its end; a revision is a printed value made exact after it was read), and `points_after(count, reshapes)` gives the points added since the series held
`count`, or None once a fold changed the older part (then the whole is drawn again: once every `recent` points).
`RunningEma` is TensorBoard's smoothing (metric_charts.ema) kept as a running state: the same figures, computed
only for the new points.

No Qt, so the runs page, the CLI and tests use the same code.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np

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
        self.reshapes = 0  # folds so far: each changes points() before its end (a drawn copy is then redrawn)
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
        values = np.frombuffer(y_new, dtype=np.float64)
        if not np.isnan(values).all():  # NaN (a gap) takes no part
            self.low = min(self.low, float(np.fmin.reduce(values)))
            self.high = max(self.high, float(np.fmax.reduce(values)))
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

    def revise(self, x: float, old: float, new: float) -> bool:
        """Change the newest recent point at `x` holding `old` to `new` (a store row revised after it was read:
        a printed value made exact). A point already folded keeps its bucket (the bucket's range moves by less than
        the printed rounding). A revision counts as a reshape: a chart drawing the series takes it whole again.
        Returns whether a point was changed."""
        xs = np.frombuffer(self._x, dtype=np.float64) if self._x else np.empty(0)
        ys = np.frombuffer(self._y, dtype=np.float64) if self._y else np.empty(0)
        for start in (max(0, len(xs) - 256), 0):  # a revision follows its row by seconds: look at the newest first
            hits = np.flatnonzero((xs[start:] == x) & (ys[start:] == old))
            if len(hits):
                self._y[start + int(hits[-1])] = new
                self.reshapes += 1
                if new == new:
                    self.low, self.high = min(self.low, new), max(self.high, new)
                return True
            if start == 0:
                break
        return False

    def _fold(self, n: int) -> None:
        """Fold the oldest `n` recent points into buckets, a bucket's worth at a time through numpy: the open
        bucket filled first, then new buckets of `bucket_size` points, merging the buckets in pairs (and doubling
        the size) as the count passes max_buckets, as if the points came one by one."""
        self.reshapes += 1
        xs = np.frombuffer(self._x, dtype=np.float64)[:n].copy()
        ys = np.frombuffer(self._y, dtype=np.float64)[:n].copy()
        del self._x[:n]
        del self._y[:n]
        k = self.bucket_size
        if self._open_count and self._open_count < k:  # the newest bucket is still filling: its share first
            m = min(k - self._open_count, len(ys))
            self._blo[-1] = _lower(self._blo[-1], float(np.fmin.reduce(ys[:m])))
            self._bhi[-1] = _higher(self._bhi[-1], float(np.fmax.reduce(ys[:m])))
            self._open_count += m
            xs, ys = xs[m:], ys[m:]
        while len(ys):
            k = self.bucket_size
            room = self.max_buckets + 1 - len(self._bx)  # the room-th new bucket makes them merge
            buckets = -(-len(ys) // k)
            if buckets < room:  # every point fits: the last bucket may stay open
                taken, merge = len(ys), False
            else:  # room - 1 whole buckets and the first point of one more, then the merge
                buckets, taken, merge = room, (room - 1) * k + 1, True
            starts = np.arange(0, taken, k) if k < taken else np.zeros(1, np.intp)  # (k may pass int64)
            self._bx.frombytes(xs[starts].tobytes())
            self._blo.frombytes(np.fmin.reduceat(ys[:taken], starts).tobytes())
            self._bhi.frombytes(np.fmax.reduceat(ys[:taken], starts).tobytes())
            self._open_count = taken - int(starts[-1])
            xs, ys = xs[taken:], ys[taken:]
            if merge:
                self._merge()

    def _merge(self) -> None:
        """Halve the buckets: pairs become one (the newest, filling bucket pairs with the one before it)."""
        start = len(self._bx) % 2  # an odd count: the oldest bucket stays as it is
        bx, lo, hi = (np.frombuffer(a, dtype=np.float64) for a in (self._bx, self._blo, self._bhi))
        new_x = np.concatenate((bx[:start], bx[start::2]))
        new_lo = np.concatenate((lo[:start], np.fmin(lo[start::2], lo[start + 1::2])))
        new_hi = np.concatenate((hi[:start], np.fmax(hi[start::2], hi[start + 1::2])))
        self._bx, self._blo, self._bhi = (array("d", a.tobytes()) for a in (new_x, new_lo, new_hi))
        self.bucket_size *= 2
        self._open_count = 0  # the next point starts a bucket of the new size

    def points(self) -> tuple[array[float], array[float]]:
        """What to draw: each bucket as (x, min) and (x, max), then the recent points as they are."""
        x, y = self.arrays()
        return array("d", x.tobytes()), array("d", y.tobytes())

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """points() as new numpy arrays (what a chart takes; a few numpy passes, no Python loop a point)."""
        bx = np.frombuffer(self._bx, dtype=np.float64) if self._bx else np.empty(0)
        lo = np.frombuffer(self._blo, dtype=np.float64) if self._blo else np.empty(0)
        hi = np.frombuffer(self._bhi, dtype=np.float64) if self._bhi else np.empty(0)
        x = np.frombuffer(self._x, dtype=np.float64) if self._x else np.empty(0)
        y = np.frombuffer(self._y, dtype=np.float64) if self._y else np.empty(0)
        pair = ~((lo == hi) | np.isnan(lo))  # a bucket of one value (or only gaps) is one point
        width = 1 + pair.astype(np.intp)
        bucket_x = np.repeat(bx, width)
        bucket_y = np.column_stack((lo, hi)).ravel()[np.column_stack((np.ones(len(lo), bool), pair)).ravel()]
        return np.concatenate((bucket_x, x)), np.concatenate((bucket_y, y))

    def points_after(self, count: int, reshapes: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The points added since the series held `count` points and had `reshapes` folds, as new numpy arrays:
        points() then is what it was, with these at its end. None when a fold changed its older part since (or
        `count` is not a count it had): draw points() whole."""
        new = self.count - count
        if reshapes != self.reshapes or new < 0 or new > len(self._x):
            return None
        start = len(self._x) - new
        return (np.array(self._x[start:], dtype=np.float64), np.array(self._y[start:], dtype=np.float64))

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


def _ema_block_length(weight: float) -> int:
    """Blocks short enough that weight**-length stays far inside float64 (as metric_charts.ema cuts them)."""
    return int(min(8192, max(1, math.floor(150 * math.log(10) / -math.log(weight)))))


class RunningEma:
    """TensorBoard's smoothing (metric_charts.ema: a debiased exponential moving average, NaN and infinite values
    kept and left out of the average) of a series that grows: `extend(new)` gives the new values smoothed, equal
    bit for bit to ema() of every value given so far (its last len(new) values), at the cost of the new values
    and at most one block of older ones, not of the whole series.

    ema() leaves a constant series (a fixed learning rate) as it is; when a series that was constant stops being
    so, the values already given change, and `extend` returns None: smooth the whole series again."""

    def __init__(self, weight: float) -> None:
        self.weight = min(0.99, max(0.0, float(weight)))
        self._length = _ema_block_length(self.weight) if self.weight > 0 else 1
        self._count = 0  # finite values seen
        self._state = 0.0  # the average (not debiased) at the end of the last whole block
        self._block = np.empty(0)  # the finite values of the block still filling (fewer than _length)
        self._constant: float | None = None  # the one value seen while the series is constant

    def extend(self, values: Sequence[float] | np.ndarray) -> np.ndarray | None:
        """The new values smoothed (a new array), or None when the values given before change (see above)."""
        y = np.asarray(values, dtype=np.float64).ravel()
        out = y.copy()
        if self.weight == 0.0 or not len(y):
            return out
        finite = np.isfinite(y)
        x = y[finite]
        if not len(x):
            return out
        if self._count == 0 or self._constant is not None:
            first = float(x[0]) if self._constant is None else self._constant
            if np.all(x == first):
                self._constant = first  # ema() leaves a constant as it is: so far, so does this
                self._count += len(x)
                return out
            if self._count:
                return None  # no longer constant: ema() smooths the values it left as they were
        self._constant = None
        out[finite] = self._take(x)
        return out

    def _take(self, x: np.ndarray) -> np.ndarray:
        """Add the finite values `x` (a series not constant); their smoothed values, as ema() computes them: the
        block still filling is computed again with them (its values come out the same), whole blocks never."""
        w, length = self.weight, self._length
        values = np.concatenate((self._block, x)) if len(self._block) else x
        smoothed = np.empty_like(values)
        state = self._state
        for start in range(0, len(values), length):
            block = values[start:start + length]
            j = np.arange(len(block), dtype=np.float64)
            partial = np.cumsum(block * w ** -j) * (1 - w) * (w ** j)
            smoothed[start:start + len(block)] = partial + state * w ** (j + 1)
            if len(block) == length:  # a whole block: the next one starts from its end
                state = self._state = float(smoothed[start + len(block) - 1])
                self._block = np.empty(0)
            else:
                self._block = block.copy()
        self._count += len(x)
        new = smoothed[len(values) - len(x):]
        counts = np.arange(self._count - len(x) + 1, self._count + 1, dtype=np.float64)
        new /= 1 - w ** counts
        return new
