"""The Charts tab's System view: the run's loss beside its recorded system figures (each GPU's utilisation and
memory, the host's CPU, the ranks' RSS, disk and network), as W&B's run page has them, so a dip in GPU use lines
up with what the loss did then. The charts share one x axis (zoom one, all follow) and the tab's x option.

The figures are the run's resource samples, recorded every second by its supervisor and read from the run store
(backend/runs/control/system_series.py: read_system_series) by the panel that holds this view, on its background
reads; the view only draws them. A chart with nothing to draw says why in its place ("No NVIDIA GPU found: ..."),
never an empty axis.
"""

from __future__ import annotations

import html
from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtGui import QPainter, QPixmap, QResizeEvent
from PySide6.QtWidgets import (
    QGridLayout,
    QLabel,
    QScrollArea,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.runs import SYSTEM_CHARTS, SystemChart
from traindeck.gui.theme import set_muted
from traindeck.gui.widgets.charts import TimeSeriesChart
from traindeck.gui.widgets.labels import ReasonLabel

SYSTEM_COLUMNS = 3  # the system charts beside the loss chart, which takes the first column's rows
SYSTEM_CELL_HEIGHT = 150  # px: as the metrics grid's cells; a low pane scrolls rather than squeezing them
# px: the narrowest column that shows a chart's title, axis and legend whole ("Ranks' host memory (RSS)"): a
# narrower pane puts fewer system charts in a row, and more rows (which scroll in a low pane).
SYSTEM_CELL_WIDTH = 220


class SystemSlot(QStackedWidget):
    """A system chart, or in its place why it has nothing to draw."""

    def __init__(self, spec: SystemChart, chart: TimeSeriesChart) -> None:
        super().__init__()
        self.spec, self.chart = spec, chart
        self.reason: str | None = None
        self.label = ReasonLabel()  # not height-for-width: the view fits its pane without scrolling
        self.addWidget(chart)
        self.addWidget(self.label)
        self.setMinimumHeight(SYSTEM_CELL_HEIGHT)

    def set_reason(self, reason: str | None) -> None:
        """Why there is nothing to draw (None: the chart); said while the chart holds no line."""
        self.reason = reason
        self.label.setText(f"<b>{html.escape(self.spec.title)}</b><br>{html.escape(reason or '')}")
        self.update_shown()

    def update_shown(self) -> None:
        self.setCurrentWidget(self.label if self.reason is not None and not self.chart.series_names()
                              else self.chart)

    @property
    def reason_shown(self) -> str | None:
        """The words shown in the chart's place, or None while the chart is shown."""
        return self.reason if self.currentWidget() is self.label else None


class SystemView(QWidget):
    """The loss chart and one chart per SYSTEM_CHARTS entry, made by `make_chart(title, unit)`; `charts` by key."""

    def __init__(self, make_chart: Callable[[str, str], TimeSeriesChart]) -> None:
        super().__init__()
        self._make_chart = make_chart
        self.note = QLabel()
        self.note.setWordWrap(True)
        set_muted(self.note)
        self.note.hide()
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
        layout.addWidget(self.note)
        layout.addWidget(scroll, 1)
        self.loss_chart: TimeSeriesChart = make_chart("Loss", "")
        self.slots: dict[str, SystemSlot] = {}
        self.charts: dict[str, TimeSeriesChart] = {}
        self.columns = SYSTEM_COLUMNS  # system charts in a row: fewer in a narrow pane (columns_for)
        self.renew()

    def renew(self) -> None:
        """Fresh charts (another run, another x axis): nothing drawn, no reason said, one zoom for all."""
        old = [self.loss_chart, *self.slots.values()]
        self.loss_chart = self._make_chart("Loss", "")
        self.slots = {spec.key: SystemSlot(spec, self._make_chart(spec.title, spec.unit)) for spec in SYSTEM_CHARTS}
        self.charts = {key: slot.chart for key, slot in self.slots.items()}
        for widget in old:
            self._grid.removeWidget(widget)
            widget.hide()  # at once: deleteLater() waits for the event loop
            widget.deleteLater()
        self.loss_chart.setMinimumHeight(SYSTEM_CELL_HEIGHT)
        for slot in self.slots.values():
            slot.chart.link_x(self.loss_chart)  # zoom one, all follow; the loss chart leads (see link_x)
        self._place(self.columns_for(self.width()))

    @staticmethod
    def columns_for(width: int) -> int:
        """How many system charts a row holds in a view `width` px wide (the loss chart takes a column too)."""
        return max(1, min(SYSTEM_COLUMNS, width // SYSTEM_CELL_WIDTH - 1))

    def _place(self, columns: int) -> None:
        """The loss chart in the first column, down every row; the system charts `columns` to a row beside it."""
        self.columns = columns
        for widget in (self.loss_chart, *self.slots.values()):
            self._grid.removeWidget(widget)
        rows = (len(SYSTEM_CHARTS) + columns - 1) // columns
        self._grid.addWidget(self.loss_chart, 0, 0, rows, 1)
        for index, slot in enumerate(self.slots.values()):
            self._grid.addWidget(slot, index // columns, 1 + index % columns)
        for column in range(SYSTEM_COLUMNS + 1):
            self._grid.setColumnStretch(column, 1 if column <= columns else 0)

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
