"""The Charts tab's System view: the run's loss beside its recorded system figures (each GPU's utilisation and
memory, the host's CPU, the ranks' RSS, disk and network), as W&B's run page has them, so a dip in GPU use lines
up with what the loss did then. The charts share one x axis (zoom one, all follow) and the tab's x option; the
loss chart takes the tab's smoothing and log scale as the metrics grid's charts do, the system charts are drawn as
recorded, from 0 (as W&B's System panels).

As the metrics grid, the view has a filter box (the system charts it names by title, key or what they show: "gpu",
"memory", "rank", "utilization") and pins (a pinned chart comes first, beside the top of the loss chart;
remembered in the app's settings), with the grid's cells and bar (chart_cells.py). Which charts show and what their
lines say beyond their figures (a rank that exited) are a SystemSection's (backend/runs/control/system_series.py),
which the view is given; the view only lays them out.

The figures are the run's resource samples, recorded every second by its supervisor and read from the run store
(system_series.py: read_system_series) by the panel that holds this view, on its background reads; the view only
draws them. A chart with nothing to draw says why in its place ("No NVIDIA GPU found: ..."), never an empty axis.
"""

from __future__ import annotations

import html
from collections.abc import Callable

from PySide6.QtCore import QSettings, Qt
from PySide6.QtGui import QPainter, QPixmap, QResizeEvent
from PySide6.QtWidgets import (
    QGridLayout,
    QLabel,
    QScrollArea,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.runs import SYSTEM_CHARTS, SystemChart, SystemSection
from traindeck.gui.pages.runs.chart_cells import CELL_MIN_HEIGHT, ChartCell, FilterBar
from traindeck.gui.theme import set_muted
from traindeck.gui.widgets.charts import TimeSeriesChart
from traindeck.gui.widgets.labels import ReasonLabel

SYSTEM_COLUMNS = 3  # the system charts beside the loss chart, which takes the first column's rows
SYSTEM_CELL_HEIGHT = CELL_MIN_HEIGHT  # px: as the metrics grid's cells; a low pane scrolls rather than squeezing
# px: the narrowest column that shows a chart's title, axis and legend whole ("Ranks' host memory (RSS)"): a
# narrower pane puts fewer system charts in a row, and more rows (which scroll in a low pane).
SYSTEM_CELL_WIDTH = 220
SYSTEM_PINS = "runs/charts/system_pins"  # the settings key of the pinned system charts
PIN_TIP = "Pin: pinned system charts come first, beside the top of the loss chart"


class SystemSlot(QStackedWidget):
    """A system chart, or in its place why it has nothing to draw."""

    def __init__(self, spec: SystemChart, chart: TimeSeriesChart) -> None:
        super().__init__()
        self.spec, self.chart = spec, chart
        self.reason: str | None = None
        self.label = ReasonLabel()  # not height-for-width: the view fits its pane without scrolling
        self.addWidget(chart)
        self.addWidget(self.label)

    def set_reason(self, reason: str | None) -> None:
        """Why there is nothing to draw (None: the chart); said while the chart holds no line."""
        self.reason = reason
        self.label.setText(html.escape(reason or ""))
        self.update_shown()

    def update_shown(self) -> None:
        self.setCurrentWidget(self.label if self.reason is not None and not self.chart.series_names()
                              else self.chart)

    @property
    def reason_shown(self) -> str | None:
        """The words shown in the chart's place, or None while the chart is shown."""
        return self.reason if self.currentWidget() is self.label else None


class SystemView(QWidget):
    """The loss chart and a cell per SYSTEM_CHARTS entry, its chart made by `make_chart(title, unit)`; the cells
    `section.choice` lets through are shown (`shown`), `charts` and `slots` hold every one by key."""

    def __init__(self, make_chart: Callable[[str, str], TimeSeriesChart], section: SystemSection,
                 settings: QSettings) -> None:
        super().__init__()
        self._make_chart, self.section, self._settings = make_chart, section, settings
        self.bar = FilterBar("Filter system charts (e.g. gpu, memory, rank)")
        self.filter_box = self.bar.filter_box
        self.filter_box.textChanged.connect(self._filter_changed)
        self.note = QLabel()
        self.note.setWordWrap(True)
        set_muted(self.note)
        self.note.hide()
        self.empty = QLabel()
        set_muted(self.empty)
        self.empty.hide()
        cells = QWidget()
        self._grid = QGridLayout(cells)
        self._grid.setContentsMargins(0, 0, 0, 0)
        self._grid.setSpacing(4)
        self._cells = cells
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setWidget(cells)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.bar)
        layout.addWidget(self.note)
        layout.addWidget(self.empty)
        layout.addWidget(scroll, 1)
        self.loss_chart: TimeSeriesChart = make_chart("", "")
        self.loss_cell = ChartCell("loss", "Loss", self.loss_chart)
        self.slots: dict[str, SystemSlot] = {}
        self.cells: dict[str, ChartCell] = {}
        self.charts: dict[str, TimeSeriesChart] = {}
        self.shown: list[str] = []  # the keys of the system charts shown, in their order
        self.columns = SYSTEM_COLUMNS  # system charts in a row: fewer in a narrow pane (columns_for)
        self.renew()

    def renew(self) -> None:
        """Fresh charts (another run, another x axis): nothing drawn, no reason said, one zoom for all."""
        old = [self.loss_cell, *self.cells.values()]
        self.loss_chart = self._make_chart("", "")  # (the cell above a chart names it)
        self.loss_cell = ChartCell("loss", "Loss", self.loss_chart)
        self.slots = {spec.key: SystemSlot(spec, self._make_chart("", spec.unit)) for spec in SYSTEM_CHARTS}
        self.charts = {key: slot.chart for key, slot in self.slots.items()}
        pins = set(self.section.choice.pins)
        self.cells = {}
        for spec in SYSTEM_CHARTS:
            cell = ChartCell(spec.key, spec.title, self.slots[spec.key], spec.key in pins, pin_tip=PIN_TIP)
            cell.pin.toggled.connect(lambda on, key=spec.key: self.set_pinned(key, on))
            self.cells[spec.key] = cell
        for widget in old:
            self._grid.removeWidget(widget)
            widget.hide()  # at once: deleteLater() waits for the event loop
            widget.deleteLater()
        for slot in self.slots.values():
            slot.chart.link_x(self.loss_chart)  # zoom one, all follow; the loss chart leads (see link_x)
        self._place(self.columns_for(self.width()))

    def set_pinned(self, key: str, pinned: bool) -> None:
        """Pin or unpin system chart `key` (remembered in the settings); pinned charts come first."""
        if self.section.choice.set_pinned(key, pinned):
            self._settings.setValue(SYSTEM_PINS, self.section.choice.pins)
            self.cells[key].pin.setChecked(pinned)
            self._place(self.columns)

    def _filter_changed(self, text: str) -> None:
        self.section.choice.set_query(text)
        self._place(self.columns)

    @staticmethod
    def columns_for(width: int) -> int:
        """How many system charts a row holds in a view `width` px wide (the loss chart takes a column too)."""
        return max(1, min(SYSTEM_COLUMNS, width // SYSTEM_CELL_WIDTH - 1))

    def _place(self, columns: int) -> None:
        """The loss chart in the first column, down every row; the system charts the filter lets through, pinned
        first, `columns` to a row beside it; the others out of the grid."""
        self.columns = columns
        choice = self.section.choice
        self.shown = choice.shown()
        for widget in (self.loss_cell, *self.cells.values()):
            self._grid.removeWidget(widget)
        rows = max(1, (len(self.shown) + columns - 1) // columns)
        self._grid.addWidget(self.loss_cell, 0, 0, rows, 1)
        self.loss_cell.show()
        for index, key in enumerate(self.shown):
            self._grid.addWidget(self.cells[key], index // columns, 1 + index % columns)
            self.cells[key].show()
        for key, cell in self.cells.items():
            if key not in self.shown:
                cell.setParent(self._cells)  # kept in the page, hidden: its chart waits to be shown to redraw
                cell.hide()
        used = min(columns, len(self.shown))
        for column in range(SYSTEM_COLUMNS + 1):
            self._grid.setColumnStretch(column, 1 if column <= used else 0)
        self.bar.show_count(len(self.shown), len(choice.names))
        self.empty.setText(f"No system chart matches “{choice.query.strip()}”: the loss alone."
                           if not self.shown else "")
        self.empty.setVisible(not self.shown)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802
        super().resizeEvent(event)
        columns = self.columns_for(event.size().width())
        if columns != self.columns:
            self._place(columns)

    def set_note(self, text: str) -> None:
        """A line above the charts ("" hides it): how x maps for them, why nothing can be read."""
        self.note.setText(text)
        self.note.setVisible(bool(text))

    def all_charts(self) -> list[TimeSeriesChart]:
        """The loss chart and every system chart, shown or filtered out (those are fed too: the filter only hides)."""
        return [self.loss_chart, *self.charts.values()]

    def image(self) -> QPixmap:
        """The whole view as one picture (an export): the note above every chart, also the charts a low pane
        scrolls out of sight."""
        cells = self._cells.grab()  # the scroll area's page at its own size, seen or scrolled away
        if not self.note.isVisible():
            return cells
        note = self.note.grab()
        ratio = cells.devicePixelRatio()
        width, height = max(note.width(), cells.width()), note.height() + cells.height()
        out = QPixmap(width, height)
        out.setDevicePixelRatio(ratio)
        out.fill(self.palette().color(self.backgroundRole()))
        painter = QPainter(out)
        painter.drawPixmap(0, 0, note)
        painter.drawPixmap(0, round(note.height() / ratio), cells)
        painter.end()
        return out
