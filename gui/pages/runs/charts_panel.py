"""The Runs page's charts and last metrics: the watched run's new points drawn as each read brings them,
zoom re-reads at full resolution. ChartsPanel reads the series from the WatchedRun it is given; the page hands it
each poll's news and says when to draw.

Three views of the run: "Overview" (the losses and one chosen metric), "All metrics" (MetricsGrid,
metrics_grid.py: a small chart per metric, filtered, pinned, a page at a time) and "System" (SystemView,
system_view.py: the losses beside the run's recorded GPU, CPU, memory, disk and network figures, one zoom for all,
filtered and pinned as the grid's; read from the run store on the page's background reads while the view is shown,
only the samples recorded since the last read each poll). Options over the views:
smoothing (TensorBoard's EMA), a log scale for y, x by step, wall time or time since the run's start; export of
the charts as PNG and their data as CSV (buttons, and each chart's right-click menu). Each legend names its line's
newest point, so it moves when the line is redrawn and the two never disagree; "Last metrics" beside them takes
each read in the same pass as the charts that draw it (a read that changes no chart shown: at once), so the two say
the same figures whenever no draw is under way.

A live run's new points are drawn as each read arrives: a chart is handed only the points added since it was
fed (BoundedSeries.points_after), and smooths only those (RunningEma), so an update costs what is new, not the
run's length; the whole series is handed again only when its older part was folded (once every
DEFAULT_RECENT points), another x axis or a zoom's re-read asks for it.

DeepSpeed's engine throughputs are labelled as such wherever they are named (metric_label), apart from the run's
wall-clock throughput in the header.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
from PySide6.QtCore import QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QFileDialog,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QMenu,
    QPushButton,
    QStackedWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.logparse import ENGINE_FIGURES, ENGINE_LABEL, metric_label, metric_note
from traindeck.backend.runs import (
    SYSTEM_CHARTS,
    BoundedSeries,
    LastFigure,
    RunRecord,
    StepClock,
    SystemSection,
    SystemSeries,
    ViewChange,
    WatchedRun,
    XMode,
    last_figures,
    moment_words,
    read_metric_table,
    read_step_clock,
    read_system_series,
    read_system_table,
    system_choice,
    time_x,
    write_export,
    write_metrics_csv,
    x_values,
)
from traindeck.backend.runs.control import view as watch
from traindeck.gui.pages.runs.chart_cells import read_pins
from traindeck.gui.pages.runs.metrics_grid import MetricsGrid
from traindeck.gui.pages.runs.source import RunsSource
from traindeck.gui.pages.runs.system_view import SYSTEM_PINS, SystemView
from traindeck.gui.theme import set_muted
from traindeck.gui.widgets.chart_axis import format_value
from traindeck.gui.widgets.charts import TimeSeriesChart
from traindeck.gui.widgets.labels import SteadyLabel
from traindeck.gui.widgets.labels import label as _label
from traindeck.gui.widgets.smoothing_slider import SmoothingSlider

# Charts are redrawn as each read arrives (a read every POLL_MS, gui/pages/runs/__init__.py), but at most every
# CHART_MS, and never so often that drawing takes more than CHART_SHARE of the UI thread: the pace follows the
# measured cost of the last draws (a draw of a page of 9 smoothed charts costs a few ms however long the run; see
# tests/perf/bench_gui_charts.py), so a slow machine draws less often rather than stalling.
CHART_MS = 1000
CHART_SHARE = 0.1
MAX_METRICS_SHOWN = 14
LEGEND_DIGITS = 4  # the legends' figures as "Last metrics" writes them
X_CHOICES: tuple[tuple[str, XMode], ...] = (("Step", "step"), ("Wall time", "time"),
                                            ("Time since start", "relative"))
SETTINGS = "runs/charts/"  # + smoothing, log_y, x_mode, view
VIEWS = ("overview", "grid", "system")
# A system chart holds its newest SYSTEM_RECENT samples whole (2 hours at 1 Hz) and folds older ones into
# SYSTEM_OLDER min/max buckets: bounded however long a live run is watched.
SYSTEM_RECENT = 7_200
SYSTEM_OLDER = 2_000
STEP_NOTE = ("System charts by step: each sample sits at the step the run was at then (interpolated between "
             "logged steps); samples before the first step are left out.")
ENDED_STEP_NOTE = ("System charts by step: each sample sits at the step the run was at then (interpolated between "
                   "logged steps); samples before its first and after its last logged step are left out "
                   "(x: wall time shows them).")
NO_STEPS_NOTE = ("x by step: the run has logged fewer than two steps, so its samples cannot be placed by step yet. "
                 "Choose x: wall time or time since start (Alt+X) to see them.")
REMOTE_WORDS = "System charts are read from this machine's run store; another machine's runs do not show them yet."


Table = dict[str, list[tuple[int | None, float, float]]]  # an export's rows by series: (step, wall time, value)


def figure_text(value: float) -> str:
    """A metric's figure, alike in the legends and in "Last metrics"."""
    return format_value(value, "", LEGEND_DIGITS)


class ChartsPanel(QWidget):
    """The run's charts (overview or grid, with their options and export) and the last metrics."""

    poll_wanted = Signal()  # a series newly shown (another metric chosen, another page of the grid): read it now

    def __init__(self, watched: WatchedRun, source: RunsSource, settings: QSettings | None = None) -> None:
        super().__init__()
        self._watched, self._source = watched, source
        self._settings = settings if settings is not None else source.ctx.settings
        # What the panel has drawn (the series themselves are the model's, watched.series): drawn only while the
        # page is on screen.
        self._undrawn: set[str] = set()  # series changed since last drawn
        self._drawn: set[str] = set()  # series in a chart (one not yet drawn is drawn at once)
        # What each series' charts were handed: (the series, its count and reshapes then, the points handed):
        # the next draw hands them only the points added since (see BoundedSeries.points_after).
        self._fed: dict[str, tuple[BoundedSeries, int, int, int]] = {}
        self._draw_cost = 0.0  # seconds a draw took lately (a running mean): sets the pace (CHART_SHARE)
        # A chart zoomed into the folded (reduced) part of a series: that range re-read from the store at full
        # resolution, {name: (low, high, points)}; dropped when the chart follows the newest data again.
        self._detail: dict[str, tuple[float, float, BoundedSeries]] = {}
        self._drawn_at = 0.0  # monotonic time the charts were last drawn
        self._draw_later = QTimer(self)  # news refused by the pace: drawn when it allows
        self._draw_later.setSingleShot(True)
        self._draw_later.timeout.connect(self._draw_if_shown)
        self._to_draw: dict[TimeSeriesChart, list[str]] = {}  # charts waiting for their turn: their series' names
        self._draw_turn = QTimer(self)  # the next of them, once the event loop turned
        self._draw_turn.setSingleShot(True)
        self._draw_turn.setInterval(0)
        self._draw_turn.timeout.connect(self._draw_next)
        self._draw_spent = 0.0  # seconds the draw under way took so far
        self._metric_labels: dict[str, QLabel] = {}
        self.figures: dict[str, LastFigure] = {}  # the read the legends and "Last metrics" show
        self._figures_due = False  # a read changed the last metrics: shown with the next draw of the charts
        self._clock = StepClock()  # when each step was logged: x by wall time or since the start
        self._clock_asked = False
        self._clock_known = False  # the history read (read_step_clock) arrived
        # The System view's reads: the newest sample drawn (the next read asks for those after it), whether a read
        # is on its way (one at a time), and a count that drops answers for charts since replaced.
        self._system_last_t: float | None = None
        self._system_reading = False
        self._system_again = False
        self._system_generation = 0
        self.smoothing = SmoothingSlider.remembered(self._settings, SETTINGS + "smoothing")
        self.log_y = str(self._settings.value(SETTINGS + "log_y", "false")).lower() == "true"
        mode = str(self._settings.value(SETTINGS + "x_mode", "step"))
        self.x_mode: XMode = next((m for _, m in X_CHOICES if m == mode), "step")

        self.loss_chart = self._make_chart("Loss")
        self.other_box = QComboBox()
        self.other_box.setToolTip("The metric shown in the second chart")
        self.other_box.setPlaceholderText("other metrics appear here as the run reports them")
        self.other_box.currentIndexChanged.connect(self._other_chosen)
        self.other_chart = self._make_chart("Metric")
        other = QWidget()
        self._other_layout = QVBoxLayout(other)
        self._other_layout.setContentsMargins(0, 0, 0, 0)
        self._other_layout.setSpacing(2)
        self._other_layout.addWidget(self.other_box)
        self._other_layout.addWidget(self.other_chart, 1)
        self.overview = QWidget()
        self._charts_layout = QHBoxLayout(self.overview)
        self._charts_layout.setContentsMargins(0, 0, 0, 0)
        self._charts_layout.addWidget(self.loss_chart, 1)
        self._charts_layout.addWidget(other, 1)
        self.grid = MetricsGrid(self._settings, self._make_grid_chart)
        self.grid.shown_changed.connect(self._grid_shown_changed)
        # Which system charts show (its filter and pins) and which of their lines ended, over the reads.
        section = SystemSection(choice=system_choice(read_pins(self._settings, SYSTEM_PINS)))
        self.system = SystemView(self._make_system_chart, section, self._settings)
        self.views = QStackedWidget()
        self.views.addWidget(self.overview)
        self.views.addWidget(self.grid)
        self.views.addWidget(self.system)

        self.metrics_grid = QGridLayout()
        self.metrics_grid.setVerticalSpacing(2)
        metrics_box = QWidget()
        metrics_outer = QVBoxLayout(metrics_box)
        metrics_outer.setContentsMargins(4, 0, 0, 0)
        metrics_outer.addWidget(_label("Last metrics", bold=True))
        metrics_outer.addLayout(self.metrics_grid)
        metrics_outer.addStretch(1)
        metrics_box.setMinimumWidth(170)
        body = QHBoxLayout()
        body.setContentsMargins(0, 0, 0, 0)
        body.addWidget(self.views, 1)
        body.addWidget(metrics_box)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(self._build_toolbar())
        layout.addLayout(body, 1)
        self._show_view(str(self._settings.value(SETTINGS + "view", "overview")), remember=False)

    def _build_toolbar(self) -> QHBoxLayout:
        self.overview_button = QPushButton("Overview")
        self.overview_button.setToolTip("The losses and one chosen metric (Alt+O)")
        self.grid_button = QPushButton("All metrics")
        self.grid_button.setToolTip("A chart for every metric the run logs: filter, pin, page through them (Alt+A)")
        self.system_button = QPushButton("System")
        self.system_button.setToolTip("The losses beside the run's recorded GPU utilisation and memory, host CPU, "
                                      "ranks' memory, disk and network, one zoom for all (Alt+Y)")
        self._view_buttons = QButtonGroup(self)
        for button in (self.overview_button, self.grid_button, self.system_button):
            button.setCheckable(True)
            button.setFlat(True)
            self._view_buttons.addButton(button)
        self.overview_button.clicked.connect(lambda: self._show_view("overview"))
        self.grid_button.clicked.connect(lambda: self._show_view("grid"))
        self.system_button.clicked.connect(lambda: self._show_view("system"))
        self.smoothing_choice = SmoothingSlider(self._settings, SETTINGS + "smoothing")
        self.smoothing_choice.changed.connect(self._smoothing_changed)
        self.smoothing_slider = self.smoothing_choice.slider
        self.smoothing_slider.setToolTip(self.smoothing_slider.toolTip() + " (Alt+M, then the arrow keys)")
        self.log_box = QCheckBox("Log y")
        self.log_box.setToolTip("A log scale for y of the metric charts (in the System view, its loss chart: the "
                                "system figures stay linear from 0); values <= 0 are left out (each chart says how "
                                "many) (Alt+L)")
        self.log_box.setChecked(self.log_y)
        self.log_box.toggled.connect(self.set_log_y)
        self.x_box = QComboBox()
        self.x_box.setToolTip("The x axis of every chart: the step, the wall-clock time, or the time since the "
                              "run started (Alt+X: the next one). Alt+End: every chart follows the newest data")
        for text, mode in X_CHOICES:
            self.x_box.addItem(f"x: {text}", mode)
        self.x_box.setCurrentIndex(max(0, self.x_box.findData(self.x_mode)))
        self.x_box.currentIndexChanged.connect(lambda index: self.set_x_mode(self.x_box.itemData(index)))
        self.export_button = QToolButton()
        self.export_button.setText("Export")
        self.export_button.setToolTip("Save the charts shown as a PNG, or their data as CSV")
        self.export_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(self.export_button)
        menu.addAction("Charts as PNG…").triggered.connect(lambda: self._ask_path("png", None))
        menu.addAction("Data as CSV…").triggered.connect(lambda: self._ask_path("csv", None))
        self.export_button.setMenu(menu)
        bar = QHBoxLayout()
        bar.setContentsMargins(0, 0, 0, 0)
        bar.addWidget(self.overview_button)
        bar.addWidget(self.grid_button)
        bar.addWidget(self.system_button)
        bar.addSpacing(12)
        bar.addWidget(self.smoothing_choice)
        bar.addWidget(self.log_box)
        bar.addWidget(self.x_box)
        bar.addStretch(1)
        bar.addWidget(self.export_button)
        return bar

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802
        super().showEvent(event)
        # Back on the Charts tab (or the page): the System view catches up now, also for a run no longer polled.
        QTimer.singleShot(0, self._read_system)

    @property
    def _other_name(self) -> str | None:
        return self._watched.other

    @property
    def grid_shown(self) -> bool:
        return self.views.currentWidget() is self.grid

    @property
    def system_shown(self) -> bool:
        return self.views.currentWidget() is self.system

    def open_run(self) -> None:
        """Another run is open: fresh charts, no metric chosen, nothing drawn."""
        self._undrawn = set()
        self._drawn = set()
        self._fed = {}
        self._to_draw = {}
        self._detail = {}
        self._clock = StepClock()
        self._clock_asked = False
        self._clock_known = False
        self.figures = {}
        self._new_loss_chart()
        self._reset_system()
        self._set_other(None)
        self.other_box.blockSignals(True)
        self.other_box.clear()
        self.other_box.blockSignals(False)
        self.grid.set_metric_names(())
        self.grid.rebuild()
        self.show_metrics({})

    def show_run(self, record: RunRecord) -> None:
        """Draw what the polls read so far (at the charts' pace) with the last metrics, legends alike."""
        self.draw()
        if not self._watched.metrics and record.finished:
            self.show_metrics({}, empty="none recorded")

    def flush(self) -> None:
        """The charts shown repainted now, not on their redraw timer (nor in turns)."""
        while self._to_draw:
            self._draw_next()
        for chart in self._shown_charts():
            chart.flush()

    def news(self, change: ViewChange) -> None:
        """A poll's news: a new chooser or second chart when the model says so; the changed series to draw."""
        if change.other_changed:
            self._new_other_chart()
        if change.names_changed:
            _losses, others = watch.chart_names(self._watched.metric_names)
            box = self.other_box
            box.blockSignals(True)
            box.clear()
            box.addItems(others)
            box.setEnabled(bool(others))
            box.setCurrentIndex(max(0, box.findText(self._other_name or "")))
            box.blockSignals(False)
            self.grid.set_metric_names(self._watched.metric_names)
        self._undrawn |= change.series
        self._figures_due = self._figures_due or change.new_metrics or change.first
        if change.series or self._figures_due:
            # The new points and figures on screen as they arrive (at the pace the draws' cost allows).
            self._draw_if_shown()
        if change.ended_now and self.x_mode == "step" and self._system_last_t is not None:
            self._reset_system()  # read again whole: samples placed past the last step while it ran are taken back
        self._read_system()  # each poll: the samples recorded since (the System view only, on screen only)

    # ------------------------------------------------------------------------------------------------ options
    def set_smoothing(self, weight: float) -> None:
        """TensorBoard's smoothing weight (0..0.99) for every chart; remembered."""
        self.smoothing_choice.set_weight(weight)

    def _smoothing_changed(self, weight: float) -> None:
        self.smoothing = weight
        for chart in self._all_charts():
            chart.smoothing = self.smoothing

    def set_log_y(self, on: bool) -> None:
        self.log_y = bool(on)
        self._settings.setValue(SETTINGS + "log_y", self.log_y)
        for chart in self._all_charts():
            chart.log_y = self.log_y

    def set_x_mode(self, mode: XMode) -> None:
        """x by "step", "time" (wall clock) or "relative" (since the run's start) for every chart; remembered."""
        if mode == self.x_mode:
            return
        self.x_mode = mode
        self._settings.setValue(SETTINGS + "x_mode", mode)
        self.x_box.blockSignals(True)  # the box names the axis shown also when it was set from elsewhere
        self.x_box.setCurrentIndex(max(0, self.x_box.findData(mode)))
        self.x_box.blockSignals(False)
        self._detail = {}  # re-read ranges are in steps
        self._want_clock()
        for chart in self._all_charts():
            chart.x_mode = self.x_mode
            chart.follow()
        self._reset_system()  # its samples placed on the new axis: read again whole
        self._redraw_all()
        self._read_system()

    def next_x_mode(self) -> None:
        """The next x axis of X_CHOICES (step, wall time, since the start), as the x box shows it."""
        self.x_box.setCurrentIndex((self.x_box.currentIndex() + 1) % self.x_box.count())

    def follow_newest(self) -> None:
        """Every chart shown follows the newest data again (as each chart's "A" button does)."""
        for chart in self._shown_charts():
            if not chart.following:
                chart.follow()

    def _show_view(self, view: str, remember: bool = True) -> None:
        """Show "overview", "grid" or "system" (remembered); an unknown name shows the overview."""
        view = view if view in VIEWS else "overview"
        button, widget = {"overview": (self.overview_button, self.overview), "grid": (self.grid_button, self.grid),
                          "system": (self.system_button, self.system)}[view]
        button.setChecked(True)
        leaving_system = self.system_shown and widget is not self.system
        self.views.setCurrentWidget(widget)
        if remember:
            self._settings.setValue(SETTINGS + "view", view)
        if leaving_system:
            self._reset_system()  # not kept up to date off screen: read again whole on return
        self._grid_shown_changed()
        self._redraw_all()
        self._read_system()

    def _grid_shown_changed(self) -> None:
        """Read what the grid shows (only while it is shown: the overview costs what it always did)."""
        if self._watched.set_shown(self.grid.visible_names if self.grid_shown else ()) and self.grid_shown:
            # After the event loop turns: this may run inside the page's handling of a read (new names).
            QTimer.singleShot(0, self.poll_wanted.emit)
        for name in self.grid.charts:
            self._drawn.discard(name)
        self._undrawn |= set(self.grid.charts)
        self.draw(force=True)

    def _redraw_all(self) -> None:
        self._undrawn |= set(self._watched.series)
        self._fed = {}  # every chart handed its series whole
        self.draw(force=True)

    def _want_clock(self) -> None:
        """x by time needs when each step was logged, and so do the System view's samples by step: the run's
        history read once (then each poll's newest)."""
        if (self.x_mode == "step" and not self.system_shown) or self._clock_asked or self._watched.run_id is None:
            return
        self._clock_asked = True
        generation = self._watched.generation
        self._source.call(read_step_clock, self._watched.run_id,
                          done=lambda pairs: self._clock_arrived(generation, pairs))

    def _clock_arrived(self, generation: int, pairs: list[tuple[float, float]]) -> None:
        if generation != self._watched.generation:
            return
        self._clock.add([step for step, _ in pairs], [t for _, t in pairs])
        self._clock_known = True
        if self.x_mode != "step":
            self._redraw_all()
        elif self.system_shown:
            self._reset_system()  # samples placed by steps now known
            self._redraw_all()
            self._read_system()

    # ------------------------------------------------------------------------------------------------ drawing
    def draw(self, force: bool = False) -> None:
        """Hand the charts what changed in their series: the points added since they were last fed, or the whole
        series (a bounded set of points, whatever the run's length) where its older part changed. At most every
        CHART_MS and within CHART_SHARE of the UI thread, unless forced (a series newly shown, the page back on
        screen); news refused by the pace is drawn when it allows. A live draw takes one chart now and each other
        chart after the event loop turns (its paint in between), so the UI thread is held for one chart at a
        time, not a page of them; a forced draw takes every chart now."""
        wanted = set(self._watched.chart_series())
        if not force and not self._undrawn & wanted:
            if not self._draw_later.isActive() and not self._to_draw:
                self._show_figures()  # no chart changed: the figures at once (a waiting draw takes them along)
            return  # nothing new to draw
        now = time.monotonic()
        if not force and all(name in self._drawn for name in wanted if name in self._watched.series):
            wait = self.draw_interval() - (now - self._drawn_at)
            if wait > 0:
                if self._undrawn & wanted and not self._draw_later.isActive():
                    self._draw_later.start(int(wait * 1000) + 1)
                return
        self._draw_later.stop()
        self._drawn_at = now
        self._want_clock()
        self._feed_clock()
        for name in sorted(self._undrawn):
            series = self._watched.series.get(name)
            targets = self._charts_of(name)
            if series is None or name not in wanted or not targets or not series.count:
                continue
            for chart in targets:
                if series.x_is_time and self.x_mode == "step":
                    chart.x_mode = "time"  # a series logged without steps: its x is the time
                names = self._to_draw.setdefault(chart, [])
                if name not in names:
                    names.append(name)
            self._drawn.add(name)
        self._undrawn.clear()
        self._show_figures()  # in the pass that redraws the first chart, its legend with them
        self._draw_next()
        while force and self._to_draw:
            self._draw_next()

    def _show_figures(self) -> None:
        """The last metrics as the model holds them now (what the charts are handed in the same pass)."""
        if self._figures_due and self._watched.metrics:
            self.show_metrics(self._watched.metrics)
        self._figures_due = False

    def _draw_next(self) -> None:
        """Feed and redraw the next chart waiting (now, not REDRAW_MS later); the one after it once the event
        loop turns."""
        started = time.perf_counter()
        shown = self._shown_charts()
        while self._to_draw:
            chart = next(iter(self._to_draw))
            names = self._to_draw.pop(chart)
            if chart not in shown:
                continue  # replaced meanwhile (another page of the grid, another run)
            start = self._run_start()
            for name in names:
                series = self._watched.series.get(name)
                if series is not None and series.count:
                    self._feed(name, series, [chart], start)
            chart.flush()
            break
        self._draw_spent += time.perf_counter() - started
        if self._to_draw:
            self._draw_turn.start()
        elif self._draw_spent:
            cost, self._draw_spent = self._draw_spent, 0.0
            self._draw_cost = cost if not self._draw_cost else 0.7 * self._draw_cost + 0.3 * cost

    def _draw_if_shown(self) -> None:
        if self.isVisible() and not self.window().isMinimized():  # else the page draws on its return
            self.draw()

    def draw_interval(self) -> float:
        """Seconds between two draws: CHART_MS, or longer where the draws' measured cost would take more than
        CHART_SHARE of the UI thread."""
        return max(CHART_MS / 1000, self._draw_cost / CHART_SHARE)

    def _feed(self, name: str, series: BoundedSeries, charts: list[TimeSeriesChart], start: float | None) -> None:
        """Hand `charts` the points of `series` they lack: the new ones appended, or the whole series set."""
        fed = self._fed.get(name)
        tail = None
        if fed is not None and fed[0] is series and name not in self._detail \
                and (self.x_mode != "relative" or start is not None) \
                and all(chart.point_count(name) == fed[3] for chart in charts):
            tail = series.points_after(fed[1], fed[2])  # None: folded since, handed whole below
        if fed is not None and tail is not None:
            x, y = tail
            if len(x):
                x = x_values(x, self.x_mode, x_is_time=series.x_is_time, clock=self._clock, start=start)
                for chart in charts:
                    chart.append(name, x, y)
            self._fed[name] = (series, series.count, series.reshapes, fed[3] + len(x))
            return
        x, y = series.arrays()
        detail = self._detail.get(name)
        if detail is not None:  # the zoomed range in full, the rest as held
            low, high, points = detail
            dx, dy = points.arrays()
            before, after = x < low, x > high
            x = np.concatenate((x[before], dx, x[after]))
            y = np.concatenate((y[before], dy, y[after]))
        x = x_values(x, self.x_mode, x_is_time=series.x_is_time, clock=self._clock, start=start)
        for chart in charts:
            chart.set_series(name, x, y)
        self._fed[name] = (series, series.count, series.reshapes, len(x))

    def _feed_clock(self) -> None:
        """Each held series' newest (step, time): the clock keeps up with the run between its history reads."""
        for series in self._watched.series.values():
            if not series.x_is_time and series.last_x is not None and series.last_t is not None:
                self._clock.add([series.last_x], [series.last_t])

    def _run_start(self) -> float | None:
        record = self._watched.record
        if record is None:
            return None
        return record.started_at or record.created_at

    def _charts_of(self, name: str) -> list[TimeSeriesChart]:
        """The charts on screen that draw `name` (the overview's or the grid's)."""
        if self.grid_shown:
            chart = self.grid.charts.get(name)
            return [chart] if chart is not None else []
        if self.system_shown:
            return [self.system.loss_chart] if "loss" in name.lower() else []
        return [self._chart_of(name)] if "loss" in name.lower() or name == self._other_name else []

    def _chart_of(self, name: str) -> TimeSeriesChart:
        return self.loss_chart if "loss" in name.lower() else self.other_chart

    def _shown_charts(self) -> list[TimeSeriesChart]:
        if self.system_shown:
            return self.system.all_charts()
        return list(self.grid.charts.values()) if self.grid_shown else [self.loss_chart, self.other_chart]

    def _all_charts(self) -> list[TimeSeriesChart]:
        """The metric charts (smoothing and log y apply to them; the system charts keep their units from 0)."""
        return [self.loss_chart, self.other_chart, *self.grid.charts.values(), self.system.loss_chart]

    def _make_chart(self, title: str) -> TimeSeriesChart:
        chart = TimeSeriesChart(title, x_mode=self.x_mode, smoothing=self.smoothing, log_y=self.log_y)
        chart.legend_digits = LEGEND_DIGITS
        chart.x_range_chosen.connect(lambda low, high: self._zoomed(chart, low, high))
        chart.follow_resumed.connect(lambda: self._unzoomed(chart))
        chart.add_menu_action("Save chart as PNG…", lambda: self._ask_path("png", chart))
        chart.add_menu_action("Save its data as CSV…", lambda: self._ask_path("csv", chart))
        return chart

    def _make_system_chart(self, title: str, unit: str) -> TimeSeriesChart:
        """The System view's loss chart (a metric chart, unit "") or one of its system charts."""
        if not unit:
            return self._make_chart(title)
        chart = TimeSeriesChart(title, unit, x_mode=self.x_mode, max_points=SYSTEM_RECENT,
                                older_buckets=SYSTEM_OLDER)
        chart.add_menu_action("Save chart as PNG…", lambda: self._ask_path("png", chart))
        chart.add_menu_action("Save its data as CSV…", lambda: self._ask_path("csv", chart))
        return chart

    # ------------------------------------------------------------------------------------------------ system
    def _reset_system(self) -> None:
        """The System view's charts made again, empty, and its samples to be read whole (another run, another x
        axis, the view left)."""
        self._system_generation += 1
        self._system_last_t = None
        self._system_reading = self._system_again = False
        self.system.section.lines.clear()
        self.system.renew()
        self.system.set_note("")
        # The new loss chart is handed its series whole on the next draw (its point count is not what was fed).
        self._undrawn |= {n for n in self._watched.series if "loss" in n.lower()}

    def _read_system(self) -> None:
        """Read the run's samples recorded since the last read (all of them at first), off the UI thread, while the
        System view is on screen; one read at a time (a poll meanwhile asks for one more after it)."""
        run_id, record = self._watched.run_id, self._watched.record
        if not self.system_shown or run_id is None or record is None or not self.isVisible():
            return
        if self._system_reading:
            self._system_again = True
            return
        if self._source.remote is not None:
            self.system.set_note(REMOTE_WORDS)
            for slot in self.system.slots.values():
                slot.set_reason(REMOTE_WORDS)
            return
        if self.x_mode == "step":
            self._want_clock()
            self._feed_clock()
            if not self._clock_known:
                return  # read once the clock is: samples are placed by it
            if len(self._clock) < 2:
                self.system.set_note(NO_STEPS_NOTE)
                return
            self.system.set_note(ENDED_STEP_NOTE if record.finished else STEP_NOTE)
        self._system_reading = True
        generation = self._system_generation
        self._source.call(read_system_series, run_id, self._system_last_t, live=not record.finished,
                          done=functools.partial(self._system_arrived, generation),
                          failed=functools.partial(self._system_failed, generation))

    def _system_failed(self, generation: int, text: str) -> None:
        if generation == self._system_generation:
            self._system_reading = False
            self._source.report_failure(text)

    def _system_arrived(self, generation: int, read: SystemSeries) -> None:
        """Hand the system charts the samples read, placed on the tab's x axis; say why where a chart has none."""
        if generation != self._system_generation:
            return  # for charts since replaced
        self._system_reading = False
        start = self._run_start()
        record = self._watched.record
        ended = record is not None and record.finished  # by step: its shutdown is placed at no step
        for key, lines in read.lines.items():
            chart = self.system.charts.get(key)
            if chart is None:
                continue
            for line, (t, y) in lines.items():
                x = time_x(t, self.x_mode, clock=self._clock, start=start, ended=ended)
                placed = np.isfinite(x)  # by step: none before the first logged step (nor after an ended run's last)
                if placed.any():
                    chart.append(line, x[placed], y[placed])
        kept = self.system.section.lines
        kept.take(read)
        moment = functools.partial(moment_words, mode=self.x_mode, clock=self._clock, start=start, ended=ended)
        for key, chart in self.system.charts.items():
            for line, note in kept.legend_notes(key, moment).items():
                words, beside = note if note is not None else (None, True)
                chart.set_legend_note(line, words, value=beside)
        for key, values in read.references.items():
            chart = self.system.charts.get(key)
            if chart is not None:
                for label, value in values.items():
                    chart.add_reference(value, label)
        for key, slot in self.system.slots.items():
            if key in read.missing:
                slot.set_reason(read.missing[key])
            else:
                slot.update_shown()
        if read.last_t is not None:
            self._system_last_t = max(read.last_t, self._system_last_t or read.last_t)
        if self._system_again:
            self._system_again = False
            self._read_system()

    def system_reason(self, key: str) -> str | None:
        """What the System view says in place of chart `key` (None: the chart is shown), for tests and the tour."""
        return self.system.slots[key].reason_shown

    def _make_grid_chart(self, name: str) -> TimeSeriesChart:
        chart = self._make_chart("")  # the cell above it names the metric
        chart.plot_widget.setMinimumHeight(90)
        return chart

    def _zoomed(self, chart: TimeSeriesChart, low: float, high: float) -> None:
        """The user zoomed or panned a chart: a range reaching into a series' folded part is read again from the
        store at full resolution (the page holds only min/max buckets of it)."""
        if chart not in self._shown_charts():
            return  # replaced meanwhile
        if self.x_mode != "step":
            return  # the store is read by step: a time range draws from the points held
        generation = self._watched.generation
        for name, series in self._watched.series.items():
            if chart not in self._charts_of(name) or name not in self._drawn:
                continue
            first = series.first_recent_x
            if not series.folded or first is None or low >= first:
                if self._detail.pop(name, None) is not None:  # the held points cover this range whole
                    self._fed.pop(name, None)
                    self._undrawn.add(name)
                continue
            self._source.call(watch.read_range, self._watched.run_id, name, low, high, series.x_is_time,
                       done=functools.partial(self._detail_arrived, generation, name, low, high))
        self.draw(force=True)

    def _detail_arrived(self, generation: int, name: str, low: float, high: float, points: BoundedSeries) -> None:
        charts = self._charts_of(name)
        if generation != self._watched.generation or name not in self._watched.series or not charts or \
                charts[0].following:
            return  # another run, series or zoom since
        self._detail[name] = (low, high, points)
        self._fed.pop(name, None)
        self._undrawn.add(name)
        self.draw(force=True)

    def _unzoomed(self, chart: TimeSeriesChart) -> None:
        for name in [n for n in self._detail if chart in self._charts_of(n)]:
            del self._detail[name]
            self._fed.pop(name, None)
            self._undrawn.add(name)
        self.draw(force=True)

    def _other_chosen(self, index: int) -> None:
        name = self.other_box.itemText(index) if index >= 0 else None
        if name and name != self._other_name:
            self._set_other(name)
            self.poll_wanted.emit()

    def _set_other(self, name: str | None) -> None:
        """Show `name` in the second chart (a fresh chart: its title is the metric's name)."""
        if self._other_name is not None:  # the model forgets its points; the page what it drew of them
            self._drawn.discard(self._other_name)
            self._fed.pop(self._other_name, None)
            self._detail.pop(self._other_name, None)
            self._undrawn.discard(self._other_name)
        self._watched.set_other(name)
        self._new_other_chart()

    def _new_other_chart(self) -> None:
        chart = self._make_chart(metric_label(self._other_name) if self._other_name else "Metric")
        self._other_layout.replaceWidget(self.other_chart, chart)
        self.other_chart.hide()
        self.other_chart.deleteLater()
        self.other_chart = chart

    def _new_loss_chart(self) -> None:
        chart = self._make_chart("Loss")  # fresh: no axis range left from the previous run
        self._charts_layout.replaceWidget(self.loss_chart, chart)
        self.loss_chart.hide()  # at once: deleteLater() waits for the event loop
        self.loss_chart.deleteLater()
        self.loss_chart = chart

    # ------------------------------------------------------------------------------------------------ figures
    def show_metrics(self, metrics: Mapping[str, float], empty: str = "none yet") -> None:
        """The last metrics (each read at once; the legends name their lines' newest points). DeepSpeed's engine
        figures come last, under a heading that says they are not the run's wall-clock throughput."""
        self.figures = last_figures(metrics, self._watched.series)
        shown = sorted(self.figures.items(), key=lambda item: (item[0] in ENGINE_FIGURES, item[0]))
        shown = shown[:MAX_METRICS_SHOWN]
        if shown and [name for name, _ in shown] == list(self._metric_labels):
            for name, figure in shown:  # the same series: new values only (this runs every poll)
                self._set_figure(self._metric_labels[name], figure)
            return
        grid = self.metrics_grid
        while grid.count():
            item = grid.takeAt(0)
            widget = item.widget() if item is not None else None
            if widget is not None:
                widget.hide()  # at once: deleteLater() waits for the event loop
                widget.deleteLater()
        self._metric_labels = {}
        if not shown:
            grid.addWidget(_label(empty), 0, 0)
            return
        row, heading_shown = 0, False
        for name, figure in shown:
            if name in ENGINE_FIGURES and not heading_shown:  # DeepSpeed's engine figures follow, set apart
                heading = _label(f"{ENGINE_LABEL}s: engine time only, not wall-clock", wrap=True)
                heading.setObjectName("engineHeading")
                heading.setToolTip(metric_note(name))
                if row:
                    heading.setContentsMargins(0, 6, 0, 0)
                grid.addWidget(heading, row, 0, 1, 2)
                row, heading_shown = row + 1, True
            key = _label(name)
            set_muted(key)
            key.setToolTip(metric_note(name))  # e.g. DeepSpeed's samples_per_sec: the engine's time only
            grid.addWidget(key, row, 0)
            # (fixed to the widest value: a new value each poll must not lay the page out again)
            label = self._metric_labels[name] = SteadyLabel("-8.888e-08", selectable=True,
                                                            align=Qt.AlignmentFlag.AlignRight)
            self._set_figure(label, figure)
            grid.addWidget(label, row, 1, Qt.AlignmentFlag.AlignRight)
            row += 1

    @staticmethod
    def _set_figure(label: QLabel, figure: LastFigure) -> None:
        label.setText(figure_text(figure.value))
        label.setToolTip(f"at step {figure.step:,.0f}" if figure.step is not None else "")

    def legend_figure(self, name: str) -> str | None:
        """The figure the legend of `name`'s chart on screen shows: its line's newest point (for tests, the tour)."""
        charts = self._charts_of(name)
        text = charts[0].legend_text(name) if charts else None
        return text.split("  ", 1)[1] if text and "  " in text else None

    def figure_shown(self, name: str) -> str | None:
        label = self._metric_labels.get(name)
        return label.text() if label is not None else None

    # ------------------------------------------------------------------------------------------------ export
    def _ask_path(self, kind: str, chart: TimeSeriesChart | None) -> None:
        run = self._watched.run_id or "run"
        suggested = str(Path.home() / f"{run}-{'chart' if chart is not None else 'charts'}.{kind}")
        path, _filter = QFileDialog.getSaveFileName(self, "Save chart" if kind == "png" else "Save data",
                                                    suggested, "PNG image (*.png)" if kind == "png" else
                                                    "CSV (*.csv)")
        if not path:
            return
        if kind == "png":
            self.export_png(Path(path), chart)
            return
        key = next((k for k, c in self.system.charts.items() if c is chart), None)
        if key is not None:  # a system chart: its recorded samples
            self.export_csv(Path(path), [], system_charts=[key])
        else:
            self.export_csv(Path(path), chart.series_names() if chart is not None else None)

    def export_png(self, path: Path, chart: TimeSeriesChart | None = None) -> Path:
        """The chart (or the charts shown, as they are on screen) as a PNG at `path`, written in one step."""
        from PySide6.QtCore import QBuffer, QByteArray, QIODevice

        if chart is not None:
            written = chart.export_png(path)
        else:
            self.flush()
            data = QByteArray()
            buffer = QBuffer(data)
            buffer.open(QIODevice.OpenModeFlag.WriteOnly)
            # The System view whole (a low pane scrolls some of its charts out of sight); another view as shown.
            shown = self.system.image() if self.system_shown else (self.views.currentWidget() or self.views).grab()
            shown.save(buffer, "PNG")
            buffer.close()
            written = write_export(path, bytes(data.data()))
        self._source.ctx.status.emit(f"Saved {written}")
        return written

    def export_csv(self, path: Path, names: list[str] | None = None,
                   done: Callable[[Path], None] | None = None, *, system_charts: list[str] | None = None) -> None:
        """Every recorded point of `names` (default: the metrics shown, the grid's filtered ones; in the System view
        its losses and then every recorded sample of its system series, named "system/<chart>/<line>", unsmoothed;
        `system_charts`: those charts' series, by SYSTEM_CHARTS key) as CSV rows (metric, step, wall time, value,
        smoothed with the chosen weight), read and written off the UI thread."""
        run_id = self._watched.run_id
        if run_id is None:
            return
        if system_charts is None and names is None and self.system_shown:
            system_charts = [spec.key for spec in SYSTEM_CHARTS]
        system = bool(system_charts) and self._source.remote is None
        if names is None:
            if self.grid_shown:
                names = self.grid.filtered()
            elif self.system_shown:
                names = watch.chart_names(self._watched.metric_names)[0]  # the losses its loss chart draws
            else:
                names = self._watched.chart_series()
        weight = self.smoothing
        status = self._source.ctx.status

        def saved(written: Path) -> None:
            status.emit(f"Saved {written}")
            if done is not None:
                done(written)

        def write(table: Table, system_table: Table | None = None) -> None:
            merged = {**table, **(system_table or {})}
            self._source.ctx.tasks.run(write_metrics_csv, path, merged, weight, list(system_table or ()), done=saved,
                                       failed=lambda error: status.emit(f"Could not save {path}: {error}"))

        def read_system(table: Table) -> None:
            self._source.call(read_system_table, run_id, system_charts,
                              done=lambda system_table: write(table, system_table))

        self._source.call(read_metric_table, run_id, list(names), done=read_system if system else write)

