"""History's table of runs: a panel (RunTable) that shows the runs and keeps their selection, and the model behind it
(cells formatted once per refresh, only changed rows reported). The page gives it each new list and listens to its
signals: the selection changed, a run is to be opened."""

from __future__ import annotations

import functools
import time
from typing import Any

from PySide6.QtCore import (
    QAbstractTableModel,
    QEvent,
    QItemSelection,
    QItemSelectionModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QSortFilterProxyModel,
    Qt,
    Signal,
)
from PySide6.QtGui import QBrush, QColor, QIcon, QKeySequence, QShortcut
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QStyle, QTableView, QVBoxLayout, QWidget

from traindeck.backend.runs import (
    RunFigures,
    format_bytes,
    format_duration,
    format_rate,
    format_seconds_per_step,
)
from traindeck.gui.widgets.message_list import tone
from traindeck.gui.widgets.run_state import state_icon

COLUMNS = ("Name", "State", "Started", "Duration", "Preset", "Peak GPU mem", "Peak host RAM", "s/step", "Throughput")
COLUMN_TIPS = (
    "The run's name (the script's, unless given)",
    "running, succeeded, failed, stopped, or lost (its supervisor disappeared)",
    "When the run was started",
    "From start to end (to now while running)",
    "The preset it was launched with",
    "The fullest GPU's memory at its peak, as NVML reports it (CUDA context and other processes included)",
    "The run's processes' resident memory at its peak (ranks and launcher together)",
    "Seconds per optimizer step (hover a cell to see how it was measured)",
    "Samples or tokens per second the run reported, else its progress rate",
)
STATE_SEVERITY = {"succeeded": "ok", "failed": "error", "lost": "error", "stopped": "warning", "running": "note"}
SORT_ROLE = Qt.ItemDataRole.UserRole + 1
ID_ROLE = Qt.ItemDataRole.UserRole + 2


def _started(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if t else "-"


class RunsModel(QAbstractTableModel):
    """The runs as the table shows them. Cells are formatted once per refresh (views ask for data thousands of
    times); `set_rows` reports only the rows that changed, so the view keeps its selection and scroll position."""

    def __init__(self, parent: QWidget):
        super().__init__(parent)
        self.rows: list[RunFigures] = []
        self._text: list[tuple[str, ...]] = []
        self._sort: list[tuple[Any, ...]] = []
        self._view = parent
        self._brushes: dict[str, QBrush | None] = {}

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation == Qt.Orientation.Horizontal:
            if role == Qt.ItemDataRole.DisplayRole:
                return COLUMNS[section]
            if role == Qt.ItemDataRole.ToolTipRole:
                return COLUMN_TIPS[section]
        return None

    def set_rows(self, rows: list[RunFigures]) -> bool:
        """Take a new list; True when the set or order of runs changed (the view was reset)."""
        texts = [_cells(r) for r in rows]
        sorts = [_sort_keys(r) for r in rows]
        if [r.run_id for r in rows] == [r.run_id for r in self.rows]:
            changed = [i for i, (old, new) in enumerate(zip(self.rows, rows, strict=True)) if old != new]
            self.rows, self._text, self._sort = rows, texts, sorts
            for i in changed:
                self.dataChanged.emit(self.index(i, 0), self.index(i, len(COLUMNS) - 1))
            return False
        self.beginResetModel()
        self.rows, self._text, self._sort = rows, texts, sorts
        self.endResetModel()
        return True

    def texts(self) -> list[tuple[str, ...]]:
        return self._text

    def restyle(self) -> None:
        """The theme changed: state colours are looked up again."""
        self._brushes.clear()
        if self.rows:
            self.dataChanged.emit(self.index(0, 1), self.index(len(self.rows) - 1, 1))

    def _state_brush(self, state: str) -> QBrush | None:
        if state not in self._brushes:
            colour = tone(STATE_SEVERITY.get(state, "note"), self._view)
            self._brushes[state] = QBrush(QColor(colour)) if colour else None
        return self._brushes[state]

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        row, column = index.row(), index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return self._text[row][column]
        if role == SORT_ROLE:
            return self._sort[row][column]
        if role == Qt.ItemDataRole.TextAlignmentRole:
            return _RIGHT if column in _NUMERIC else None
        if role == Qt.ItemDataRole.ForegroundRole:
            return self._state_brush(self.rows[row].state) if column == 1 else None
        if role == Qt.ItemDataRole.DecorationRole and column == 1:
            return _state_icon(self.rows[row].state)  # the state at a glance: the Runs list's icon and colour
        if role == ID_ROLE:
            return self.rows[row].run_id
        if role == Qt.ItemDataRole.ToolTipRole:
            run = self.rows[row]
            if column == 7 and run.seconds_per_step_source:
                return f"From {run.seconds_per_step_source}"
            lines = [f"Run {run.run_id}"] + ([run.summary] if run.summary else []) + [f"Folder: {run.run_dir}"]
            return "\n".join(lines)
        return None


@functools.lru_cache(maxsize=16)
def _state_icon(state: str) -> QIcon:
    return state_icon(state)  # painted once per state, not on every repaint of the table


_NUMERIC = frozenset({3, 5, 6, 7, 8})
_RIGHT = int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)


def _cells(run: RunFigures) -> tuple[str, ...]:
    return (
        run.name or run.run_id,
        run.state + (f" ({run.exit_code})" if run.state == "failed" and run.exit_code else ""),
        _started(run.started_at or run.created_at),
        format_duration(run.duration_s),
        run.preset or "-",
        format_bytes(run.peak_gpu_mem_bytes),
        format_bytes(run.peak_host_ram_bytes),
        format_seconds_per_step(run.seconds_per_step),
        format_rate(run.throughput, run.throughput_unit),
    )


def _sort_keys(run: RunFigures) -> tuple[Any, ...]:
    values = (run.name.lower(), run.state, run.started_at or run.created_at, run.duration_s, run.preset or "",
              run.peak_gpu_mem_bytes, run.peak_host_ram_bytes, run.seconds_per_step, run.throughput)
    return tuple(-1.0 if v is None else v for v in values)


class RunTable(QWidget):
    """The runs, newest first, sortable by any column; one or more selected. Figure columns are as wide as their
    widest cell, the name takes the rest. Enter or a double-click asks to open the selected run."""

    selection_changed = Signal(list)  # the selected runs' ids, in the order shown
    open_requested = Signal()  # Enter, Return or a double-click on the list

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._sized = False
        self.model = RunsModel(self)
        self.proxy = QSortFilterProxyModel(self)
        self.proxy.setSourceModel(self.model)
        self.proxy.setSortRole(SORT_ROLE)
        self.table = QTableView()
        self.table.setModel(self.proxy)
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(2, Qt.SortOrder.DescendingOrder)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 8)
        self.table.setAlternatingRowColors(True)
        header = self.table.horizontalHeader()
        # Widths come from the formatted cells when the list changes (ResizeToContents would measure every cell at
        # every refresh: a quarter second for 200 runs).
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Fixed)
        self._name_min = self.fontMetrics().horizontalAdvance("llama-7b-offload-run") + 16
        self.table.installEventFilter(self)
        self.table.doubleClicked.connect(lambda _index: self.open_requested.emit())
        self.table.selectionModel().selectionChanged.connect(
            lambda *_args: self.selection_changed.emit(self.selected_ids()))
        for keys in ("Return", "Enter"):
            shortcut = QShortcut(QKeySequence(keys), self.table)
            shortcut.setContext(Qt.ShortcutContext.WidgetShortcut)
            shortcut.activated.connect(self.open_requested.emit)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.table)

    @property
    def rows(self) -> list[RunFigures]:
        """The runs listed, in the store's order."""
        return self.model.rows

    def show_rows(self, rows: list[RunFigures]) -> None:
        """A new list: changed rows are redrawn, the selection stays on its runs, columns fit a changed set."""
        selected = self.selected_ids()
        if self.model.set_rows(rows) or not self._sized:
            self._size_columns()
        if selected and self.selected_ids() != selected:
            self.select_runs(selected)

    def selected_ids(self) -> list[str]:
        """The selected runs' ids, in the order shown."""
        rows = sorted(index.row() for index in self.table.selectionModel().selectedRows())
        return [str(self.proxy.index(row, 0).data(ID_ROLE)) for row in rows]

    def select_runs(self, run_ids: list[str]) -> None:
        selection = QItemSelection()
        for row in range(self.proxy.rowCount()):
            index = self.proxy.index(row, 0)
            if index.data(ID_ROLE) in run_ids:
                selection.select(index, self.proxy.index(row, len(COLUMNS) - 1))
        self.table.selectionModel().select(selection, QItemSelectionModel.SelectionFlag.ClearAndSelect)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.table and event.type() == QEvent.Type.Resize:
            self._fit_name_column()
        return super().eventFilter(watched, event)

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self.model.restyle()  # state colours follow the theme

    def _size_columns(self) -> None:
        """Each figure column as wide as its widest cell (of the first few hundred runs); the name takes the rest."""
        metrics = self.table.fontMetrics()
        header = self.table.horizontalHeader().fontMetrics()
        texts = self.model.texts()[:300]
        for column in range(1, len(COLUMNS)):
            widest = max((metrics.horizontalAdvance(t[column]) for t in texts), default=0)
            if column == 1:  # the state's icon sits before its word
                widest += self.table.style().pixelMetric(QStyle.PixelMetric.PM_SmallIconSize) + 8
            self.table.setColumnWidth(column, max(widest, header.horizontalAdvance(COLUMNS[column]) + 14) + 14)
        self._sized = bool(texts)
        self._fit_name_column()

    def _fit_name_column(self) -> None:
        """The name takes the room the figures leave, but stays readable (the view scrolls instead)."""
        others = sum(self.table.columnWidth(c) for c in range(1, len(COLUMNS)))
        self.table.setColumnWidth(0, max(self._name_min, self.table.viewport().width() - others))
