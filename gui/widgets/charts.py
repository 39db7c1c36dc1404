"""`TimeSeriesChart`: a titled pyqtgraph line chart for resources and metrics that stays fast with a day of data.

Why it is built this way:
- Each series lives in a numpy ring buffer (`max_points`, default 200,000), stored twice as long as it is so the
  visible window is always one contiguous slice that pyqtgraph can draw without a copy. A chart fed for days
  (the Monitor page's) passes `older_buckets`: points pushed out of the ring are folded into a min/max
  `BoundedSeries` (the Runs page's, backend/runs/record/series.py) instead of dropped, so its memory stays bounded
  (ring + that many buckets) whatever the run's length, and a long window still shows the whole time.
- Appends only mark the chart dirty; curves are refreshed at most every `REDRAW_MS` by one timer, and not at all
  while the chart is hidden, so a flood of appends costs numpy copies, not repaints.
- Curves use pyqtgraph's clip-to-view and "peak" downsampling (min/max per pixel column): 86,400 points become
  ~2 per pixel and spikes (what kills runs) stay visible.
- The chart keeps its own view: x follows the newest data (optionally only the last `x_window` units), y is fitted
  from 0 to the visible peak and to any reference line, so an estimate line is always in sight. Zooming or panning
  x by mouse stops following; the "A" button in the corner resumes it.
- Options for metric charts (the Runs page's grid, History): `smoothing` draws TensorBoard's debiased EMA over
  each series with the raw line faint behind it (a curve of a few points drawn marked stays as logged); `log_y` a
  log scale (values <= 0 left out, and the chart says how many); `x_mode` labels x as steps, clock time or time
  since the run's start (the caller gives x in those units). `show_legend_values` writes the legend's figures
  without a redraw, so a page can show the same read there and elsewhere; `export_png` saves the chart as drawn;
  `add_menu_action` fills its right-click menu.
- Units are formatted on the y axis ("B" and "B/s" in binary steps: GiB, MiB/s) and in the legend, which shows each
  series' latest value. Colours follow the application's light or dark palette, also when it changes.

The code follows those seams: the widget here, its series (ring, folding, decimation) in chart_series.py, axes and
value words in chart_axis.py. Its speed is benchmarked in tests/perf/bench_gui_charts.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QBuffer, QByteArray, QEvent, QIODevice, QPoint, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QMenu, QVBoxLayout, QWidget

from traindeck.backend.runs import X_MODES, XMode, masked_words, positive_only, write_export
from traindeck.gui.widgets.chart_axis import DurationAxisItem, LegendSample, UnitAxisItem, format_value
from traindeck.gui.widgets.chart_series import ChartSeries, as_array, peak_decimate

REDRAW_MS = 50  # at most 20 curve refreshes a second per chart
ZOOM_SETTLE_MS = 300  # x_range_chosen is emitted this long after the last wheel step or drag of a gesture
DEFAULT_MAX_POINTS = 200_000

# Colour-blind-friendly-ish sets, one tuned for white and one for near-black backgrounds.
LIGHT_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
DARK_COLOURS = ("#8ab4f8", "#f28b82", "#81c995", "#fdd663", "#c58af9", "#fcad70", "#ff8bcb", "#78d9ec")
REFERENCE_LIGHT, REFERENCE_DARK = "#b0403a", "#f6aea9"
POINT_SYMBOLS = ("o", "s", "t", "d", "t1", "p", "h", "star")  # marked points, one shape a series
RAW_ALPHA = 70  # the raw line behind a smoothed one: visible, but clearly not the line to read

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
                 max_points: int = DEFAULT_MAX_POINTS, older_buckets: int = 0, smoothing: float = 0.0,
                 log_y: bool = False, x_mode: XMode | None = None) -> None:
        super().__init__(parent)
        self.title = title
        self.unit = unit
        self.max_points = int(max_points)
        # A curve of fewer finite points than this is drawn with its points marked: one point alone is no line, and
        # a few are easily missed (a comparison of short runs sets it higher).
        self.mark_points_below = 2
        self.older_buckets = int(older_buckets)  # > 0: points beyond max_points folded, not dropped
        self._x_mode: XMode = x_mode if x_mode is not None else ("time" if x_is_time else "step")
        self._smoothing = 0.0
        self._log_y = False
        self.masked_count = 0  # values <= 0 a log scale leaves out (see log_y)
        self.legend_digits = 3  # significant digits of the legend's figures
        self._menu_actions: list[tuple[str, Callable[[], None]]] = []
        self._x_window: float | None = None
        self._series: dict[str, ChartSeries] = {}
        self._references: dict[str, tuple[float, pg.InfiniteLine]] = {}
        self._follow_x = True
        self._leader: TimeSeriesChart | None = None  # see link_x
        self._followers: list[TimeSeriesChart] = []
        self._dirty = False
        self._setting_range = False
        self._dark = False
        self._legend_values: dict[str, float] = {}  # what a legend says instead of a series' last value (see below)

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
        self.legend = pg.LegendItem(offset=None, labelTextSize="8pt", verSpacing=-6, sampleType=LegendSample)
        self.legend.setParentItem(view)
        item.legend = self.legend  # PlotItem.addItem lists named curves in it
        # What a log scale leaves out, said in words bottom left (hidden while nothing is left out).
        self.mask_note = pg.LabelItem("", size="8pt", justify="left")
        self.mask_note.setParentItem(view)
        self.mask_note.hide()
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
        self.plot_widget.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.plot_widget.customContextMenuRequested.connect(self._show_menu)
        self._apply_theme()
        self.smoothing = smoothing
        self.log_y = log_y

    # ------------------------------------------------------------------------------------------- properties
    @property
    def x_is_time(self) -> bool:
        return self._x_mode == "time"

    @x_is_time.setter
    def x_is_time(self, value: bool) -> None:
        self.x_mode = "time" if value else "step"

    @property
    def x_mode(self) -> XMode:
        """How x is labelled: "step", "time" (UNIX seconds as clock time) or "relative" (seconds since a start)."""
        return self._x_mode

    @x_mode.setter
    def x_mode(self, mode: XMode) -> None:
        if mode not in X_MODES:
            raise ValueError(f"x_mode must be one of {X_MODES}, not {mode!r}")
        if mode == self._x_mode:
            return
        self._x_mode = mode
        self.plot_item.setAxisItems({"bottom": self._make_x_axis()})
        self._apply_theme()
        self._schedule()

    @property
    def smoothing(self) -> float:
        """TensorBoard's smoothing weight (0 = off, up to 0.99): the smoothed line drawn over the raw one."""
        return self._smoothing

    @smoothing.setter
    def smoothing(self, weight: float) -> None:
        weight = min(0.99, max(0.0, float(weight)))
        if weight == self._smoothing:
            return
        self._smoothing = weight
        for position, series in enumerate(self._series.values()):
            self._style_curve(series, position)
        self._schedule()

    @property
    def log_y(self) -> bool:
        """A log scale for y; values <= 0 are left out (see masked_count and mask_note)."""
        return self._log_y

    @log_y.setter
    def log_y(self, value: bool) -> None:
        value = bool(value)
        if value == self._log_y:
            return
        self._log_y = value
        self.plot_item.setLogMode(x=False, y=value)
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
        if self._x_mode == "time":
            return pg.DateAxisItem(orientation="bottom")
        if self._x_mode == "relative":
            return DurationAxisItem()
        axis = pg.AxisItem(orientation="bottom")
        axis.setLabel("step")
        return axis

    # ------------------------------------------------------------------------------------------------- data
    def set_series(self, name: str, x: Any, y: Any, *, colour: str | None = None, fill: bool = False) -> None:
        """Replace the series `name` (created on first use; `colour`/`fill` apply when it is created)."""
        xs, ys = as_array(x), as_array(y)
        if len(xs) != len(ys):
            raise ValueError(f"{self.title}: series {name!r} has {len(xs)} x values but {len(ys)} y values")
        self._get(name, colour, fill).replace(xs, ys)
        self._schedule()

    def append(self, name: str, x: Any, y: Any, *, colour: str | None = None, fill: bool = False) -> None:
        """Add one point (scalars) or many (arrays); the oldest beyond `max_points` are dropped (folded with
        `older_buckets`). y None = a gap."""
        xs, ys = as_array(x), as_array(y)
        if len(xs) != len(ys):
            raise ValueError(f"{self.title}: series {name!r} got {len(xs)} x values but {len(ys)} y values")
        self._get(name, colour, fill).extend(xs, ys)
        self._schedule()

    def remove_series(self, name: str) -> None:
        series = self._series.pop(name, None)
        if series is not None:
            self.plot_item.removeItem(series.curve)
            self.legend.removeItem(series.curve)
            if series.raw_curve is not None:
                self.plot_item.removeItem(series.raw_curve)
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
    def _get(self, name: str, colour: str | None, fill: bool) -> ChartSeries:
        series = self._series.get(name)
        if series is None:
            curve = pg.PlotDataItem(name=name)
            self.plot_item.addItem(curve)
            series = ChartSeries(name, self.max_points, curve, colour, self.older_buckets)
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
        masked = 0
        for series in self._series.values():
            x, y = series.ring.view()
            first_index = series.ring.total - len(series.ring)
            smoothed = series.smoothed(self._smoothing) if self._smoothing > 0 else None
            if self._log_y:
                y, count = positive_only(y)
                masked += count
                if smoothed is not None:
                    smoothed = positive_only(smoothed)[0]
            xd, yd = peak_decimate(x, y, x_low, x_high, columns, first_index)
            if series.older is not None and series.older.count and len(x) and x_low < x[0]:
                # The window reaches back into the folded part: its buckets (already ~2 a column), then the ring.
                ox, oy = series.older_points()
                if self._log_y:
                    oy = positive_only(oy)[0]
                oxd, oyd = peak_decimate(ox, oy, x_low, min(x_high, x[0]), columns)
                xd, yd = np.concatenate((oxd, xd)), np.concatenate((oyd, yd))
            lone = 0 < int(np.count_nonzero(np.isfinite(yd))) < self.mark_points_below
            if lone:
                smoothed = None  # its points are marked: as logged, not moved by the smoothing
            if smoothed is not None:
                # The raw line faint behind; the smoothed one (decimated alike) is the curve the legend names.
                if series.raw_curve is None:
                    series.raw_curve = pg.PlotDataItem()
                    series.raw_curve.setZValue(-1)
                    self.plot_item.addItem(series.raw_curve)
                    self._style_curve(series, list(self._series).index(series.name))
                series.raw_curve.setData(xd, yd, connect="finite")
                sx, sy = peak_decimate(x, smoothed, x_low, x_high, columns, first_index)
                series.curve.setData(sx, sy, connect="finite")
            else:
                if series.raw_curve is not None:
                    self.plot_item.removeItem(series.raw_curve)
                    series.raw_curve = None
                series.curve.setData(xd, yd, connect="finite")
            if lone != series.lone:  # a run's first logged value: a dot until there is a line to draw
                series.lone = lone
                if lone:
                    # Each series its own shape, later ones smaller: points of several runs at the same place
                    # stay visible.
                    position = list(self._series).index(series.name)
                    series.curve.setSymbol(POINT_SYMBOLS[position % len(POINT_SYMBOLS)])
                    series.curve.setSymbolSize(max(5, 9 - 2 * position))
                    series.curve.setSymbolPen(None)
                    series.curve.setSymbolBrush(series.curve.opts["pen"].color())
                else:
                    series.curve.setSymbol(None)
            if len(yd):
                low, high = float(np.fmin.reduce(yd)), float(np.fmax.reduce(yd))
                if not math.isnan(low):
                    y_low, y_high, found = min(y_low, low), max(y_high, high), True
                    data_low, data_high = min(data_low, low), max(data_high, high)
        self._show_masked(masked)
        if self._log_y:
            self._fit_log_y(found, data_low, data_high)
            return
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

    def _fit_log_y(self, found: bool, low: float, high: float) -> None:
        """y fitted in decades (the view's units in log mode are log10 of the values)."""
        view = self.plot_item.getViewBox()
        for value, _ in self._references.values():
            if value > 0:
                low, high, found = min(low, value), max(high, value), True
        if found and high > 0:
            top, bottom = math.log10(high), math.log10(low)
            if top - bottom < 1e-9:
                bottom, top = bottom - 0.5, top + 0.5
        else:
            bottom, top = -1.0, 1.0
        span = top - bottom
        self._set_range(lambda: view.setYRange(bottom - span * 0.03, top + span * 0.12, padding=0))
        self._update_legend()
        self._place_legend()

    def _show_masked(self, count: int) -> None:
        if count == self.masked_count and self.mask_note.isVisible() == bool(count):
            return
        self.masked_count = count
        self.mask_note.setText(masked_words(count), color=self.palette().color(QPalette.ColorRole.Text).name())
        self.mask_note.setVisible(bool(count))
        self._place_legend()

    def _place_legend(self, *_: Any) -> None:
        view = self.plot_item.getViewBox()
        # Labels grew or shrank (they show the latest values): resize the legend to them, then keep it top right
        # (updateSize also moves it to 0, 0).
        self.legend.layout.activate()
        self.legend.updateSize()
        self.legend.setPos(max(0.0, view.width() - self.legend.boundingRect().width() - 4), 4)
        if self.mask_note.isVisible():
            self.mask_note.setPos(4, max(0.0, view.height() - self.mask_note.boundingRect().height() - 2))

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
        # A leader follows the data of the charts linked to it too (see link_x): none of theirs is cut off.
        for series in [s for chart in (self, *self._followers) for s in chart._series.values()]:
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

    def set_legend_value(self, name: str, value: float | None) -> None:
        """The value the legend shows beside `name` instead of its line's last point (a stacked chart's line is a
        running sum; its legend says the part's own value). None: back to the last point."""
        if value is None:
            self._legend_values.pop(name, None)
        else:
            self._legend_values[name] = value
        self._schedule()

    def show_legend_values(self, values: Mapping[str, float | None]) -> None:
        """The legend's figures for these series now, without redrawing the curves: a page shows one read in the
        legend and beside the chart alike (None: back to the line's last point at the next redraw)."""
        for name, value in values.items():
            if value is None:
                self._legend_values.pop(name, None)
            else:
                self._legend_values[name] = value
        self._update_legend()
        self._place_legend()

    def legend_text(self, name: str) -> str | None:
        """What the legend says for `name` (None: no such entry)."""
        for sample, label in self.legend.items:
            if sample.item.name() == name:
                return str(label.text)
        return None

    # ------------------------------------------------------------------------------------------------ export
    def png_bytes(self) -> bytes:
        """The chart as drawn now, as a PNG."""
        self.flush()
        data = QByteArray()
        buffer = QBuffer(data)
        buffer.open(QIODevice.OpenModeFlag.WriteOnly)
        self.grab().save(buffer, "PNG")
        buffer.close()
        return bytes(data.data())

    def export_png(self, path: Path | str) -> Path:
        """Save the chart as a PNG at `path`, in one step (no half-written file)."""
        return write_export(Path(path), self.png_bytes())

    def add_menu_action(self, text: str, callback: Callable[[], None]) -> None:
        """An entry of the chart's right-click menu."""
        self._menu_actions.append((text, callback))

    def context_menu(self) -> QMenu | None:
        """The right-click menu (None without entries); its actions call the callbacks given."""
        if not self._menu_actions:
            return None
        menu = QMenu(self)
        for text, callback in self._menu_actions:
            menu.addAction(text).triggered.connect(lambda _checked=False, c=callback: c())
        return menu

    def _show_menu(self, position: QPoint) -> None:
        menu = self.context_menu()
        if menu is not None:
            menu.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
            menu.popup(self.plot_widget.mapToGlobal(position))

    def _update_legend(self) -> None:
        for sample, label in self.legend.items:
            name = sample.item.name()
            value = self._legend_values.get(name, self.last(name) if name in self._series else None)
            label.setText(f"{name}  {format_value(value, self.unit, self.legend_digits)}" if value is not None
                          else name)

    # ------------------------------------------------------------------------------------------------- theme
    def _colours(self) -> Sequence[str]:
        return DARK_COLOURS if self._dark else LIGHT_COLOURS

    def _style_curve(self, series: ChartSeries, position: int) -> None:
        colour = QColor(series.colour or self._colours()[position % len(self._colours())])
        series.curve.setPen(pg.mkPen(colour, width=1))  # width 1: Qt's fast line path
        if series.raw_curve is not None:
            faint = QColor(colour)
            faint.setAlpha(RAW_ALPHA)
            series.raw_curve.setPen(pg.mkPen(faint, width=1))
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
