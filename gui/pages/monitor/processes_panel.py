"""The Monitor's Processes tab: every process of the machine, as htop and nvitop list them (PID, user, CPU, RSS, the
GPUs it is on, its SM use there, GPU memory, run, how long it has run, command), sortable by any column and filtered by a text, with the
watched run's processes highlighted.

The rows come from the backend's `ProcessTable` (filtering, sorting and the tree without Qt); the page hands the
panel each sample's `MachineSnapshot` (taken on the sampling thread every 2 s while this tab is on screen) and the run
watched. The selection stays on its process across snapshots. The Command column shows the program's basename and its
arguments (the full command line in the tooltip); Tree puts children under their parent (a launcher, then its ranks).

A right-click (or a key: T, I, K; with Shift, the process and its descendants) sends SIGTERM, SIGINT or SIGKILL to
one of the person's own processes after a confirmation naming its PID and command (backend `process_signals`: other
users' processes, PID 1 and traindeck itself are refused). A process of a traindeck run first offers its run's Stop,
which goes through the run's supervisor as the Runs page's Stop does (the script may save; signals escalate in
order). What happened is one line under the table."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import (
    QAbstractTableModel,
    QEvent,
    QItemSelectionModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    Qt,
    Signal,
)
from PySide6.QtGui import (
    QAction,
    QBrush,
    QColor,
    QFont,
    QGuiApplication,
    QKeyEvent,
    QKeySequence,
    QPalette,
    QShortcut,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMenu,
    QMessageBox,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.monitor import (
    PROCESS_SORT_KEYS,
    SIGNAL_WORDS,
    MachineProcess,
    MachineSnapshot,
    ProcessTable,
    plan_signal,
    refusal,
    send_signal,
)
from traindeck.gui.context import AppContext
from traindeck.gui.widgets.chart_axis import format_value

COLUMNS = ("PID", "User", "CPU %", "RSS", "GPU", "SM %", "GPU memory", "Run", "Time", "Command")
COLUMN_TIPS = (
    "Process id",
    "The user it runs as",
    "CPU over the last 2 s, 100 % = one core (a process busy on 4 cores shows 400 %)",
    "Resident memory: what it holds in RAM",
    "The GPUs it is on (NVML's process lists)",
    "Its share of the GPU's time running kernels since the last reading (nvitop's %SM), summed over its GPUs: "
    "100 % = one GPU busy; blank where NVML gives no per-process figure",
    "GPU memory it holds over all GPUs, from NVML's process lists",
    "The traindeck run it belongs to (TRAINDECK_RUN_ID in its environment); the watched run's rows are highlighted",
    "How long it has run (nvitop's TIME): an old process holding a GPU is often one left behind",
    "The program and its arguments (the full command line in the row's tooltip)",
)
_NUMERIC = frozenset({0, 2, 3, 4, 5, 6, 8})
_RIGHT = int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
PID_ROLE = Qt.ItemDataRole.UserRole + 1
STOP_GRACE_S = 10.0  # as the Runs page's Stop: SIGINT, SIGTERM after this, then SIGKILL
SIGNAL_KEYS = {"SIGTERM": "T", "SIGINT": "I", "SIGKILL": "K"}  # nvitop's; with Shift: the process and its tree


def stop_run_in_store(run_id: str, grace_s: float = STOP_GRACE_S) -> list[str]:
    """The run's own Stop, as the Runs page asks it: its supervisor interrupts, then escalates (run off the UI
    thread: opening the store may wait for SQLite's lock)."""
    from traindeck.backend.core import run_store_path
    from traindeck.backend.runs import RunStore, stop_run

    with RunStore(run_store_path()) as store:
        try:
            return stop_run(store, run_id, grace_s=grace_s, wait=False).messages
        except KeyError:  # marked by a run of another run store (another TRAINDECK_HOME)
            return [f"run {run_id} is not in this window's run store: stop it where it was started"]


def elapsed_text(seconds: float) -> str:
    """How long a process has run, as ps's ELAPSED and nvitop's TIME: `4:05`, `1:02:03`, `3-01:02:03` (days)."""
    total = max(0, int(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours}:{minutes:02d}:{secs:02d}" if hours or days else f"{minutes}:{secs:02d}"
    if days:
        clock = f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    return clock


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
        self._text = [self._cells(p, depth) for p, depth in zip(self.table.rows, self.table.depths, strict=True)]
        self.endResetModel()

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        self.table.sort_by(PROCESS_SORT_KEYS[column], order == Qt.SortOrder.DescendingOrder)
        self.refresh()
        self.sorted_by.emit()

    def _cells(self, p: MachineProcess, depth: int) -> tuple[str, ...]:
        run = "" if p.run_id is None else self.run_labels.get(p.run_id, p.run_id)
        cpu = "-" if p.cpu_percent is None else f"{p.cpu_percent:.1f}"  # as htop: one decimal, aligned
        command = (p.command or p.cmdline) + (" <defunct>" if p.zombie else "")
        if depth:
            command = "   " * (depth - 1) + " └─ " + command
        return (str(p.pid), p.user, cpu, "-" if p.rss_bytes is None else format_value(p.rss_bytes, "B"),
                ",".join(str(i) for i in p.gpu_indices), "" if p.gpu_sm_percent is None else f"{p.gpu_sm_percent:.0f}",
                "" if p.gpu_memory_bytes is None else format_value(p.gpu_memory_bytes, "B"), run,
                "" if p.started_at is None or self.table.snapshot is None
                else elapsed_text(self.table.snapshot.t - p.started_at), command)

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
            if process.zombie:
                lines.append("Ended; its parent has not collected it yet (a zombie): it holds no memory")
            if process.run_id is not None:
                lines.append(f"Run {process.run_id}")
            return "\n".join(lines)
        return None


class ProcessesPanel(QWidget):
    """The machine's processes: a filter box and a summary line over the table, its actions in a context menu.
    `ctx` runs a run's Stop off the UI thread (without one, the menu offers signals only)."""

    def __init__(self, ctx: AppContext | None = None) -> None:
        super().__init__()
        self.ctx = ctx
        # Asks before a signal or a stop: (title, text, details) -> go ahead? Tests answer it themselves.
        self.confirm: Callable[[str, str, str], bool] = self._ask
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
        self.tree_box = QCheckBox("Tree")
        self.tree_box.setToolTip("Children under their parent (a launcher, then its ranks), siblings in the "
                                 "column's order (Ctrl+T)")
        self.tree_box.toggled.connect(self._set_tree)
        QShortcut(QKeySequence("Ctrl+T"), self, self.tree_box.toggle)
        self.action_line = QLabel()  # what the last signal or stop did, in one line
        self.action_line.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.action_line.setVisible(False)

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
        for column, sample in enumerate(("4194304", "username", "1234.5", "123.4 GiB", "0,1", "100",
                                         "GPU memory", "20261127-140649-6ab1", "12-23:59:59")):
            header.resizeSection(column, max(metrics.horizontalAdvance(sample),
                                             metrics.horizontalAdvance(COLUMNS[column])) + 24)
        self.model.sorted_by.connect(self._reselect)
        self._selected_pid: int | None = None
        self.view.selectionModel().selectionChanged.connect(self._remember_selection)
        self.view.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.view.customContextMenuRequested.connect(self._context_menu)
        self.view.installEventFilter(self)  # T, I, K (Shift: the tree) on the table, before its type-to-search
        self.menu: QMenu | None = None  # the last context menu shown

        top = QHBoxLayout()
        top.addWidget(self.filter_edit, 1)
        top.addWidget(self.tree_box)
        top.addSpacing(12)
        top.addWidget(self.summary, 2)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.view, 1)
        layout.addWidget(self.action_line)

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

    # --- acting on a process ---

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802
        if watched is self.view and event.type() == QEvent.Type.KeyPress and isinstance(event, QKeyEvent):
            modifiers = event.modifiers() & ~Qt.KeyboardModifier.KeypadModifier
            tree = modifiers == Qt.KeyboardModifier.ShiftModifier
            if tree or modifiers == Qt.KeyboardModifier.NoModifier:
                for name, key in SIGNAL_KEYS.items():
                    if event.key() == ord(key):  # Qt's key codes for letters are their upper-case ASCII
                        self.signal_selected(name, tree)
                        return True
        return super().eventFilter(watched, event)

    def selected_process(self) -> MachineProcess | None:
        return self.table.find(self._selected_pid) if self._selected_pid is not None else None

    def menu_for(self, process: MachineProcess) -> QMenu:
        """The context menu of a row: its run's Stop first (a run's process), then the signals, then copying."""
        menu = QMenu(self)
        if process.run_id is not None and self.ctx is not None:
            label = self.model.run_labels.get(process.run_id, process.run_id)
            stop = menu.addAction(f"Stop run “{label}” (through its supervisor)…")
            stop.setToolTip("As the Runs page's Stop: the script may save; SIGINT, then SIGTERM, then SIGKILL")
            stop.triggered.connect(lambda: self.stop_run(process))
            menu.addSeparator()
        refused = refusal(process.pid, process.uid)
        for tree in (False, True):
            for name, key in SIGNAL_KEYS.items():
                kids = f" and its children ({len(self.table.descendants(process.pid))})" if tree else ""
                action = QAction(f"{SIGNAL_WORDS[name]}{kids} ({name})…", menu)
                action.setShortcut(QKeySequence(f"Shift+{key}" if tree else key))
                action.setEnabled(refused is None)
                action.triggered.connect(lambda _=False, n=name, t=tree: self.signal_process(process, n, t))
                menu.addAction(action)
            menu.addSeparator()
        if refused is not None:
            note = menu.addAction(refused)
            note.setEnabled(False)
            menu.addSeparator()
        clipboard = QGuiApplication.clipboard()
        menu.addAction("Copy PID").triggered.connect(lambda: clipboard.setText(str(process.pid)))
        menu.addAction("Copy command line").triggered.connect(lambda: clipboard.setText(process.cmdline))
        menu.setToolTipsVisible(True)
        return menu

    def signal_selected(self, name: str, tree: bool = False) -> None:
        process = self.selected_process()
        if process is not None:
            self.signal_process(process, name, tree)

    def signal_process(self, process: MachineProcess, name: str, tree: bool = False) -> None:
        """Send `name` to the process (and its descendants with `tree`) once the person confirms."""
        plan = plan_signal(process.pid, name, tree)
        if not plan.allowed:
            self.say(plan.refused or f"PID {process.pid}: nothing to signal")
            return
        head = plan.targets[-1]
        reach = f" and {len(plan.targets) - 1} descendant{'s' if len(plan.targets) != 2 else ''}" \
            if len(plan.targets) > 1 else ""
        what = {"SIGTERM": "asks it to end (it may clean up)", "SIGINT": "interrupts it, as Ctrl+C would",
                "SIGKILL": "kills it at once: nothing is saved"}[name]
        details = "\n".join(f"PID {t.pid}: {t.command}" for t in reversed(plan.targets))
        if plan.skipped:
            details += f"\n({plan.skipped})"
        if not self.confirm(f"{SIGNAL_WORDS[name]} process",
                            f"Send {name} to PID {head.pid}{reach}?\n{head.command[:200]}\n\n{name} {what}.",
                            details):
            return
        self.say(send_signal(plan))

    def stop_run(self, process: MachineProcess) -> None:
        """The run's own Stop for a run's process, once the person confirms."""
        if process.run_id is None or self.ctx is None:
            return
        run_id = process.run_id
        label = self.model.run_labels.get(run_id, run_id)
        if not self.confirm("Stop run", f"Stop the run “{label}”?\nIts supervisor interrupts it (SIGINT; a script "
                            "with traindeck's companion saves first), then SIGTERM after "
                            f"{STOP_GRACE_S:g} s and SIGKILL if anything is left.", f"Run {run_id}"):
            return
        self.say(f"Stopping run {label}…")
        self.ctx.tasks.run(stop_run_in_store, run_id, done=lambda messages: self.say(
            "; ".join(messages) if messages else f"stop asked of run {label}"),
            failed=lambda error: self.say(f"Run {label} could not be stopped: {error}"))

    def say(self, line: str) -> None:
        self.action_line.setText(line)
        self.action_line.setVisible(True)

    def _ask(self, title: str, text: str, details: str) -> bool:
        box = QMessageBox(self)
        box.setIcon(QMessageBox.Icon.Warning)
        box.setWindowTitle(title)
        box.setText(text)
        box.setDetailedText(details)
        box.setStandardButtons(QMessageBox.StandardButton.Ok | QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        return box.exec() == QMessageBox.StandardButton.Ok

    def _context_menu(self, point: Any) -> None:
        index = self.view.indexAt(point)
        if not index.isValid():
            return
        self.view.selectRow(index.row())
        process = self.table.rows[index.row()]
        self._selected_pid = process.pid
        self.menu = self.menu_for(process)
        self.menu.popup(self.view.viewport().mapToGlobal(point))

    # --- inside ---

    def _set_tree(self, tree: bool) -> None:
        self.table.set_tree(tree)
        self._show()

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
