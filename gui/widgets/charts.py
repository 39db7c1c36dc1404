"""`TimeSeriesChart`: a titled pyqtgraph line chart for resources and metrics that stays fast with a day of data.

Why it is built this way:
- Each series lives in a numpy ring buffer (`max_points`, default 200,000), stored twice as long as it is so the
  visible window is always one contiguous slice that pyqtgraph can draw without a copy. A chart fed for days
  (the Monitor page's) passes `older_buckets`: points pushed out of the ring are folded into a min/max
  `BoundedSeries` (the Runs page's, backend/runs/series.py) instead of dropped, so its memory stays bounded
  (ring + that many buckets) whatever the run's length, and a long window still shows the whole time.
- Appends only mark the chart dirty; curves are refreshed at most every `REDRAW_MS` by one timer, and not at all
  while the chart is hidden, so a flood of appends costs numpy copies, not repaints.
- Curves use pyqtgraph's clip-to-view and "peak" downsampling (min/max per pixel column): 86,400 points become
  ~2 per pixel and spikes (what kills runs) stay visible.
- The chart keeps its own view: x follows the newest data (optionally only the last `x_window` units), y is fitted
  from 0 to the visible peak and to any reference line, so an estimate line is always in sight. Zooming or panning
  x by mouse stops following; the "A" button in the corner resumes it.
- Units are formatted on the y axis ("B" and "B/s" in binary steps: GiB, MiB/s) and in the legend, which shows each
  series' latest value. Colours follow the application's light or dark palette, also when it changes.

Size (~650 lines): one widget whose speed matters (ring buffers, decimation, drawing only when visible);
benchmarked in tests/perf/bench_gui_charts.py.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QPalette, QPen
from PySide6.QtWidgets import QVBoxLayout, QWidget

from traindeck.backend.runs.series import BoundedSeries

REDRAW_MS = 50  # at most 20 curve refreshes a second per chart
ZOOM_SETTLE_MS = 300  # x_range_chosen is emitted this long after the last wheel step or drag of a gesture
DEFAULT_MAX_POINTS = 200_000

# Colour-blind-friendly-ish sets, one tuned for white and one for near-black backgrounds.
LIGHT_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
DARK_COLOURS = ("#8ab4f8", "#f28b82", "#81c995", "#fdd663", "#c58af9", "#fcad70", "#ff8bcb", "#78d9ec")
REFERENCE_LIGHT, REFERENCE_DARK = "#b0403a", "#f6aea9"

_BINARY = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


# ------------------------------------------------------------------------------------------------ formatting
def _binary_scale(value: float) -> int:
    """Index into _BINARY so that value / 1024**index is below 1024."""
    value = abs(value)
    index = 0
    while value >= 1024 and index < len(_BINARY) - 1:
        value /= 1024
        index += 1
    return index


def format_value(value: float | None, unit: str = "", digits: int = 3) -> str:
    """A value as people read it: 12.3 GiB, 850 MiB/s, 45 %, 250 W, 61 °C; "-" for None/NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if unit in ("B", "B/s"):
        index = _binary_scale(value)
        scaled = value / 1024**index
        suffix = _BINARY[index] + ("/s" if unit == "B/s" else "")
        return f"{_significant(scaled, digits)} {suffix}"
    text = _significant(value, digits)
    return f"{text} {unit}" if unit else text


def _significant(value: float, digits: int) -> str:
    if value == 0:
        return "0"
    magnitude = int(math.floor(math.log10(abs(value))))
    decimals = max(0, digits - 1 - magnitude)
    text = f"{value:.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def _nice_step(raw: float) -> float:
    """The smallest 1, 2 or 5 x 10^n not below raw."""
    if raw <= 0 or not math.isfinite(raw):
        return 1.0
    exponent = math.floor(math.log10(raw))
    for factor in (1.0, 2.0, 5.0, 10.0):
        step = factor * 10**exponent
        if step >= raw * (1 - 1e-9):
            return step
    return 10.0 ** (exponent + 1)


def _decimals(step: float) -> int:
    """Enough decimals to write multiples of `step` exactly (0.25 -> 2, 0.5 -> 1, 5 -> 0), at most 4."""
    if step <= 0 or not math.isfinite(step):
        return 0
    for decimals in range(5):
        scaled = step * 10**decimals
        if abs(scaled - round(scaled)) < 1e-6 * max(1.0, scaled):
            return decimals
    return 4


class UnitAxisItem(pg.AxisItem):
    """A y axis that writes the unit on each tick; byte units step in powers of two (0.5 GiB, 1 GiB, ...)."""

    def __init__(self, unit: str, orientation: str = "left", **kwargs: Any) -> None:
        super().__init__(orientation, **kwargs)
        self.unit = unit
        self.enableAutoSIPrefix(False)

    def _is_bytes(self) -> bool:
        return self.unit in ("B", "B/s")

    def tickSpacing(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, float]]:  # noqa: N802
        if not self._is_bytes():
            return super().tickSpacing(minVal, maxVal, size)
        span = abs(maxVal - minVal)
        if span == 0 or not math.isfinite(span):
            return []
        scale = 1024 ** _binary_scale(max(abs(minVal), abs(maxVal)))
        target = max(2.0, size / 45.0)  # about one labelled tick per 45 px
        major = _nice_step(span / scale / target) * scale
        return [(major, 0.0), (major / 2, 0.0)]

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:  # noqa: N802
        if not values:
            return []
        if self._is_bytes():
            # One unit for the whole axis (from its range, not these values: minor ticks come separately).
            index = _binary_scale(max(abs(self.range[0]), abs(self.range[1]), *(abs(v) for v in values)))
            unit_scale = 1024**index
            decimals = _decimals(spacing / unit_scale)
            suffix = _BINARY[index] + ("/s" if self.unit == "B/s" else "")
            return [f"{v / unit_scale:.{decimals}f} {suffix}" for v in values]
        suffix = f" {self.unit}" if self.unit else ""
        largest = max(abs(v) for v in values)
        # One notation per axis, from its range: pyqtgraph asks for major and minor ticks separately, and
        # deciding by each call's spacing wrote "0.001" beside "1.5e-03" on one axis.
        extent = max(abs(self.range[0]), abs(self.range[1]), largest)
        if spacing > 0 and (spacing < 1e-3 or extent < 1e-2 or extent >= 1e6):
            # Learning rates (1e-5) and token counts (1e9): fixed decimals would print 0.0000 or 13 digits.
            digits = min(4, max(0, math.floor(math.log10(largest or spacing)) - math.floor(math.log10(spacing))))
            return [("0" if v == 0 else f"{v:.{digits}e}") + suffix for v in values]
        decimals = _decimals(spacing)
        return [f"{v:.{decimals}f}{suffix}" for v in values]


class _LegendSample(pg.ItemSample):
    """A short thick line in the series' colour (pyqtgraph draws a triangle for filled curves); clicking it
    still hides or shows the series."""

    def paint(self, p: Any, *args: Any) -> None:
        if not self.item.isVisible():
            super().paint(p, *args)  # pyqtgraph's "hidden" eye
            return
        pen = QPen(pg.mkPen(self.item.opts["pen"]))
        pen.setWidthF(3.0)
        p.setPen(pen)
        p.drawLine(2, 11, 18, 11)


# ------------------------------------------------------------------------------------------------ ring buffer
class _Ring:
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


def _as_array(values: Any) -> np.ndarray:
    """Scalars, lists (None allowed: a gap) or arrays -> a 1-D float64 array."""
    if isinstance(values, np.ndarray):
        return np.asarray(values, dtype=np.float64).ravel()
    if isinstance(values, (int, float)) or values is None:
        return np.array([np.nan if values is None else values], dtype=np.float64)
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


class _Series:
    def __init__(self, name: str, capacity: int, curve: pg.PlotDataItem, colour: str | None,
                 older_buckets: int = 0) -> None:
        self.name = name
        # Folded history (the Monitor's charts) is bounded memory for days: its ring is allocated whole at once.
        self.ring = _Ring(capacity, whole=older_buckets > 0)
        self.curve = curve
        self.colour = colour  # None: from the theme's palette by position
        self.fill = False
        self.lone = False  # drawn as a dot: a line needs two points, and one point alone showed nothing
        # Points pushed out of the ring, folded to min/max buckets (None: dropped; see the module's doc).
        self.older = BoundedSeries(recent=1, max_buckets=older_buckets) if older_buckets else None

    def replace(self, x: np.ndarray, y: np.ndarray) -> None:
        if self.older is not None:
            self.older = BoundedSeries(recent=1, max_buckets=self.older.max_buckets)
            cut = max(0, len(x) - self.ring.capacity)
            if cut:
                self.older.add(x[:cut].tolist(), y[:cut].tolist())
        self.ring.replace(x, y)

    def extend(self, x: np.ndarray, y: np.ndarray) -> None:
        if self.older is not None:
            ring_x, ring_y = self.ring.view()
            pushed = len(ring_x) + len(x) - self.ring.capacity  # the oldest this many leave the ring
            if pushed > 0:
                old = min(pushed, len(ring_x))
                self.older.add(ring_x[:old].tolist() + x[:pushed - old].tolist(),
                               ring_y[:old].tolist() + y[:pushed - old].tolist())
        self.ring.extend(x, y)

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


# ------------------------------------------------------------------------------------------------ the chart
class TimeSeriesChart(QWidget):
    """A titled line chart with a legend. x is UNIX seconds shown as clock time (`x_is_time`) or steps.

    `set_series(name, x, y)` replaces a series, `append(name, x, y)` adds scalars or arrays, `add_reference(value,
    label)` draws a dashed horizontal line (e.g. the estimate; the same label moves it), `clear()` removes all.
    """

    # The user zoomed or panned x (once the gesture settled): (low, high) in x units. A page holding a reduced
    # history may fetch the range at full resolution. follow_resumed: back to following the newest data.
    x_range_chosen = Signal(float, float)
    follow_resumed = Signal()

    def __init__(self, title: str, unit: str = "", parent: QWidget | None = None, *, x_is_time: bool = True,
                 max_points: int = DEFAULT_MAX_POINTS, older_buckets: int = 0) -> None:
        super().__init__(parent)
        self.title = title
        self.unit = unit
        self.max_points = int(max_points)
        self.older_buckets = int(older_buckets)  # > 0: points beyond max_points folded, not dropped
        self._x_is_time = bool(x_is_time)
        self._x_window: float | None = None
        self._series: dict[str, _Series] = {}
        self._references: dict[str, tuple[float, pg.InfiniteLine]] = {}
        self._follow_x = True
        self._leader: TimeSeriesChart | None = None  # see link_x
        self._followers: list[TimeSeriesChart] = []
        self._dirty = False
        self._setting_range = False
        self._dark = False

        self._y_axis = UnitAxisItem(unit)
        self.plot_widget = pg.PlotWidget(axisItems={"left": self._y_axis, "bottom": self._make_x_axis()})
        self.plot_widget.setMinimumHeight(120)
        self.plot_widget.setAntialiasing(False)  # the raster engine draws aliased polylines much faster
        item = self.plot_widget.getPlotItem()
        self.plot_item = item
        item.setMenuEnabled(False)  # pyqtgraph's own menu offers transforms that make no sense here
        item.hideButtons()  # only shown again while not following (see _range_changed_by_user)
        item.showGrid(x=False, y=True, alpha=0.15)
        item.setMouseEnabled(x=True, y=False)  # y is always fitted to what is visible
        item.disableAutoRange()
        view = item.getViewBox()
        # Not anchored (offset=None): pyqtgraph's anchor reacts to geometry changes of a ViewBox already deleted
        # when a chart is destroyed and raises from the event loop; _place_legend keeps it top right instead.
        self.legend = pg.LegendItem(offset=None, labelTextSize="8pt", verSpacing=-6, sampleType=_LegendSample)
        self.legend.setParentItem(view)
        item.legend = self.legend  # PlotItem.addItem lists named curves in it
        view.sigResized.connect(self._place_legend)
        view.sigRangeChangedManually.connect(self._range_changed_by_user)
        view.sigXRangeChanged.connect(self._x_range_changed)
        item.autoBtn.clicked.connect(self.follow)

        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(REDRAW_MS)
        self._timer.timeout.connect(self.flush)
        self._zoom_timer = QTimer(self)
        self._zoom_timer.setSingleShot(True)
        self._zoom_timer.setInterval(ZOOM_SETTLE_MS)
        self._zoom_timer.timeout.connect(self._zoom_settled)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.plot_widget)
        self._apply_theme()

    # ------------------------------------------------------------------------------------------- properties
    @property
    def x_is_time(self) -> bool:
        return self._x_is_time

    @x_is_time.setter
    def x_is_time(self, value: bool) -> None:
        value = bool(value)
        if value == self._x_is_time:
            return
        self._x_is_time = value
        self.plot_item.setAxisItems({"bottom": self._make_x_axis()})
        self._apply_theme()
        self._schedule()

    @property
    def following(self) -> bool:
        """x follows the newest data (False after the user zoomed or panned, until "A" or follow())."""
        return self._follow_x if self._leader is None else self._leader.following

    @property
    def x_window(self) -> float | None:
        """Show only the newest `x_window` x units (seconds or steps) while following; None shows everything."""
        return self._x_window

    @x_window.setter
    def x_window(self, value: float | None) -> None:
        self._x_window = float(value) if value else None
        self.follow()

    def set_axis_width(self, pixels: int) -> None:
        """A fixed width for the y axis, so that stacked charts (see link_x) line their plot areas up."""
        self.plot_item.getAxis("left").setWidth(pixels)

    def set_title(self, title: str) -> None:
        self.title = title
        self.plot_item.setTitle(title, color=self.palette().color(QPalette.ColorRole.Text).name(), size="9pt")

    def _make_x_axis(self) -> pg.AxisItem:
        if self._x_is_time:
            return pg.DateAxisItem(orientation="bottom")
        axis = pg.AxisItem(orientation="bottom")
        axis.setLabel("step")
        return axis

    # ------------------------------------------------------------------------------------------------- data
    def set_series(self, name: str, x: Any, y: Any, *, colour: str | None = None, fill: bool = False) -> None:
        """Replace the series `name` (created on first use; `colour`/`fill` apply when it is created)."""
        xs, ys = _as_array(x), _as_array(y)
        if len(xs) != len(ys):
            raise ValueError(f"{self.title}: series {name!r} has {len(xs)} x values but {len(ys)} y values")
        self._get(name, colour, fill).replace(xs, ys)
        self._schedule()

    def append(self, name: str, x: Any, y: Any, *, colour: str | None = None, fill: bool = False) -> None:
        """Add one point (scalars) or many (arrays); the oldest beyond `max_points` are dropped (folded with
        `older_buckets`). y None = a gap."""
        xs, ys = _as_array(x), _as_array(y)
        if len(xs) != len(ys):
            raise ValueError(f"{self.title}: series {name!r} got {len(xs)} x values but {len(ys)} y values")
        self._get(name, colour, fill).extend(xs, ys)
        self._schedule()

    def remove_series(self, name: str) -> None:
        series = self._series.pop(name, None)
        if series is not None:
            self.plot_item.removeItem(series.curve)
            self.legend.removeItem(series.curve)
            self._schedule()

    def add_reference(self, value: float, label: str) -> None:
        """A dashed horizontal line at `value` (in the chart's unit) with its label; the same label moves it."""
        text = f"{label}: {format_value(value, self.unit)}"
        if label in self._references:
            line = self._references[label][1]
            line.setValue(value)
            line.label.setFormat(text)
        else:
            # Labels side by side along the line, so lines at similar values keep readable labels.
            position = 0.02 + 0.22 * (len(self._references) % 4)
            line = pg.InfiniteLine(pos=value, angle=0, movable=False, label=text,
                                   labelOpts={"position": position, "anchors": [(0, 0), (0, 0)]})
            line.setZValue(10)  # above the curves, so its label stays readable
            self.plot_item.addItem(line, ignoreBounds=True)
        self._references[label] = (float(value), line)
        self._style_reference(line)
        self._schedule()

    def remove_reference(self, label: str) -> None:
        entry = self._references.pop(label, None)
        if entry is not None:
            self.plot_item.removeItem(entry[1])
            self._schedule()

    def clear_references(self) -> None:
        for label in list(self._references):
            self.remove_reference(label)

    def clear(self) -> None:
        """Remove every series and reference line."""
        for name in list(self._series):
            self.remove_series(name)
        self.clear_references()
        self._follow_x = self._leader is None

    # ----------------------------------------------------------------------------------------------- reading
    def series_names(self) -> list[str]:
        return list(self._series)

    def point_count(self, name: str) -> int:
        series = self._series.get(name)
        return len(series.ring) if series is not None else 0

    def data(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """Copies of the series' x and y (folded points as min/max pairs; empty arrays for an unknown name)."""
        series = self._series.get(name)
        if series is None:
            return np.empty(0), np.empty(0)
        return series.view()

    def last(self, name: str) -> float | None:
        series = self._series.get(name)
        if series is None or not len(series.ring):
            return None
        value = float(series.ring.view()[1][-1])
        return None if math.isnan(value) else value

    def references(self) -> dict[str, float]:
        return {label: value for label, (value, _) in self._references.items()}

    # ------------------------------------------------------------------------------------------------ redraw
    def _get(self, name: str, colour: str | None, fill: bool) -> _Series:
        series = self._series.get(name)
        if series is None:
            curve = pg.PlotDataItem(name=name)
            self.plot_item.addItem(curve)
            series = _Series(name, self.max_points, curve, colour, self.older_buckets)
            series.fill = fill
            self._series[name] = series
            self._style_curve(series, len(self._series) - 1)
        return series

    def _schedule(self) -> None:
        self._dirty = True
        if not self._timer.isActive():
            self._timer.start()

    def flush(self) -> None:
        """Push buffered data to the curves and refit the view now (the timer does this on its own)."""
        self._timer.stop()
        if not self._dirty:
            return
        window = self.window()
        if (not self.isVisible() and window.isVisible()) or window.isMinimized():
            return  # hidden page or minimised window: showEvent (or the window's restore) redraws
        self._dirty = False
        view = self.plot_item.getViewBox()
        if self._follow_x:
            extent = self._x_extent()
            if extent is not None:
                low, high = extent
                if self._x_window is not None:
                    # The whole window even when the data is shorter: new data grows in from the right at a
                    # steady scale, as in a task manager.
                    low = high - self._x_window
                if high <= low:
                    low, high = low - 1, high + 1
                self._set_range(lambda: view.setXRange(low, high, padding=0.01))
        x_low, x_high = view.viewRange()[0]
        # One min/max pair per device pixel column of the plot area is all a screen can show.
        columns = int(max(view.width(), self.width() * 0.8, 100) * self.devicePixelRatioF())
        y_low, y_high, found = 0.0, 0.0, False
        data_low, data_high = math.inf, -math.inf
        for series in self._series.values():
            x, y = series.ring.view()
            xd, yd = peak_decimate(x, y, x_low, x_high, columns, series.ring.total - len(series.ring))
            if series.older is not None and series.older.count and len(x) and x_low < x[0]:
                # The window reaches back into the folded part: its buckets (already ~2 a column), then the ring.
                ox, oy = series.older_points()
                oxd, oyd = peak_decimate(ox, oy, x_low, min(x_high, x[0]), columns)
                xd, yd = np.concatenate((oxd, xd)), np.concatenate((oyd, yd))
            series.curve.setData(xd, yd, connect="finite")
            lone = int(np.count_nonzero(np.isfinite(yd))) == 1
            if lone != series.lone:  # a run's first logged value: a dot until there is a line to draw
                series.lone = lone
                if lone:
                    series.curve.setSymbol("o")
                    series.curve.setSymbolSize(7)
                    series.curve.setSymbolPen(None)
                    series.curve.setSymbolBrush(series.curve.opts["pen"].color())
                else:
                    series.curve.setSymbol(None)
            if len(yd):
                low, high = float(np.fmin.reduce(yd)), float(np.fmax.reduce(yd))
                if not math.isnan(low):
                    y_low, y_high, found = min(y_low, low), max(y_high, high), True
                    data_low, data_high = min(data_low, low), max(data_high, high)
        for value, _ in self._references.values():
            y_low, y_high = min(y_low, value), max(y_high, value)
        if self.unit == "%" and found and y_high > 50:
            y_high = max(y_high, 100.0)  # utilisation reads best against its full scale
        if found and data_high > 0 and data_high - data_low <= 1e-9 * data_high and y_high == data_high \
                and self.unit != "%":
            # One flat positive value (a constant learning rate): the top of the scale would put it on the
            # chart's top border under the legend; half way up it reads as a level.
            y_high = 2 * data_high
        if y_high <= y_low:  # nothing but zeros (an idle network): a scale that reads as "nothing"
            y_high = y_low + {"%": 100.0, "B": float(2**20), "B/s": float(2**20)}.get(self.unit, 1.0)
        span = y_high - y_low
        # A little room below 0 so the "0" tick label is not cut off, more above for the legend.
        self._set_range(lambda: view.setYRange(y_low - span * 0.03, y_high + span * 0.1, padding=0))
        self._update_legend()
        self._place_legend()

    def _place_legend(self, *_: Any) -> None:
        view = self.plot_item.getViewBox()
        # Labels grew or shrank (they show the latest values): resize the legend to them, then keep it top right
        # (updateSize also moves it to 0, 0).
        self.legend.layout.activate()
        self.legend.updateSize()
        self.legend.setPos(max(0.0, view.width() - self.legend.boundingRect().width() - 4), 4)

    def link_x(self, leader: TimeSeriesChart) -> None:
        """Share the x axis with `leader`, for charts stacked to line up in time: the leader follows the data and
        this chart shows the leader's range; zooming or panning either one moves both."""
        self._leader = leader
        self._follow_x = False
        leader._followers.append(self)
        self.plot_item.setXLink(leader.plot_item)

    def follow(self) -> None:
        """Resume following the newest data (after the user zoomed or panned)."""
        if self._leader is not None:
            self.plot_item.disableAutoRange()
            self.plot_item.hideButtons()
            self._leader.follow()
            return
        for follower in self._followers:
            follower.plot_item.disableAutoRange()
            follower.plot_item.hideButtons()
        resumed = not self._follow_x
        self._follow_x = True
        self._zoom_timer.stop()
        self.plot_item.disableAutoRange()  # the "A" button turned pyqtgraph's own autorange on
        self.plot_item.hideButtons()
        self._dirty = True
        self.flush()
        if resumed:
            self.follow_resumed.emit()

    def _x_extent(self) -> tuple[float, float] | None:
        lows, highs = [], []
        for series in self._series.values():
            x = series.ring.view()[0]
            if len(x):
                first = series.older.first_x if series.older is not None and series.older.count else None
                lows.append(x[0] if first is None else first)
                highs.append(x[-1])
        if not lows:
            return None
        return float(min(lows)), float(max(highs))

    def _set_range(self, apply: Any) -> None:
        self._setting_range = True
        try:
            apply()
        finally:
            self._setting_range = False

    def _range_changed_by_user(self, *_: Any) -> None:
        if self._leader is not None:
            self._leader._range_changed_by_user()
        self._follow_x = False
        self.plot_item.showButtons()
        self._zoom_timer.start()

    def _zoom_settled(self) -> None:
        if not self._follow_x:
            low, high = self.plot_item.getViewBox().viewRange()[0]
            self.x_range_chosen.emit(float(low), float(high))

    def _x_range_changed(self, *_: Any) -> None:
        if not self._setting_range:  # the user zoomed or panned: decimate for the new range, refit y
            self._schedule()

    def _update_legend(self) -> None:
        for sample, label in self.legend.items:
            name = sample.item.name()
            value = self.last(name) if name in self._series else None
            label.setText(f"{name}  {format_value(value, self.unit)}" if value is not None else name)

    # ------------------------------------------------------------------------------------------------- theme
    def _colours(self) -> Sequence[str]:
        return DARK_COLOURS if self._dark else LIGHT_COLOURS

    def _style_curve(self, series: _Series, position: int) -> None:
        colour = QColor(series.colour or self._colours()[position % len(self._colours())])
        series.curve.setPen(pg.mkPen(colour, width=1))  # width 1: Qt's fast line path
        if series.fill:
            fill = QColor(colour)
            fill.setAlpha(50)
            series.curve.setFillLevel(0)
            series.curve.setBrush(pg.mkBrush(fill))

    def _style_reference(self, line: pg.InfiniteLine) -> None:
        colour = QColor(REFERENCE_DARK if self._dark else REFERENCE_LIGHT)
        line.setPen(pg.mkPen(colour, width=1.5, style=Qt.PenStyle.DashLine))
        line.label.setColor(colour)
        fill = QColor(self.palette().color(QPalette.ColorRole.Base))
        fill.setAlpha(200)  # readable over the curves
        line.label.fill = pg.mkBrush(fill)
        line.label.update()

    def _apply_theme(self) -> None:
        palette = self.palette()
        background = palette.color(QPalette.ColorRole.Base)
        foreground = palette.color(QPalette.ColorRole.Text)
        self._dark = background.lightness() < 128
        self.plot_widget.setBackground(background)
        for entry in self.plot_item.axes.values():
            axis = entry["item"]
            axis.setPen(pg.mkPen(foreground))
            axis.setTextPen(pg.mkPen(foreground))
        self.plot_item.setTitle(self.title, color=foreground.name(), size="9pt")
        self.legend.setLabelTextColor(foreground)
        legend_bg = QColor(background)
        legend_bg.setAlpha(170)
        self.legend.setBrush(pg.mkBrush(legend_bg))
        for position, series in enumerate(self._series.values()):
            self._style_curve(series, position)
        for _, line in self._references.values():
            self._style_reference(line)
        for _, label in self.legend.items:  # existing labels keep their old colour otherwise
            label.setAttr("color", foreground)
            label.setText(label.text)

    # ------------------------------------------------------------------------------------------------ events
    def changeEvent(self, event: QEvent) -> None:  # noqa: N802
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self._apply_theme()
        super().changeEvent(event)

    def resizeEvent(self, event: Any) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._schedule()  # more or fewer pixel columns: decimate again

    def showEvent(self, event: Any) -> None:  # noqa: N802
        super().showEvent(event)
        if self._dirty:
            self._schedule()


def set_many(chart: TimeSeriesChart, x: Any, columns: Iterable[tuple[str, Any]]) -> None:
    """Replace several series that share one x (e.g. columns read back from the run store)."""
    for name, y in columns:
        chart.set_series(name, x, y)
