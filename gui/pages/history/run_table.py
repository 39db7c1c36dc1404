"""History's table of runs: a panel (RunTable) that shows the runs and keeps their selection, and the model behind it
(cells formatted once per refresh, only changed rows reported). The page gives it each new list and listens to its
signals: the selection changed, a run is to be opened.

Beside each run's figures the table answers "which was best": the swept values as columns, the final and best
value of a metric the panel lets the user choose (loss unless chosen), a sweep's runs together under the sweep's
name and its best run marked. That table is `backend.runs.history_table` (Qt-free); this module presents it."""

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
from PySide6.QtGui import QBrush, QColor, QFont, QIcon, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QStyle,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.runs import (
    HistoryRow,
    HistoryTable,
    RunFigures,
    format_bytes,
    format_duration,
    format_metric,
    format_rate,
    format_seconds_per_step,
    history_table,
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
    "Samples per second over the wall clock: the measured step rate x the global batch (hover a cell for its "
    "source and DeepSpeed's engine-only figure)",
)
SWEEP_TIP = ("The sweep the run was queued by (its runs together when sorted by Started); ★ marks the sweep's best "
             "run by the chosen metric's best value")
BEST_MARK = "★ "
STATE_SEVERITY = {"succeeded": "ok", "failed": "error", "lost": "error", "stopped": "warning", "running": "note"}
SORT_ROLE = Qt.ItemDataRole.UserRole + 1
ID_ROLE = Qt.ItemDataRole.UserRole + 2


def _started(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if t else "-"


class RunsModel(QAbstractTableModel):
    """The runs as the table shows them: the fixed figure columns, then the sweep, the swept values and the chosen
    metric's final and best values (history_table). Cells are formatted once per refresh (views ask for data
    thousands of times); `set_table` reports only the rows that changed, so the view keeps its selection and scroll
    position."""

    def __init__(self, parent: QWidget):
        super().__init__(parent)
        self.rows: list[RunFigures] = []
        self.table = history_table([])
        self.headers: tuple[str, ...] = COLUMNS
        self.tips: tuple[str, ...] = COLUMN_TIPS
        self._text: list[tuple[str, ...]] = []
        self._sort: list[tuple[Any, ...]] = []
        self._best: list[bool] = []
        self._view = parent
        self._brushes: dict[str, QBrush | None] = {}
        self._bold = QFont(parent.font())
        self._bold.setBold(True)

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.headers)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation == Qt.Orientation.Horizontal and 0 <= section < len(self.headers):
            if role == Qt.ItemDataRole.DisplayRole:
                return self.headers[section]
            if role == Qt.ItemDataRole.ToolTipRole:
                return self.tips[section]
        return None

    def set_table(self, table: HistoryTable) -> bool:
        """Take a new table; True when the set or order of runs, or the columns, changed (the view was reset)."""
        headers, tips = _headers(table)
        rows = [r.run for r in table.rows]
        params = table.param_sort_keys()
        say_step = table.final_steps_differ
        texts = [_cells(r, say_step) for r in table.rows]
        sorts = [_sort_keys(r, keys) for r, keys in zip(table.rows, params, strict=True)]
        best = [r.is_best for r in table.rows]
        if [r.run_id for r in rows] == [r.run_id for r in self.rows] and headers == self.headers:
            changed = [i for i in range(len(rows)) if texts[i] != self._text[i] or rows[i] != self.rows[i]
                       or best[i] != self._best[i]]
            self.rows, self.table, self._text, self._sort, self._best = rows, table, texts, sorts, best
            for i in changed:
                self.dataChanged.emit(self.index(i, 0), self.index(i, len(headers) - 1))
            return False
        self.beginResetModel()
        self.rows, self.table, self._text, self._sort, self._best = rows, table, texts, sorts, best
        self.headers, self.tips = headers, tips
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
            return _RIGHT if column in _NUMERIC or column >= len(self.headers) - 2 else None
        if role == Qt.ItemDataRole.ForegroundRole:
            return self._state_brush(self.rows[row].state) if column == 1 else None
        if role == Qt.ItemDataRole.FontRole:
            return self._bold if self._best[row] and column in (0, SWEEP_COLUMN) else None
        if role == Qt.ItemDataRole.DecorationRole and column == 1:
            return _state_icon(self.rows[row].state)  # the state at a glance: the Runs list's icon and colour
        if role == ID_ROLE:
            return self.rows[row].run_id
        if role == Qt.ItemDataRole.ToolTipRole:
            run = self.rows[row]
            if column == 7 and run.seconds_per_step_source:
                return f"From {run.seconds_per_step_source}"
            if column == THROUGHPUT_COLUMN:
                return run.throughput_note
            if self._best[row] and column == SWEEP_COLUMN:
                word = "highest" if self.table.higher_is_better else "lowest"
                return f"The best run of its sweep: the {word} {self.table.metric}"
            lines = [f"Run {run.run_id}"] + ([run.summary] if run.summary else []) + [f"Folder: {run.run_dir}"]
            return "\n".join(lines)
        return None


@functools.lru_cache(maxsize=16)
def _state_icon(state: str) -> QIcon:
    return state_icon(state)  # painted once per state, not on every repaint of the table


_NUMERIC = frozenset({3, 5, 6, 7, 8})
_RIGHT = int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)


SWEEP_COLUMN = len(COLUMNS)  # the first column after the fixed ones
THROUGHPUT_COLUMN = COLUMNS.index("Throughput")
# The narrowest the throughput column gets: a five-digit rate and its unit stay whole while runs come and go.
THROUGHPUT_SAMPLE = "88,888 samples/s"


def _headers(table: HistoryTable) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The columns for this table (the swept names and the metric vary) and their tips."""
    better = "highest" if table.higher_is_better else "lowest"
    headers = (*COLUMNS, "Sweep", *table.params, f"Final {table.metric}", f"Best {table.metric}")
    tips = (*COLUMN_TIPS, SWEEP_TIP, *(f"The value of {name} the sweep gave the run" for name in table.params),
            f"The last {table.metric} the run logged" + (
                " (and the step it was logged at: the runs ended at different steps; the Overlay tab compares "
                "them at equal steps)" if table.final_steps_differ else ""),
            f"The {better} {table.metric} the run logged ({better} is best); choose the metric above the table")
    return headers, tips


def _cells(row: HistoryRow, say_step: bool = False) -> tuple[str, ...]:
    run = row.run
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
        (BEST_MARK if row.is_best else "") + (row.group_label or "-"),
        *(value or "-" for value in row.params),
        row.final_text(say_step),
        format_metric(row.best),
    )


def _sort_keys(row: HistoryRow, params: tuple[float | str, ...]) -> tuple[Any, ...]:
    run = row.run
    # Started sorts by sort_time: a sweep's runs stay together, newest first.
    values = (run.name.lower(), run.state, row.sort_time, run.duration_s, run.preset or "",
              run.peak_gpu_mem_bytes, run.peak_host_ram_bytes, run.seconds_per_step, run.throughput,
              f"{row.group_label} {row.group}" if row.group else "", *params, row.final, row.best)
    return tuple(-1.0 if v is None else v for v in values)


class RunTable(QWidget):
    """The runs, newest first (a sweep's runs together), sortable by any column; one or more selected. Figure columns
    are as wide as their widest cell, the name takes the rest. Enter or a double-click asks to open the selected
    run. The panel keeps the metric whose final and best values it shows (loss until one is chosen)."""

    selection_changed = Signal(list)  # the selected runs' ids, in the order shown
    open_requested = Signal()  # Enter, Return or a double-click on the list

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._sized = False
        self._runs: list[RunFigures] = []
        self._metric: str | None = None  # chosen by the user; None: history_table's default (loss)
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

        self.metric_box = QComboBox()
        self.metric_box.setToolTip("The metric whose final and best values the last two columns show, and by which "
                                   "each sweep's best run is marked (★)")
        self.metric_box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.metric_box.currentTextChanged.connect(self._metric_chosen)
        label = QLabel("&Best by:")
        label.setBuddy(self.metric_box)
        chooser = QHBoxLayout()
        chooser.addStretch(1)
        chooser.addWidget(label)
        chooser.addWidget(self.metric_box)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(chooser)
        layout.addWidget(self.table)

    @property
    def rows(self) -> list[RunFigures]:
        """The runs listed, in the table's order (a sweep's runs together)."""
        return self.model.rows

    @property
    def history(self) -> HistoryTable:
        """The table shown: its swept names, its metric, each row's final and best values and group."""
        return self.model.table

    def show_rows(self, rows: list[RunFigures]) -> None:
        """A new list: changed rows are redrawn, the selection stays on its runs, columns fit a changed set."""
        self._runs = rows
        table = history_table(rows, self._metric)
        self._offer_metrics(table)
        selected = self.selected_ids()
        if self.model.set_table(table) or not self._sized or self._outgrown():
            self._size_columns()
        if selected and self.selected_ids() != selected:
            self.select_runs(selected)

    def choose_metric(self, metric: str) -> None:
        """Show the final and best values of `metric` (and mark each sweep's best by it)."""
        self._metric = metric
        self.show_rows(self._runs)

    def _metric_chosen(self, metric: str) -> None:
        if metric and metric != self.model.table.metric:
            self.choose_metric(metric)

    def _offer_metrics(self, table: HistoryTable) -> None:
        """The metrics the runs logged, in the chooser, with the table's one current."""
        names = list(table.metrics) if table.metric in table.metrics else [table.metric, *table.metrics]
        if [self.metric_box.itemText(i) for i in range(self.metric_box.count())] != names:
            self.metric_box.blockSignals(True)
            self.metric_box.clear()
            self.metric_box.addItems(names)
            self.metric_box.blockSignals(False)
        if self.metric_box.currentText() != table.metric:
            self.metric_box.blockSignals(True)
            self.metric_box.setCurrentText(table.metric)
            self.metric_box.blockSignals(False)

    def selected_ids(self) -> list[str]:
        """The selected runs' ids, in the order shown."""
        rows = sorted(index.row() for index in self.table.selectionModel().selectedRows())
        return [str(self.proxy.index(row, 0).data(ID_ROLE)) for row in rows]

    def select_runs(self, run_ids: list[str]) -> None:
        selection = QItemSelection()
        for row in range(self.proxy.rowCount()):
            index = self.proxy.index(row, 0)
            if index.data(ID_ROLE) in run_ids:
                selection.select(index, self.proxy.index(row, self.model.columnCount() - 1))
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
        headers = self.model.headers
        for column in range(1, len(headers)):
            widest = max((metrics.horizontalAdvance(t[column]) for t in texts), default=0)
            if column == 1:  # the state's icon sits before its word
                widest += self.table.style().pixelMetric(QStyle.PixelMetric.PM_SmallIconSize) + 8
            if column == SWEEP_COLUMN:  # the best run's name is drawn bold
                widest += metrics.horizontalAdvance(BEST_MARK) + 8
            if column == THROUGHPUT_COLUMN:
                widest = max(widest, metrics.horizontalAdvance(THROUGHPUT_SAMPLE))
            self.table.setColumnWidth(column, max(widest, header.horizontalAdvance(headers[column]) + 14) + 14)
        self._sized = bool(texts)
        self._fit_name_column()

    def _outgrown(self) -> bool:
        """A throughput or final value became wider than its column (a running run's first figures)."""
        metrics = self.table.fontMetrics()
        texts = self.model.texts()[:300]
        for column in (THROUGHPUT_COLUMN, self.model.columnCount() - 2):
            widest = max((metrics.horizontalAdvance(t[column]) for t in texts), default=0)
            if widest + 14 > self.table.columnWidth(column):
                return True
        return False

    def _fit_name_column(self) -> None:
        """The name takes the room the figures leave, but stays readable (the view scrolls instead)."""
        others = sum(self.table.columnWidth(c) for c in range(1, self.model.columnCount()))
        self.table.setColumnWidth(0, max(self._name_min, self.table.viewport().width() - others))
