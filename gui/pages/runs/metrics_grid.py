"""The metrics grid: a small chart for every metric the run logs, as W&B's and TensorBoard's panels, without their
cost. A filter box (case-insensitive substring) narrows the names, pinned metrics come first (pins remembered in
the app's settings), and only one page of GRID_PAGE charts exists at a time: a run logging 200 metrics has 9
charts to read and redraw each poll, not 200. The charts of a page share their x range (zoom one, all follow;
"A" resumes following the newest data on all).

The names, order and pages are a ChartChoice's (backend/runs/control/metric_charts.py), the cells and the filter
bar those the System view has too (chart_cells.py); the charts are made by the panel that holds the grid (its
options: smoothing, log scale, x axis) and fed by it.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QSettings, Qt, Signal
from PySide6.QtWidgets import (
    QGridLayout,
    QLabel,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.logparse import metric_label, metric_note
from traindeck.backend.runs import ChartChoice
from traindeck.gui.pages.runs.chart_cells import CELL_MIN_HEIGHT as CELL_MIN_HEIGHT
from traindeck.gui.pages.runs.chart_cells import ChartCell, FilterBar, read_pins
from traindeck.gui.theme import set_muted
from traindeck.gui.widgets.charts import TimeSeriesChart

GRID_PAGE = 9  # charts on a page (3 x 3): what is read and redrawn each poll, whatever the run logs
GRID_COLUMNS = 3
PINS_KEY = "runs/charts/pins"
PIN_TIP = "Pin: pinned metrics come first in the grid"


class MetricsGrid(QWidget):
    """A page of metric charts over the run's metric names; `charts` are the ones on the page, by name."""

    shown_changed = Signal()  # other metrics on the page now: the panel reads and draws them

    def __init__(self, settings: QSettings, make_chart: Callable[[str], TimeSeriesChart]) -> None:
        super().__init__()
        self._settings, self._make_chart = settings, make_chart
        self.choice = ChartChoice(pins=read_pins(settings, PINS_KEY), per_page=GRID_PAGE)
        self.visible_names: list[str] = []
        self.charts: dict[str, TimeSeriesChart] = {}
        self._cells: list[ChartCell] = []

        self.bar = FilterBar("Filter metrics (e.g. eval/ or loss)", paged=True)
        self.filter_box, self.previous, self.next = self.bar.filter_box, self.bar.previous, self.bar.next
        self.page_label = self.bar.count
        self.filter_box.textChanged.connect(self._filter_changed)
        self.previous.clicked.connect(lambda: self.show_page(self.page - 1))
        self.next.clicked.connect(lambda: self.show_page(self.page + 1))
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
        layout.addWidget(self.bar)
        layout.addWidget(self.empty)
        layout.addWidget(self.scroll_area, 1)
        self._refill()

    # ------------------------------------------------------------------------------------------------ names
    @property
    def pins(self) -> list[str]:
        return self.choice.pins

    @property
    def page(self) -> int:
        return self.choice.page

    @property
    def pages(self) -> int:
        return self.choice.pages

    def set_metric_names(self, names: tuple[str, ...] | list[str]) -> None:
        """The run's metric names (grown or another run's): the page is filled again where it changed."""
        if list(names) != self.choice.names:
            self.choice.names = list(names)
            self._refill()

    def filtered(self) -> list[str]:
        """Every name the filter lets through, pinned first: what the pages show in turn."""
        return self.choice.filtered()

    def show_page(self, page: int) -> None:
        self.choice.page = page
        self._refill()

    def set_pinned(self, name: str, pinned: bool) -> None:
        """Pin or unpin `name` (remembered in the settings); pinned metrics come first."""
        if self.choice.set_pinned(name, pinned):
            self._settings.setValue(PINS_KEY, self.choice.pins)
            self._refill()

    def rebuild(self) -> None:
        """New charts for the same page (the panel's chart options changed in a way a chart cannot follow)."""
        self._refill(force=True)

    def _filter_changed(self, text: str) -> None:
        self.choice.set_query(text)
        self._refill()

    # ------------------------------------------------------------------------------------------------ layout
    def _refill(self, force: bool = False) -> None:
        shown = self.choice.shown()
        self.bar.show_count(len(self.choice.filtered()), len(self.choice.names), self.page, self.pages)
        self.empty.setVisible(not shown)
        self.empty.setText("no metrics yet" if not self.choice.names else "no metric matches the filter")
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
            cell = ChartCell(name, metric_label(name), chart, is_pinned, pin_tip=PIN_TIP,
                             note=metric_note(name) or "")
            cell.pin.toggled.connect(lambda on, n=name: self.set_pinned(n, on))
            self._grid.addWidget(cell, index // GRID_COLUMNS, index % GRID_COLUMNS)
            self._cells.append(cell)
            self.charts[name] = chart
        for column in range(GRID_COLUMNS):
            self._grid.setColumnStretch(column, 1)
        if shown != self.visible_names or force:
            self.visible_names = shown
            self.shown_changed.emit()
