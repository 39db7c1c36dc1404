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
- The chart keeps its own view: x follows the newest data (optionally only the last `x_window` units). y is fitted
  to what is visible and to any reference line, so an estimate line is always in sight: a resource chart (one with
  a unit: percent, bytes, rates) from 0 to the peak, a metric chart (unitless: the Runs page's, History's) to the
  data with a small margin, as TensorBoard does, so a loss going 2.30 -> 2.22 fills the chart (non-finite values
  take no part; a log scale fits in decades). Zooming or panning x by mouse stops following; on a metric chart
  Ctrl+wheel zooms y and Shift+drag zooms into a box. The "A" button in the corner, a double-click or the menu's
  "Reset view" follow and fit again.
- Hovering shows TensorBoard's readout: a line at the nearest x and a box with each visible series' value there
  (smoothed and raw while smoothing is on) and the x as steps, clock time or time since the start. Each move costs
  one binary search a series and is drawn at most once a frame.
- The legend sits in the corner where it covers the fewest drawn points (those just beside its box included) and
  no reference line's label; where every corner covers some, the y scale makes room above the data for it. An empty chart says "waiting for data" instead of a made-up 0..1 scale.
- Options for metric charts (the Runs page's grid, History): `smoothing` draws TensorBoard's debiased EMA over
  each series with the raw line faint behind it (a curve of a few points drawn marked stays as logged); `log_y` a
  log scale (values <= 0 left out, and the chart says how many); `x_mode` labels x as steps, clock time or time
  since the run's start (the caller gives x in those units). `show_legend_values` writes the legend's figures
  without a redraw, so a page can show the same read there and elsewhere; `set_legend_note` adds words to a
  series' figure or says them in its place (a rank that exited); `export_png` saves the chart as drawn;
  `add_menu_action` fills its right-click menu.
- Units are formatted on the y axis ("B" and "B/s" in binary steps: GiB, MiB/s) and in the legend, which shows each
  series' latest value. Colours follow the application's light or dark palette, also when it changes.

The code follows those seams: the widget here, its series (ring, folding, decimation) in chart_series.py, axes and
value words in chart_axis.py. Its speed is benchmarked in tests/perf/bench_gui_charts.py.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import (
    QBuffer,
    QByteArray,
    QEvent,
    QIODevice,
    QObject,
    QPoint,
    QPointF,
    QRectF,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import QColor, QFontMetricsF, QPalette
from PySide6.QtWidgets import QMenu, QVBoxLayout, QWidget

from traindeck.backend.runs import X_MODES, XMode, masked_words, positive_only, write_export
from traindeck.gui.widgets.chart_axis import (
    ClockAxisItem,
    DurationAxisItem,
    LegendSample,
    UnitAxisItem,
    duration_tick,
    format_value,
    whole_seconds,
)
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
HOVER_MS = 16  # the hover readout follows the mouse at most once a frame
LEGEND_CLEARANCE = 6  # pixels around the legend's box in which a point counts as covered
LABEL_WEIGHT = 1_000_000  # a reference line's label under the legend counts as this many covered points
Y_MARGIN = 0.05  # room above and below the data of a chart fitted to its data, as a fraction of the span
WAITING = "waiting for data"
UNTITLED_TOP = 8  # px above the plot of an untitled chart: room for half its top tick label


class _ChartView(pg.ViewBox):
    """The chart's ViewBox. Plain wheel and drag zoom and pan x (y is fitted by the chart). Where `y_zoom` is on
    (metric charts), Ctrl+wheel zooms y about the cursor and Shift+drag draws a box to zoom into; a double-click
    anywhere calls `reset` (the chart fits its view to the data again)."""

    def __init__(self, reset: Callable[[], None]) -> None:
        super().__init__()
        self.y_zoom = False
        self._reset = reset

    def wheelEvent(self, ev: Any, axis: int | None = None) -> None:  # noqa: N802
        if self.y_zoom and axis is None and ev.modifiers() & Qt.KeyboardModifier.ControlModifier:
            scale = 1.02 ** (ev.delta() * self.state["wheelScaleFactor"])
            center = pg.Point(pg.functions.invertQTransform(self.childGroup.transform()).map(ev.pos()))
            self._resetTarget()
            self.scaleBy([None, scale], center)
            ev.accept()
            self.sigRangeChangedManually.emit([False, True])
            return
        super().wheelEvent(ev, axis)

    def mouseDragEvent(self, ev: Any, axis: int | None = None) -> None:  # noqa: N802
        if self.y_zoom and axis is None and ev.button() == Qt.MouseButton.LeftButton \
                and ev.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            ev.accept()
            if not ev.isFinish():
                self.updateScaleBox(ev.buttonDownPos(), ev.pos())
                return
            self.rbScaleBox.hide()
            box = QRectF(pg.Point(ev.buttonDownPos(ev.button())), pg.Point(ev.pos())).normalized()
            if box.width() > 3 and box.height() > 3:  # a click with Shift held is no box
                self.zoom_to(self.childGroup.mapRectFromParent(box))
            return
        super().mouseDragEvent(ev, axis)

    def zoom_to(self, area: QRectF) -> None:
        """Show `area` (in data units) as a box zoom does."""
        self.setRange(area.normalized(), padding=0)
        self.sigRangeChangedManually.emit([True, True])

    def mouseClickEvent(self, ev: Any) -> None:  # noqa: N802
        if ev.double() and ev.button() == Qt.MouseButton.LeftButton:
            ev.accept()
            self._reset()
            return
        super().mouseClickEvent(ev)


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
                 log_y: bool = False, x_mode: XMode | None = None, y_from_zero: bool | None = None) -> None:
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
        self._fit_y = True  # False after the user zoomed y, until "A", a double-click or follow()
        self._leader: TimeSeriesChart | None = None  # see link_x
        self._followers: list[TimeSeriesChart] = []
        self._dirty = False
        self._setting_range = False
        self._dark = False
        self._legend_values: dict[str, float] = {}  # what a legend says instead of a series' last value (see below)
        self._legend_notes: dict[str, tuple[str, bool]] = {}  # words after a series' name (see set_legend_note)
        self._drawn: list[tuple[np.ndarray, np.ndarray]] = []  # the points drawn, in view units (legend placement)
        self._drawn_last: dict[str, float] = {}  # each series' newest x handed to its curve by the last redraw
        self._legend_corner = 0  # which of _legend_corners() the legend sits in
        self._waiting: bool | None = None  # the "waiting for data" state the axes show (None: not applied yet)
        self._hover_pos: QPointF | None = None
        self.hover_text = ""  # what the hover readout says now, as plain text with every row named ("": hidden)

        self._y_axis = UnitAxisItem(unit)
        self._view = _ChartView(self.follow)
        self.plot_widget = pg.PlotWidget(viewBox=self._view,
                                         axisItems={"left": self._y_axis, "bottom": self._make_x_axis()})
        self.plot_widget.setMinimumHeight(120)
        self.plot_widget.setAntialiasing(False)  # the raster engine draws aliased polylines much faster
        item = self.plot_widget.getPlotItem()
        self.plot_item = item
        item.setMenuEnabled(False)  # pyqtgraph's own menu offers transforms that make no sense here
        item.hideButtons()  # only shown again while not following (see _range_changed_by_user)
        item.showGrid(x=False, y=True, alpha=0.15)
        item.setMouseEnabled(x=True, y=False)  # y is fitted to what is visible (metric charts: see _ChartView)
        item.disableAutoRange()
        view = item.getViewBox()
        # Not anchored (offset=None): pyqtgraph's anchor reacts to geometry changes of a ViewBox already deleted
        # when a chart is destroyed and raises from the event loop; _place_legend keeps it top right instead.
        self.legend = pg.LegendItem(offset=None, labelTextSize="8pt", verSpacing=-6, sampleType=LegendSample)
        self.legend.setParentItem(view)
        self.legend.layout.setContentsMargins(3, 0, 3, 0)  # a tight box: it covers less of the data
        item.legend = self.legend  # PlotItem.addItem lists named curves in it
        # What a log scale leaves out, said in words bottom left (hidden while nothing is left out).
        self.mask_note = pg.LabelItem("", size="8pt", justify="left")
        self.mask_note.setParentItem(view)
        self.mask_note.hide()
        # An empty chart says so instead of drawing a made-up 0..1 scale.
        self.waiting_note = pg.LabelItem(WAITING, size="9pt")
        self.waiting_note.setParentItem(view)
        self.waiting_note.hide()
        # The hover readout: a vertical line at the nearest x, and each series' value there in a box beside it.
        self.hover_line = pg.InfiniteLine(angle=90, movable=False)
        self.hover_line.setZValue(20)
        self.hover_line.hide()
        view.addItem(self.hover_line, ignoreBounds=True)  # in the view, not among the plot's items (references)
        self.hover_label = pg.TextItem(anchor=(0, 0))
        self.hover_label.setParentItem(item)  # the whole plot, axes included: a small chart still has room for it
        self.hover_label.setZValue(1e6)  # over the legend, which it may cross
        self.hover_label.hide()
        self.plot_widget.scene().sigMouseMoved.connect(self._mouse_moved)
        self.plot_widget.viewport().installEventFilter(self)
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
        self._hover_timer = QTimer(self)
        self._hover_timer.setSingleShot(True)
        self._hover_timer.setInterval(HOVER_MS)
        self._hover_timer.timeout.connect(self._update_hover)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.plot_widget)
        self.plot_widget.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.plot_widget.customContextMenuRequested.connect(self._show_menu)
        self._y_from_zero = True
        self.y_from_zero = bool(unit) if y_from_zero is None else y_from_zero
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
        self._waiting = None  # the new axis shows ticks until the next redraw says whether there is data
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
        self._fit_y = True  # a y zoom in the other scale's units means nothing in this one
        self.plot_item.setLogMode(x=False, y=value)
        self._schedule()

    @property
    def y_from_zero(self) -> bool:
        """y is fitted from 0 to the peak (resource charts: percent, bytes, rates), not to the data shown (metric
        charts, as in TensorBoard). Charts with a unit start from 0 unless told otherwise; unitless ones (metrics)
        fit their data, and only they can be zoomed in y (Ctrl+wheel, Shift+drag)."""
        return self._y_from_zero

    @y_from_zero.setter
    def y_from_zero(self, value: bool) -> None:
        self._y_from_zero = bool(value)
        self._view.y_zoom = not self._y_from_zero
        self._schedule()

    @property
    def fitting_y(self) -> bool:
        """y is fitted to the data (False after the user zoomed y, until "A", a double-click or follow())."""
        return self._fit_y

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
        """A following chart shows the new window with its next redraw (a window that grows with every sample
        costs no redraw of its own); one the person zoomed or panned follows again, at once."""
        window = float(value) if value else None
        if window == self._x_window and self.following:
            return
        self._x_window = window
        if self.following:
            self._schedule()
        else:
            self.follow()

    def set_axis_width(self, pixels: int) -> None:
        """A fixed width for the y axis, so that stacked charts (see link_x) line their plot areas up."""
        self.plot_item.getAxis("left").setWidth(pixels)

    def set_title(self, title: str) -> None:
        self.title = title
        self._show_title(self.palette().color(QPalette.ColorRole.Text))

    def _show_title(self, colour: QColor) -> None:
        """The title above the plot; an untitled chart (a cell above it names it) gives the plot that row, all but
        UNTITLED_TOP px that keep its top tick label whole."""
        if self.title:
            self.plot_item.setTitle(self.title, color=colour.name(), size="9pt")
        else:
            self.plot_item.setTitle(None)
            self.plot_item.layout.setRowFixedHeight(0, UNTITLED_TOP)

    def _make_x_axis(self) -> pg.AxisItem:
        if self._x_mode == "time":
            axis = ClockAxisItem()  # labels that fit: two at least on a narrow chart, none cut at its edge
            whole_seconds(axis)  # 12:04:05 over a young run, never "05.500"
            return axis
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
        self._legend_notes.pop(name, None)
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
        """The series' newest finite value: a line that ends in a gap (a recording's samples after the run's
        processes ended, a break while sampling stopped) keeps its last figure. None: no value at all."""
        series = self._series.get(name)
        if series is None or not len(series.ring):
            return None
        y = series.ring.view()[1]
        if not math.isfinite(float(y[-1])):
            known = np.flatnonzero(np.isfinite(y))  # only a line ending in a gap pays for this search
            return float(y[known[-1]]) if len(known) else None
        return float(y[-1])

    def drawn_last_x(self, name: str) -> float | None:
        """The newest x of `name` in its curve as last redrawn (None: not drawn): what is on screen, where
        point_count and last() say what the chart holds, drawn or not yet."""
        return self._drawn_last.get(name)

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
        if self._leader is not None and self._leader._follow_x:
            self._leader._schedule()  # the shared x range follows this chart's data too (see link_x)

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
        found = False
        data_low, data_high = math.inf, -math.inf
        drawn: list[tuple[np.ndarray, np.ndarray]] = []
        masked = 0
        self._drawn_last = {}
        for series in self._series.values():
            x, y = series.ring.view()
            if len(x):
                self._drawn_last[series.name] = float(x[-1])
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
            # Points marked or not before the new data is set: a marked curve given only gaps (a log scale's
            # left-out values) would have pyqtgraph bound a scatter of NaN.
            is_finite = np.isfinite(yd)
            lone = 0 < int(np.count_nonzero(is_finite)) < self.mark_points_below
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
            if len(yd):
                finite = yd[is_finite]  # inf as well as the gaps' NaN: no scale to infinity
                if len(finite):
                    low, high = float(finite.min()), float(finite.max())
                    found = True
                    data_low, data_high = min(data_low, low), max(data_high, high)
                    shown = xd[is_finite]
                    drawn.append((shown, np.log10(finite) if self._log_y else finite))
        self._drawn = drawn
        self._show_masked(masked)
        self._show_waiting(not found and not self._references)
        self._update_legend()
        if self._fit_y:
            if self._log_y:
                bottom, top = self._log_y_range(found, data_low, data_high)
            elif self._y_from_zero:
                bottom, top = self._zero_y_range(found, data_low, data_high)
            else:
                bottom, top = self._data_y_range(found, data_low, data_high)
            top = self._legend_room(bottom, top)
            self._set_range(lambda: view.setYRange(bottom, top, padding=0))
        self._place_legend()
        if self.hover_line.isVisible():
            self._update_hover()  # new data under a resting mouse: its readout follows

    def _zero_y_range(self, found: bool, data_low: float, data_high: float) -> tuple[float, float]:
        """A resource's scale: from 0 (or below, for negative data) to the peak and to any reference line."""
        y_low = min(0.0, data_low) if found else 0.0
        y_high = max(0.0, data_high) if found else 0.0
        for value, _ in self._references.values():
            y_low, y_high = min(y_low, value), max(y_high, value)
        if self.unit == "%" and found and y_high > 50:
            y_high = max(y_high, 100.0)  # utilisation reads best against its full scale
        if found and data_high > 0 and data_high - data_low <= 1e-9 * data_high and y_high == data_high \
                and self.unit != "%":
            # One flat positive value (a constant learning rate): the top of the scale would put it on the
            # chart's top border; half way up it reads as a level.
            y_high = 2 * data_high
        if y_high <= y_low:  # nothing but zeros (an idle network): a scale that reads as "nothing"
            y_high = y_low + {"%": 100.0, "B": float(2**20), "B/s": float(2**20)}.get(self.unit, 1.0)
        span = y_high - y_low
        # A little room below 0 so the "0" tick label is not cut off, and above the peak.
        return y_low - span * 0.03, y_high + span * Y_MARGIN

    def _data_y_range(self, found: bool, data_low: float, data_high: float) -> tuple[float, float]:
        """A metric's scale, as TensorBoard's: the data shown (and any reference line) with a small margin."""
        for value, _ in self._references.values():
            data_low, data_high, found = min(data_low, value), max(data_high, value), True
        if not found:
            return 0.0, 1.0
        span = data_high - data_low
        if span <= 1e-9 * max(abs(data_high), abs(data_low)):  # one flat value (a constant learning rate)
            half = abs(data_high) * 0.5 or 1.0
            return data_low - half, data_high + half
        return data_low - span * Y_MARGIN, data_high + span * Y_MARGIN

    def _log_y_range(self, found: bool, low: float, high: float) -> tuple[float, float]:
        """y fitted in decades (the view's units in log mode are log10 of the values)."""
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
        # Decades at the data's ends are labelled only if half a label fits beyond them (pyqtgraph leaves out a
        # label that would stick out of the axis): a 1e-6..1e-4 warm-up on a short chart keeps its end labels.
        axis = self.plot_item.getAxis("left")
        pixels = self.plot_item.getViewBox().height()
        label = QFontMetricsF(axis.style.get("tickFont") or axis.font()).height()
        margin = max(Y_MARGIN, min(0.25, 0.6 * label / pixels)) if pixels > 0 else Y_MARGIN
        return bottom - span * margin, top + span * margin

    def _show_masked(self, count: int) -> None:
        if count == self.masked_count and self.mask_note.isVisible() == bool(count):
            return
        self.masked_count = count
        self.mask_note.setText(masked_words(count), color=self.palette().color(QPalette.ColorRole.Text).name())
        self.mask_note.setVisible(bool(count))
        self._place_legend()

    def _show_waiting(self, waiting: bool) -> None:
        """Before any data: "waiting for data" in the middle and no ticks (no made-up 0..1 scale)."""
        if waiting == self._waiting:
            return
        self._waiting = waiting
        self.waiting_note.setVisible(waiting)
        for side in ("left", "bottom"):
            self.plot_item.getAxis(side).setTicks([] if waiting else None)

    # ------------------------------------------------------------------------------------------------ legend
    def _legend_corners(self) -> list[tuple[float, float]]:
        """Where the legend may sit (its top left, in the view's pixels), in order of preference."""
        view = self.plot_item.getViewBox()
        rect = self.legend.boundingRect()
        right = max(0.0, view.width() - rect.width() - 4)
        bottom = max(0.0, view.height() - rect.height() - 4)
        corners = [(right, 4.0), (4.0, 4.0), (right, bottom)]
        if not self.mask_note.isVisible():  # the note about left-out values has the bottom left
            corners.append((4.0, bottom))
        return corners

    def _covered(self, corner: tuple[float, float], y_range: tuple[float, float] | None = None) -> int:
        """How many drawn points the legend would cover at `corner` (with y showing `y_range`), counting those
        within LEGEND_CLEARANCE pixels of its box (a line's end touching it reads as hidden) and a reference line's
        label under it as LABEL_WEIGHT points (a label is text to read: covered, it is lost)."""
        view = self.plot_item.getViewBox()
        width, height = view.width(), view.height()
        if width <= 0 or height <= 0:
            return 0
        (x_low, x_high), shown_y = view.viewRange()
        y_low, y_high = y_range if y_range is not None else shown_y
        rect = self.legend.boundingRect()
        left, top = corner[0] - LEGEND_CLEARANCE, corner[1] - LEGEND_CLEARANCE
        right, bottom = corner[0] + rect.width() + LEGEND_CLEARANCE, corner[1] + rect.height() + LEGEND_CLEARANCE
        box = QRectF(left, top, right - left, bottom - top)
        labels = sum(LABEL_WEIGHT for label in self._reference_labels(y_low, y_high) if label.intersects(box))
        if not self._drawn:
            return labels
        xa = x_low + (left / width) * (x_high - x_low)
        xb = x_low + (right / width) * (x_high - x_low)
        ya = y_high - (bottom / height) * (y_high - y_low)
        yb = y_high - (top / height) * (y_high - y_low)
        return labels + sum(int(np.count_nonzero((x >= xa) & (x <= xb) & (y >= ya) & (y <= yb)))
                            for x, y in self._drawn)

    def _reference_values(self) -> list[float]:
        """The reference lines' heights in the view's units (log10 on a log scale, where a value <= 0 has none)."""
        if not self._log_y:
            return [value for value, _ in self._references.values()]
        return [math.log10(value) for value, _ in self._references.values() if value > 0]

    def _reference_labels(self, y_low: float, y_high: float) -> list[QRectF]:
        """Where the reference lines' labels stand, in the view's pixels, with y showing y_low..y_high: each hangs
        from its line at its place along it (see add_reference)."""
        view = self.plot_item.getViewBox()
        width, height = view.width(), view.height()
        if y_high <= y_low or not self._references:
            return []
        rects = []
        lines = [line for value, line in self._references.values() if not self._log_y or value > 0]
        for value, line in zip(self._reference_values(), lines, strict=True):
            text = line.label.boundingRect()
            x = line.label.orthoPos * width
            y = (y_high - value) / (y_high - y_low) * height
            rects.append(QRectF(x + text.left(), y + text.top(), text.width(), text.height()))
        return rects

    def _legend_room(self, bottom: float, top: float) -> float:
        """The top of a fitted y scale, raised where the legend would cover points in every corner, so that it
        sits above the data (not when the legend is so tall that the data would be squeezed to under half)."""
        if not self.legend.items or not self._drawn:
            return top
        self._size_legend()
        if min(self._covered(corner, (bottom, top)) for corner in self._legend_corners()) == 0:
            return top
        view = self.plot_item.getViewBox()
        height = view.height()
        band = (self.legend.boundingRect().height() + 8) / height if height > 0 else 1.0
        if band > 0.5:  # the data keeps at least half the height; a taller legend takes the freest corner
            return top
        x_low, x_high = view.viewRange()[0]
        peak = max((float(y[(x >= x_low) & (x <= x_high)].max(initial=-math.inf)) for x, y in self._drawn),
                   default=-math.inf)
        peak = max([peak, *self._reference_values()])  # a line's label hangs below it: above the line is free
        if not math.isfinite(peak):
            return top
        return max(top, (peak - bottom * band) / (1 - band))  # the peak just below the legend's band

    def _size_legend(self) -> None:
        """The legend's box fitted to its entries: the layout's own size, rows overlapping as verSpacing says
        (pyqtgraph's updateSize adds the rows' full heights, a box taller than its text)."""
        size = self.legend.layout.preferredSize()
        position = self.legend.pos()
        self.legend.setGeometry(position.x(), position.y(), size.width(), size.height())

    def _place_legend(self, *_: Any) -> None:
        view = self.plot_item.getViewBox()
        # Labels grew or shrank (they show the latest values): resize the legend to them, then put it in the
        # corner where it covers the fewest points (top right when several are free).
        self._size_legend()
        corners = self._legend_corners()
        counts = [self._covered(corner) for corner in corners]
        if self._legend_corner >= len(corners) or counts[self._legend_corner] > min(counts):
            self._legend_corner = counts.index(min(counts))  # moved only for fewer covered points: no hopping
        self.legend.setPos(*corners[self._legend_corner])
        if self.mask_note.isVisible():
            self.mask_note.setPos(4, max(0.0, view.height() - self.mask_note.boundingRect().height() - 2))
        if self.waiting_note.isVisible():
            note = self.waiting_note.boundingRect()
            self.waiting_note.setPos(max(0.0, (view.width() - note.width()) / 2),
                                     max(0.0, (view.height() - note.height()) / 2))

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
        self._fit_y = True
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

    def _range_changed_by_user(self, mask: Any = None) -> None:
        """The user zoomed or panned: x (mask[0]) stops following the newest data, y (mask[1]) stops being fitted;
        "A" shows the way back."""
        x_changed, y_changed = (True, False) if mask is None else (bool(mask[0]), bool(mask[1]))
        if y_changed:
            self._fit_y = False
        if x_changed:
            if self._leader is not None:
                self._leader._range_changed_by_user()
            self._follow_x = False
            self._zoom_timer.start()
        self.plot_item.showButtons()

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

    def set_legend_note(self, name: str, note: str | None, *, value: bool = True) -> None:
        """Words the legend says after `name`'s figure ("3 live"), or in its place (`value` False: "exited at
        12:04:05", a line whose last point is no figure of now). None: the figure alone."""
        if note is None:
            if self._legend_notes.pop(name, None) is None:
                return
        elif self._legend_notes.get(name) == (note, value):
            return
        else:
            self._legend_notes[name] = (note, value)
        self._update_legend()
        self._place_legend()

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

    # ------------------------------------------------------------------------------------------------ hover
    def readout(self, x: float) -> tuple[float, list[tuple[str, QColor, str]]] | None:
        """What the hover readout says with the mouse at `x` (data units): the x of the nearest point of any visible
        series, and for each visible series with a point there its name, colour and value (smoothed, then raw,
        while smoothing is on). None: no data. A binary search a series: cheap on any length."""
        nearest: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray | None]] = {}
        best: float | None = None
        for series in self._series.values():
            if not series.curve.isVisible():
                continue
            xs, ys = series.ring.view()
            smoothed = series.smoothed(self._smoothing) if self._smoothing > 0 else None
            if series.older is not None and series.older.count and len(xs) and x < xs[0]:
                (xs, ys), smoothed = series.older_points(), None  # over the folded part: its buckets
            if not len(xs):
                continue
            nearest[series.name] = (xs, ys, smoothed)
            candidate = float(xs[_nearest_index(xs, x)])
            if best is None or abs(candidate - x) < abs(best - x):
                best = candidate
        if best is None:
            return None
        x_low, x_high = self.plot_item.getViewBox().viewRange()[0]
        tolerance = 0.02 * (x_high - x_low)  # a series ending before the mouse is not read at its last point
        digits = max(4, self.legend_digits)
        positions = {name: position for position, name in enumerate(self._series)}  # the colours follow these
        rows = []
        for name, (xs, ys, smoothed) in nearest.items():
            i = _nearest_index(xs, best)
            if abs(float(xs[i]) - best) > tolerance:
                continue
            raw = _finite_or_none(ys[i])
            text = format_value(raw, self.unit, digits)
            if smoothed is not None:
                text = f"{format_value(_finite_or_none(smoothed[i]), self.unit, digits)} (raw {text})"
            rows.append((name, self._series_colour(self._series[name], positions[name]), text))
        return best, rows

    def x_words(self, x: float) -> str:
        """An x as the readout says it, in the chart's x mode."""
        if self._x_mode == "time":
            return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(x))
        if self._x_mode == "relative":
            return f"{duration_tick(x)} since start"
        return f"step {x:,.0f}" if float(x).is_integer() else f"step {format_value(x, '', 6)}"

    def _mouse_moved(self, scene_pos: QPointF) -> None:
        self._hover_pos = QPointF(scene_pos)
        if not self._hover_timer.isActive():  # at most one readout a frame, however fast the mouse moves
            self._hover_timer.start()

    def _update_hover(self) -> None:
        view = self.plot_item.getViewBox()
        pos = self._hover_pos
        if pos is None or not view.sceneBoundingRect().contains(pos):
            self._hide_hover()
            return
        found = self.readout(view.mapSceneToView(pos).x())
        if found is None or not found[1]:
            self._hide_hover()
            return
        x, rows = found
        self.hover_text = "\n".join([self.x_words(x), *(f"{name}  {text}" for name, _, text in rows)])
        foreground = self.palette().color(QPalette.ColorRole.Text).name()
        for named in (True, False):
            html = "".join(f"<br><span style='color:{colour.name()}'>&#9632;</span> "
                           + (f"{_escape(name)}&nbsp;&nbsp;" if named else "") + f"<b>{_escape(text)}</b>"
                           for name, colour, text in rows)
            self.hover_label.setHtml(f"<div style='color:{foreground}; font-size:8pt'>{_escape(self.x_words(x))}"
                                     f"{html}</div>")
            if len(rows) > 1 or self.hover_label.boundingRect().width() <= self.plot_item.width():
                break  # a lone series too wide for a small chart is read without its name (its chart has it)
        self.hover_line.setValue(x)
        self.hover_line.show()
        self.hover_label.show()
        self.hover_label.setPos(*self._hover_place(self.plot_item.mapFromScene(pos)))

    def _hover_place(self, cursor: QPointF) -> tuple[float, float]:
        """Where the readout's box goes (its top left, in the plot's coordinates) with the mouse at `cursor`: beside
        the mouse, right of it where there is room, else left of it, else where it leaves the mouse's line clear (or
        as far right as it fits); below the mouse, else above it. It stays over the data area, off the axes' numbers, unless the data area is narrower (or
        lower) than the box."""
        box = self.hover_label.boundingRect()
        area = self.plot_item.getViewBox().geometry()  # the data area, inside the axes
        width, height = self.plot_item.width(), self.plot_item.height()
        low_x = area.left() if box.width() <= width - area.left() else 0.0
        high_y = area.bottom() if box.height() <= area.bottom() else height
        left = cursor.x() + 14
        if left + box.width() > width:
            left = cursor.x() - 14 - box.width()
            if left < low_x:  # no room either side: right of the axis' numbers, clear of the mouse's line if it
                # fits there, else as far from the numbers as it fits
                left = low_x if low_x + box.width() <= cursor.x() - 2 else width - box.width()
        left = max(low_x, min(left, width - box.width()))
        top = cursor.y() + 14
        if top + box.height() > high_y:
            top = cursor.y() - 14 - box.height()
        top = min(max(0.0, top), max(0.0, high_y - box.height()))
        return left, top

    def _hide_hover(self) -> None:
        self._hover_pos = None
        self.hover_text = ""
        self.hover_line.hide()
        self.hover_label.hide()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802
        if event.type() == QEvent.Type.Leave:  # the mouse left the chart: no readout left behind
            self._hover_timer.stop()
            self._hide_hover()
        return super().eventFilter(watched, event)

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
        """The right-click menu (None without entries); its actions call the callbacks given. While the view is
        zoomed or panned it starts with "Reset view" (back to following the data, as "A" does)."""
        actions = list(self._menu_actions)
        if not self.following or not self._fit_y:
            actions.insert(0, ("Reset view", self.follow))
        if not actions:
            return None
        menu = QMenu(self)
        for text, callback in actions:
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
            note, with_value = self._legend_notes.get(name, ("", True))
            words = [name]
            if value is not None and with_value:
                words.append(format_value(value, self.unit, self.legend_digits))
            if note:
                words.append(note)
            label.setText("  ".join(words))

    # ------------------------------------------------------------------------------------------------- theme
    def _colours(self) -> Sequence[str]:
        return DARK_COLOURS if self._dark else LIGHT_COLOURS

    def _series_colour(self, series: ChartSeries, position: int) -> QColor:
        return QColor(series.colour or self._colours()[position % len(self._colours())])

    def _style_curve(self, series: ChartSeries, position: int) -> None:
        colour = self._series_colour(series, position)
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
        self._show_title(foreground)
        self.legend.setLabelTextColor(foreground)
        legend_bg = QColor(background)
        legend_bg.setAlpha(170)
        self.legend.setBrush(pg.mkBrush(legend_bg))
        for position, series in enumerate(self._series.values()):
            self._style_curve(series, position)
        for _, line in self._references.values():
            self._style_reference(line)
        self.hover_line.setPen(pg.mkPen(foreground, width=1, style=Qt.PenStyle.DotLine))
        self.hover_label.fill = pg.mkBrush(background)  # opaque: the legend it may cross does not show through
        self.hover_label.border = pg.mkPen(foreground.darker(150) if not self._dark else foreground.lighter(60))
        self.waiting_note.setText(WAITING, color=palette.color(QPalette.ColorRole.PlaceholderText).name())
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


def _nearest_index(xs: np.ndarray, x: float) -> int:
    """The index of the point of increasing `xs` nearest to `x` (a binary search)."""
    i = int(np.searchsorted(xs, x))
    if i >= len(xs):
        return len(xs) - 1
    if i > 0 and x - xs[i - 1] <= xs[i] - x:
        return i - 1
    return i


def _finite_or_none(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def set_many(chart: TimeSeriesChart, x: Any, columns: Iterable[tuple[str, Any]]) -> None:
    """Replace several series that share one x (e.g. columns read back from the run store)."""
    for name, y in columns:
        chart.set_series(name, x, y)
