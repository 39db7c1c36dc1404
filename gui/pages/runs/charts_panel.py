"""The Runs page's charts and last metrics: the watched run's series drawn only when the screen would change,
zoom re-reads at full resolution. ChartsPanel reads the series from the WatchedRun it is given; the page hands it
each poll's news and says when to draw."""

from __future__ import annotations

import functools
import time

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QGridLayout, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from traindeck.backend.runs import BoundedSeries, RunRecord, ViewChange, WatchedRun
from traindeck.backend.runs.control import view as watch
from traindeck.gui.pages.runs.source import RunsSource
from traindeck.gui.theme import set_muted
from traindeck.gui.widgets.charts import TimeSeriesChart
from traindeck.gui.widgets.labels import SteadyLabel
from traindeck.gui.widgets.labels import label as _label

# Charts are redrawn for what the screen can show: at most every CHART_MS, and only once the new points reach a
# new pixel column or leave the drawn value range, or CHART_MAX_MS passed (the legend's latest value). Late in a
# long run a pixel column is minutes of steps: a redraw every poll moves nothing on screen and costs ~8 ms. (5 s,
# every third poll, as a TensorBoard tab refreshes much less often: the charts' repaint is the largest single
# painter of a window watching a 50 lines/s run, above the console's each second; py-spy --native on the soak.)
CHART_MS = 5000
CHART_MAX_MS = 30_000
MAX_METRICS_SHOWN = 14


class ChartsPanel(QWidget):
    """The losses' chart, the chart of one other metric (chosen in a box above it) and the last metrics."""

    other_chosen = Signal()  # the user chose another metric for the second chart: read it now

    def __init__(self, watched: WatchedRun, source: RunsSource) -> None:
        super().__init__()
        self._watched, self._source = watched, source
        # What the panel has drawn (the series themselves are the model's, watched.series): drawn only while the
        # page is on screen, and only when the screen would change.
        self._undrawn: set[str] = set()  # series changed since last drawn
        self._drawn: set[str] = set()  # series in a chart (one not yet drawn is drawn at once)
        self._drawn_extent: dict[str, tuple[float, float, float]] = {}  # name: (last x, low, high) when drawn
        # A chart zoomed into the folded (reduced) part of a series: that range re-read from the store at full
        # resolution, {name: (low, high, points)}; dropped when the chart follows the newest data again.
        self._detail: dict[str, tuple[float, float, BoundedSeries]] = {}
        self._drawn_at = 0.0  # monotonic time the charts were last drawn
        self._metric_labels: dict[str, QLabel] = {}

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
        self.metrics_grid = QGridLayout()
        self.metrics_grid.setVerticalSpacing(2)
        metrics_box = QWidget()
        metrics_outer = QVBoxLayout(metrics_box)
        metrics_outer.setContentsMargins(4, 0, 0, 0)
        metrics_outer.addWidget(_label("Last metrics", bold=True))
        metrics_outer.addLayout(self.metrics_grid)
        metrics_outer.addStretch(1)
        metrics_box.setMinimumWidth(170)
        self._charts_layout = QHBoxLayout(self)
        self._charts_layout.setContentsMargins(0, 0, 0, 0)
        self._charts_layout.addWidget(self.loss_chart, 1)
        self._charts_layout.addWidget(other, 1)
        self._charts_layout.addWidget(metrics_box)

    @property
    def _other_name(self) -> str | None:
        return self._watched.other

    def open_run(self) -> None:
        """Another run is open: fresh charts, no metric chosen, nothing drawn."""
        self._undrawn = set()
        self._drawn = set()
        self._drawn_extent = {}
        self._detail = {}
        self._new_loss_chart()
        self._set_other(None)
        self.other_box.blockSignals(True)
        self.other_box.clear()
        self.other_box.blockSignals(False)
        self.show_metrics({})

    def show_run(self, record: RunRecord) -> None:
        """Draw what the polls read so far (at the charts' pace) and the last metrics."""
        self.draw()
        if self._watched.metrics:
            self.show_metrics(self._watched.metrics)
        elif record.finished:
            self.show_metrics({}, empty="none recorded")

    def flush(self) -> None:
        """Both charts repainted now, not on their redraw timer."""
        self.loss_chart.flush()
        self.other_chart.flush()

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
        self._undrawn |= change.series

    def draw(self, force: bool = False) -> None:
        """Hand the charts the series that changed: each a bounded set of points, whatever the run's length; at
        most every CHART_MS unless forced (a series newly shown, the page back on screen)."""
        wanted = set(self._watched.chart_series())
        now = time.monotonic()
        if not force and all(name in self._drawn for name in wanted if name in self._watched.series):
            since = now - self._drawn_at
            if since < CHART_MS / 1000 or (since < CHART_MAX_MS / 1000 and not any(
                    self._shows_more(name) for name in self._undrawn if name in wanted)):
                return
        self._drawn_at = now
        charts: set[TimeSeriesChart] = set()
        for name in sorted(self._undrawn):
            series = self._watched.series.get(name)
            if series is None or name not in wanted:
                continue
            xs, ys = series.points()
            if not xs:
                continue
            chart = self._chart_of(name)
            if series.x_is_time:
                chart.x_is_time = True
            x, y = np.frombuffer(xs, dtype=np.float64), np.frombuffer(ys, dtype=np.float64)
            detail = self._detail.get(name)
            if detail is not None:  # the zoomed range in full, the rest as held
                low, high, points = detail
                dx, dy = (np.frombuffer(a, dtype=np.float64) for a in points.points())
                before, after = x < low, x > high
                x = np.concatenate((x[before], dx, x[after]))
                y = np.concatenate((y[before], dy, y[after]))
            chart.set_series(name, x, y)
            charts.add(chart)
            self._drawn.add(name)
            if series.last_x is not None:
                self._drawn_extent[name] = (series.last_x, series.low, series.high)
        self._undrawn.clear()
        for chart in charts:
            chart.flush()  # now, not REDRAW_MS later: in the same repaint as the rest of the page's news

    def _shows_more(self, name: str) -> bool:
        """Whether drawing the series now would change the chart: new points past the last pixel column drawn,
        or values outside the range drawn (the y axis is fitted to them)."""
        series, drawn = self._watched.series.get(name), self._drawn_extent.get(name)
        if series is None or drawn is None or series.last_x is None or series.first_x is None:
            return True
        last_x, low, high = drawn
        if series.low < low or series.high > high:
            return True
        span = series.last_x - series.first_x
        columns = max(1, self._chart_of(name).width())
        return span <= 0 or (series.last_x - last_x) * columns >= span

    def _chart_of(self, name: str) -> TimeSeriesChart:
        return self.loss_chart if "loss" in name.lower() else self.other_chart

    def _make_chart(self, title: str) -> TimeSeriesChart:
        chart = TimeSeriesChart(title, x_is_time=False)
        chart.x_range_chosen.connect(lambda low, high: self._zoomed(chart, low, high))
        chart.follow_resumed.connect(lambda: self._unzoomed(chart))
        return chart

    def _zoomed(self, chart: TimeSeriesChart, low: float, high: float) -> None:
        """The user zoomed or panned a chart: a range reaching into a series' folded part is read again from the
        store at full resolution (the page holds only min/max buckets of it)."""
        if chart is not self.loss_chart and chart is not self.other_chart:
            return  # replaced meanwhile
        generation = self._watched.generation
        for name, series in self._watched.series.items():
            if self._chart_of(name) is not chart or name not in self._drawn:
                continue
            first = series.first_recent_x
            if not series.folded or first is None or low >= first:
                if self._detail.pop(name, None) is not None:  # the held points cover this range whole
                    self._undrawn.add(name)
                continue
            self._source.call(watch.read_range, self._watched.run_id, name, low, high, series.x_is_time,
                       done=functools.partial(self._detail_arrived, generation, name, low, high))
        self.draw(force=True)

    def _detail_arrived(self, generation: int, name: str, low: float, high: float, points: BoundedSeries) -> None:
        if generation != self._watched.generation or name not in self._watched.series or self._chart_of(name).following:
            return  # another run, series or zoom since
        self._detail[name] = (low, high, points)
        self._undrawn.add(name)
        self.draw(force=True)

    def _unzoomed(self, chart: TimeSeriesChart) -> None:
        for name in [n for n in self._detail if self._chart_of(n) is chart]:
            del self._detail[name]
            self._undrawn.add(name)
        self.draw(force=True)

    def _other_chosen(self, index: int) -> None:
        name = self.other_box.itemText(index) if index >= 0 else None
        if name and name != self._other_name:
            self._set_other(name)
            self.other_chosen.emit()

    def _set_other(self, name: str | None) -> None:
        """Show `name` in the second chart (a fresh chart: its title is the metric's name)."""
        if self._other_name is not None:  # the model forgets its points; the page what it drew of them
            self._drawn.discard(self._other_name)
            self._drawn_extent.pop(self._other_name, None)
            self._detail.pop(self._other_name, None)
            self._undrawn.discard(self._other_name)
        self._watched.set_other(name)
        self._new_other_chart()

    def _new_other_chart(self) -> None:
        chart = self._make_chart(self._other_name or "Metric")
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

    def show_metrics(self, metrics: dict[str, float], empty: str = "none yet") -> None:
        shown = sorted(metrics.items())[:MAX_METRICS_SHOWN]
        if shown and [name for name, _ in shown] == list(self._metric_labels):
            for name, value in shown:  # the same series: new values only (this runs every poll)
                self._metric_labels[name].setText(f"{value:.4g}")
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
        for row, (name, value) in enumerate(shown):
            key = _label(name)
            set_muted(key)
            grid.addWidget(key, row, 0)
            # (fixed to the widest value: a new value each poll must not lay the page out again)
            label = self._metric_labels[name] = SteadyLabel("-8.888e-08", selectable=True,
                                                            align=Qt.AlignmentFlag.AlignRight)
            label.setText(f"{value:.4g}")
            grid.addWidget(label, row, 1, Qt.AlignmentFlag.AlignRight)
