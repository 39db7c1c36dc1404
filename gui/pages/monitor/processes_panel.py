"""The Monitor's Processes tab: every process of the machine, as htop and nvitop list them (PID, user, CPU, RSS, GPU
memory, run, command), sortable by any column and filtered by a text, with the watched run's processes highlighted.

The rows come from the backend's `ProcessTable` (filtering and sorting without Qt); the page hands the panel each
sample's `MachineSnapshot` (taken on the sampling thread every 2 s while this tab is on screen) and the run watched.
The selection stays on its process across snapshots."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import (
    QAbstractTableModel,
    QItemSelectionModel,
    QModelIndex,
    QPersistentModelIndex,
    Qt,
    Signal,
)
from PySide6.QtGui import QBrush, QColor, QFont, QKeySequence, QPalette, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.monitor import PROCESS_SORT_KEYS, MachineProcess, MachineSnapshot, ProcessTable
from traindeck.gui.widgets.chart_axis import format_value

COLUMNS = ("PID", "User", "CPU %", "RSS", "GPU memory", "Run", "Command")
COLUMN_TIPS = (
    "Process id",
    "The user it runs as",
    "CPU over the last 2 s, 100 % = one core (a process busy on 4 cores shows 400 %)",
    "Resident memory: what it holds in RAM",
    "GPU memory it holds over all GPUs, from NVML's process lists",
    "The traindeck run it belongs to (TRAINDECK_RUN_ID in its environment); the watched run's rows are highlighted",
    "Its command line",
)
_NUMERIC = frozenset({0, 2, 3, 4})
_RIGHT = int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
PID_ROLE = Qt.ItemDataRole.UserRole + 1


class ProcessModel(QAbstractTableModel):
    """`ProcessTable.rows` as a Qt model; cells are formatted once per snapshot (views ask for them many times).
    Sorting (a click on a header) is the table's: rows come back in the new order."""

    sorted_by = Signal()

    def __init__(self, table: ProcessTable, parent: QWidget) -> None:
        super().__init__(parent)
        self.table = table
        self.run_labels: dict[str, str] = {}
        self._text: list[tuple[str, ...]] = []
        self._view = parent

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._text)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation == Qt.Orientation.Horizontal:
            if role == Qt.ItemDataRole.DisplayRole:
                return COLUMNS[section]
            if role == Qt.ItemDataRole.ToolTipRole:
                return COLUMN_TIPS[section]
        return None

    def refresh(self) -> None:
        """The table's rows changed (a snapshot, the filter, the sort or the watched run): show them."""
        self.beginResetModel()
        self._text = [self._cells(p) for p in self.table.rows]
        self.endResetModel()

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        self.table.sort_by(PROCESS_SORT_KEYS[column], order == Qt.SortOrder.DescendingOrder)
        self.refresh()
        self.sorted_by.emit()

    def _cells(self, p: MachineProcess) -> tuple[str, ...]:
        run = "" if p.run_id is None else self.run_labels.get(p.run_id, p.run_id)
        cpu = "-" if p.cpu_percent is None else f"{p.cpu_percent:.1f}"  # as htop: one decimal, aligned
        return (str(p.pid), p.user, cpu, format_value(p.rss_bytes, "B"),
                "" if p.gpu_memory_bytes is None else format_value(p.gpu_memory_bytes, "B"), run, p.cmdline)

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        row, column = index.row(), index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return self._text[row][column]
        if role == Qt.ItemDataRole.TextAlignmentRole:
            return _RIGHT if column in _NUMERIC else None
        process = self.table.rows[row]
        if role == PID_ROLE:
            return process.pid
        if role == Qt.ItemDataRole.BackgroundRole and self.table.watched(process):
            colour = QColor(self._view.palette().color(QPalette.ColorRole.Highlight))
            colour.setAlpha(70)  # a tint that the selection's full colour still stands out from
            return QBrush(colour)
        if role == Qt.ItemDataRole.FontRole and self.table.watched(process):
            font = QFont(self._view.font())
            font.setBold(True)
            return font
        if role == Qt.ItemDataRole.ToolTipRole:
            lines = [process.cmdline, f"PID {process.pid}, parent {process.ppid}, {process.user}"]
            if process.run_id is not None:
                lines.append(f"Run {process.run_id}")
            return "\n".join(lines)
        return None


class ProcessesPanel(QWidget):
    """The machine's processes: a filter box and a summary line over the table."""

    def __init__(self) -> None:
        super().__init__()
        self.table = ProcessTable()
        self.model = ProcessModel(self.table, self)
        self.filter_edit = QLineEdit()
        self.filter_edit.setPlaceholderText("Filter: PID, user, command or run (Ctrl+F)")
        self.filter_edit.setClearButtonEnabled(True)
        self.filter_edit.setToolTip("Rows holding every word typed (case ignored): a PID, a user, part of a "
                                    "command, a run's id")
        self.filter_edit.textChanged.connect(self._filter)
        QShortcut(QKeySequence.StandardKey.Find, self, self.filter_edit.setFocus)
        self.summary = QLabel("Waiting for the first snapshot of the machine's processes...")
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        self.view = QTableView()
        self.view.setModel(self.model)
        self.view.setSortingEnabled(True)
        self.view.horizontalHeader().setSortIndicator(2, Qt.SortOrder.DescendingOrder)  # the busiest first, as htop
        self.view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.view.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.view.setAlternatingRowColors(True)
        self.view.setWordWrap(False)
        self.view.verticalHeader().setVisible(False)
        self.view.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 6)
        header = self.view.horizontalHeader()
        # Fixed widths from sample text (ResizeToContents would measure every cell of every snapshot).
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(True)
        metrics = self.fontMetrics()
        for column, sample in enumerate(("4194304", "username", "1234.5", "123.4 GiB", "GPU memory",
                                         "20261127-140649-6ab1")):
            header.resizeSection(column, max(metrics.horizontalAdvance(sample),
                                             metrics.horizontalAdvance(COLUMNS[column])) + 24)
        self.model.sorted_by.connect(self._reselect)
        self._selected_pid: int | None = None
        self.view.selectionModel().selectionChanged.connect(self._remember_selection)

        top = QHBoxLayout()
        top.addWidget(self.filter_edit, 1)
        top.addSpacing(12)
        top.addWidget(self.summary, 2)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.view, 1)

    # --- what the page hands over ---

    def show_snapshot(self, snapshot: MachineSnapshot) -> None:
        self.table.show(snapshot)
        self._show()

    def watch(self, run_id: str | None) -> None:
        """The watched run: its processes are highlighted (None: none is)."""
        self.table.watch(run_id)
        self._show()

    def set_run_labels(self, labels: dict[str, str]) -> None:
        """Run id -> what the Run column says for it (the run's name and its id's end, as the run picker shows)."""
        self.model.run_labels = labels
        self._show()

    # --- inside ---

    def _filter(self, text: str) -> None:
        self.table.set_filter(text)
        self._show()

    def _show(self) -> None:
        self.model.refresh()
        self._reselect()
        self.summary.setText(self._summary())

    def _summary(self) -> str:
        snapshot = self.table.snapshot
        if snapshot is None:
            return self.summary.text()
        total = len(snapshot.processes)
        parts = [f"{len(self.table.rows)} of {total} processes" if self.table.filter_text.split()
                 else f"{total} processes"]
        if self.table.watched_run is not None:
            mine = sum(1 for p in snapshot.processes if p.run_id == self.table.watched_run)
            parts.append(f"{mine} of the watched run (highlighted)")
        if not snapshot.gpu_memory_known:
            parts.append("GPU memory: NVML cannot tell")
        parts.append(f"snapshot took {snapshot.took_s * 1000:.0f} ms")
        return "  ·  ".join(parts)

    def _remember_selection(self, *_: Any) -> None:
        rows = self.view.selectionModel().selectedRows()
        if rows:
            self._selected_pid = int(rows[0].data(PID_ROLE))

    def _reselect(self) -> None:
        """The selection back on its process after the rows changed (it is gone: no selection)."""
        if self._selected_pid is None:
            return
        pid = self._selected_pid
        for row, process in enumerate(self.table.rows):
            if process.pid == pid:
                self.view.selectionModel().select(
                    self.model.index(row, 0), QItemSelectionModel.SelectionFlag.ClearAndSelect
                    | QItemSelectionModel.SelectionFlag.Rows)
                break
        self._selected_pid = pid  # kept across a snapshot that filtered it out
