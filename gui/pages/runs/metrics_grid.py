"""The metrics grid: a small chart for every metric the run logs, as W&B's and TensorBoard's panels, without their
cost. A filter box (case-insensitive substring) narrows the names, pinned metrics come first (pins remembered in
the app's settings), and only one page of GRID_PAGE charts exists at a time: a run logging 200 metrics has 9
charts to read and redraw each poll, not 200. The charts of a page share their x range (zoom one, all follow;
"A" resumes following the newest data on all).

The names, order and pages come from backend/runs/control/metric_charts.py (filter_metrics, page_of); the charts
are made by the panel that holds the grid (its options: smoothing, log scale, x axis) and fed by it.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QSettings, Qt, Signal
from PySide6.QtWidgets import (
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QScrollArea,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.logparse import metric_label, metric_note
from traindeck.backend.runs import filter_metrics, page_of
from traindeck.gui.theme import set_muted
from traindeck.gui.widgets.charts import TimeSeriesChart
from traindeck.gui.widgets.labels import ElidedLabel

GRID_PAGE = 9  # charts on a page (3 x 3): what is read and redrawn each poll, whatever the run logs
GRID_COLUMNS = 3
CELL_MIN_HEIGHT = 150  # px: room for a chart's tick labels and legend; a low pane scrolls rather than squeezing
PINS_KEY = "runs/charts/pins"
PINNED, UNPINNED = "★", "☆"


def read_pins(settings: QSettings) -> list[str]:
    value = settings.value(PINS_KEY, [])
    if isinstance(value, str):  # QSettings gives one string for a one-item list in INI files
        return [value] if value else []
    return [str(v) for v in value] if isinstance(value, list) else []


class MetricCell(QWidget):
    """One metric: a pin button and its name above its chart."""

    def __init__(self, name: str, chart: TimeSeriesChart, pinned: bool) -> None:
        super().__init__()
        self.name, self.chart = name, chart
        self.pin = QToolButton()
        self.pin.setCheckable(True)
        self.pin.setAutoRaise(True)
        self.pin.setChecked(pinned)
        self.pin.setText(PINNED if pinned else UNPINNED)
        self.pin.setToolTip("Pin: pinned metrics come first in the grid")
        self.pin.toggled.connect(lambda on: self.pin.setText(PINNED if on else UNPINNED))
        # DeepSpeed's engine figures say so in the title. A long title is cut at the cell's edge with "…" (the
        # whole of it in the tooltip) rather than widening the grid.
        self.title = title = ElidedLabel(metric_label(name), mode=Qt.TextElideMode.ElideRight)
        title.set_full_text(metric_label(name), metric_note(name) or "")
        title.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        header = QHBoxLayout()
        header.setContentsMargins(0, 0, 0, 0)
        header.setSpacing(2)
        header.addWidget(self.pin)
        header.addWidget(title, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addLayout(header)
        layout.addWidget(chart, 1)
        self.setMinimumHeight(CELL_MIN_HEIGHT)


class MetricsGrid(QWidget):
    """A page of metric charts over the run's metric names; `charts` are the ones on the page, by name."""

    shown_changed = Signal()  # other metrics on the page now: the panel reads and draws them

    def __init__(self, settings: QSettings, make_chart: Callable[[str], TimeSeriesChart]) -> None:
        super().__init__()
        self._settings, self._make_chart = settings, make_chart
        self.pins: list[str] = read_pins(settings)
        self._names: list[str] = []
        self.page = 0
        self.pages = 1
        self.visible_names: list[str] = []
        self.charts: dict[str, TimeSeriesChart] = {}
        self._cells: list[MetricCell] = []

        self.filter_box = QLineEdit()
        self.filter_box.setPlaceholderText("Filter metrics (e.g. eval/ or loss)")
        self.filter_box.setClearButtonEnabled(True)
        self.filter_box.textChanged.connect(lambda _text: self._refill(first_page=True))
        self.previous = QToolButton()
        self.previous.setText("◀")
        self.previous.setToolTip("Previous page of charts")
        self.previous.clicked.connect(lambda: self.show_page(self.page - 1))
        self.next = QToolButton()
        self.next.setText("▶")
        self.next.setToolTip("Next page of charts")
        self.next.clicked.connect(lambda: self.show_page(self.page + 1))
        self.page_label = QLabel()
        set_muted(self.page_label)
        bar = QHBoxLayout()
        bar.setContentsMargins(0, 0, 0, 0)
        bar.addWidget(self.filter_box, 1)
        bar.addWidget(self.previous)
        bar.addWidget(self.page_label)
        bar.addWidget(self.next)
        cells = QWidget()
        self._grid = QGridLayout(cells)
        self._grid.setContentsMargins(0, 0, 0, 0)
        self._grid.setSpacing(4)
        self.scroll_area = QScrollArea()  # the page's cells keep their height; a low pane scrolls them
        self.scroll_area.setWidgetResizable(True)
        self.scroll_area.setFrameShape(QScrollArea.Shape.NoFrame)
        self.scroll_area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.scroll_area.setWidget(cells)
        self.empty = QLabel("no metrics yet")
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        set_muted(self.empty)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(bar)
        layout.addWidget(self.empty)
        layout.addWidget(self.scroll_area, 1)
        self._refill()

    # ------------------------------------------------------------------------------------------------ names
    def set_metric_names(self, names: tuple[str, ...] | list[str]) -> None:
        """The run's metric names (grown or another run's): the page is filled again where it changed."""
        if list(names) != self._names:
            self._names = list(names)
            self._refill()

    def filtered(self) -> list[str]:
        """Every name the filter lets through, pinned first: what the pages show in turn."""
        return filter_metrics(self._names, self.filter_box.text(), self.pins)

    def show_page(self, page: int) -> None:
        self.page = page
        self._refill()

    def set_pinned(self, name: str, pinned: bool) -> None:
        """Pin or unpin `name` (remembered in the settings); pinned metrics come first."""
        pins = [p for p in self.pins if p != name] + ([name] if pinned else [])
        if pins == self.pins:
            return
        self.pins = pins
        self._settings.setValue(PINS_KEY, pins)
        self._refill()

    def rebuild(self) -> None:
        """New charts for the same page (the panel's chart options changed in a way a chart cannot follow)."""
        self._refill(force=True)

    # ------------------------------------------------------------------------------------------------ layout
    def _refill(self, first_page: bool = False, force: bool = False) -> None:
        if first_page:
            self.page = 0
        names = self.filtered()
        shown, self.page, self.pages = page_of(names, self.page, GRID_PAGE)
        self.previous.setEnabled(self.page > 0)
        self.next.setEnabled(self.page < self.pages - 1)
        self.page_label.setText(f"{self.page + 1} / {self.pages}  ({len(names)} of {len(self._names)})")
        self.empty.setVisible(not shown)
        self.empty.setText("no metrics yet" if not self._names else "no metric matches the filter")
        pinned = set(self.pins)
        states = [(n, n in pinned) for n in shown]
        if not force and states == [(c.name, c.pin.isChecked()) for c in self._cells]:
            return
        for cell in self._cells:
            self._grid.removeWidget(cell)
            cell.hide()  # at once: deleteLater() waits for the event loop
            cell.deleteLater()
        self._cells, self.charts = [], {}
        leader: TimeSeriesChart | None = None
        for index, (name, is_pinned) in enumerate(states):
            chart = self._make_chart(name)
            if leader is None:
                leader = chart
            else:
                chart.link_x(leader)  # one zoom for the page
            cell = MetricCell(name, chart, is_pinned)
            cell.pin.toggled.connect(lambda on, n=name: self.set_pinned(n, on))
            self._grid.addWidget(cell, index // GRID_COLUMNS, index % GRID_COLUMNS)
            self._cells.append(cell)
            self.charts[name] = chart
        for column in range(GRID_COLUMNS):
            self._grid.setColumnStretch(column, 1)
        if shown != self.visible_names or force:
            self.visible_names = shown
            self.shown_changed.emit()
