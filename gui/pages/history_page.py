"""History: every run with its state, duration, peak memory and speed; open one, or compare two side by side.

The list is `traindeck.backend.runs.history.RunHistory` read on the thread pool every few seconds while the page is
shown; a comparison is `traindeck.backend.runs.compare.compare_runs`, also off the UI thread. This module only
draws them.

Size (~520 lines): the page's layout, its two tables and the comparison's drawing; the comparison itself is
backend/runs/compare.py.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
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
    QTimer,
)
from PySide6.QtGui import (
    QBrush,
    QColor,
    QFont,
    QFontDatabase,
    QIcon,
    QKeySequence,
    QShortcut,
    QSyntaxHighlighter,
    QTextCharFormat,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QStyle,
    QTableView,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.runs.compare import RunComparison, compare_runs
from traindeck.backend.runs.history import (
    RunFigures,
    RunHistory,
    format_bytes,
    format_duration,
    format_rate,
    format_seconds_per_step,
)
from traindeck.backend.runs.store import RunStore
from traindeck.gui.context import AppContext
from traindeck.gui.pages.base import Page
from traindeck.gui.widgets.message_list import tone
from traindeck.gui.widgets.run_state import state_icon

REFRESH_MS = 3000
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


def _compare(store_path: Path, id_a: str, id_b: str) -> RunComparison:
    with RunStore(store_path) as store:
        return compare_runs(store, id_a, id_b)


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


def setting_name(key: str) -> str:
    """A difference's key as the table names it: the command's arguments in words, config keys as written."""
    if key.startswith("launch.argv["):
        return f"command: argument {int(key[len('launch.argv['):-1]) + 1}"
    if key.startswith("launch.argv "):
        return f"command: {key[len('launch.argv '):]}"
    return key


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


class DiffHighlighter(QSyntaxHighlighter):
    """Colours a unified diff in `view`: additions, removals, hunk headers (in the theme's colours)."""

    def __init__(self, view: QPlainTextEdit):
        super().__init__(view.document())
        self.view = view

    def highlightBlock(self, text: str) -> None:
        fmt = QTextCharFormat()
        if text.startswith(("+++", "---")):
            fmt.setFontWeight(QFont.Weight.Bold)
        elif text.startswith(("+", "-")):
            fmt.setForeground(QColor(tone("ok" if text[0] == "+" else "error", self.view)))
        elif text.startswith("@@"):
            fmt.setFontItalic(True)
        else:
            return
        self.setFormat(0, len(text), fmt)


class HistoryPage(Page):
    key = "history"
    title = "History"
    order = 60

    def __init__(self, ctx: AppContext):
        super().__init__(ctx)
        self.history = RunHistory()
        self.comparison: RunComparison | None = None
        self._refreshing = False
        self._sized = False
        self._demo_dir: str | None = None
        self._timer = QTimer(self)
        self._timer.setInterval(REFRESH_MS)
        self._timer.timeout.connect(self.refresh)
        self._build()

    # ------------------------------------------------------------------------------------------------ layout
    def _build(self) -> None:
        bar = QHBoxLayout()
        self.count_label = QLabel("Reading runs…")
        bar.addWidget(self.count_label, 1)
        self.open_button = QPushButton("&Open")
        self.open_button.setToolTip("Show the selected run in the run view: log, charts, config (Enter or double-click)")
        self.open_button.clicked.connect(self.open_selected)
        self.compare_button = QPushButton("&Compare")
        self.compare_button.setToolTip("Select two runs, then compare their configs and figures side by side (Ctrl+D)")
        self.compare_button.clicked.connect(self.compare_selected)
        self.refresh_button = QPushButton("&Refresh")
        self.refresh_button.setToolTip("Read the runs again now (F5); the list also refreshes every few seconds")
        self.refresh_button.clicked.connect(self.refresh)
        for button in (self.open_button, self.compare_button, self.refresh_button):
            bar.addWidget(button)

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
        self.table.doubleClicked.connect(lambda _index: self.open_selected())
        self.table.selectionModel().selectionChanged.connect(self._selection_changed)

        for keys, slot in (("Return", self.open_selected), ("Enter", self.open_selected)):
            shortcut = QShortcut(QKeySequence(keys), self.table)
            shortcut.setContext(Qt.ShortcutContext.WidgetShortcut)
            shortcut.activated.connect(slot)
        for keys, slot in (("Ctrl+D", self.compare_selected), ("F5", self.refresh)):
            shortcut = QShortcut(QKeySequence(keys), self)
            shortcut.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
            shortcut.activated.connect(slot)

        # The comparison, below the list.
        self.compare_panel = QWidget()
        panel = QVBoxLayout(self.compare_panel)
        panel.setContentsMargins(0, 0, 0, 0)
        self.compare_title = QLabel("Select two runs and press Compare to see them side by side.")
        self.compare_title.setWordWrap(True)
        self.compare_title.setTextFormat(Qt.TextFormat.RichText)
        panel.addWidget(self.compare_title)
        self.tabs = QTabWidget()
        self.figures_table = self._side_by_side(("", "A", "B", "B vs A"))
        self.config_table = self._side_by_side(("Setting", "A", "B"))
        self.diff_view = QPlainTextEdit()
        self.diff_view.setReadOnly(True)
        self.diff_view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.diff_view.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.diff_view.setPlaceholderText("The configs' unified diff appears here.")
        self._highlighter = DiffHighlighter(self.diff_view)
        self.tabs.addTab(self.figures_table, "Figures")
        self.tabs.addTab(self.config_table, "Config differences")
        self.tabs.addTab(self.diff_view, "Unified diff")
        panel.addWidget(self.tabs, 1)

        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self.table)
        splitter.addWidget(self.compare_panel)
        splitter.setStretchFactor(0, 2)
        splitter.setStretchFactor(1, 3)
        splitter.setChildrenCollapsible(False)
        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addWidget(splitter, 1)
        self._selection_changed()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.table and event.type() == QEvent.Type.Resize:
            self._fit_name_column()
        return super().eventFilter(watched, event)

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

    def _side_by_side(self, headers: tuple[str, ...]) -> QTableWidget:
        table = QTableWidget(0, len(headers))
        table.setHorizontalHeaderLabels(list(headers))
        table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        table.verticalHeader().setVisible(False)
        table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 8)
        table.setWordWrap(False)
        header = table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        return table

    # ------------------------------------------------------------------------------------------------ list
    def page_shown(self) -> None:
        self.refresh()
        self._timer.start()

    def hideEvent(self, event: Any) -> None:  # only a shown list is kept fresh
        self._timer.stop()
        super().hideEvent(event)

    def window_minimised(self, minimised: bool) -> None:  # nor one in a minimised window
        if minimised:
            self._timer.stop()
        else:
            self.page_shown()

    def refresh(self) -> None:
        if self._refreshing:
            return  # the previous read is still running (a slow disk): skip this tick
        self._refreshing = True
        history = self.history
        self.ctx.tasks.run(history.rows, done=lambda rows: self._loaded(history, rows),
                           failed=lambda error: self._load_failed(history, error))

    def _loaded(self, history: RunHistory, rows: list[RunFigures]) -> None:
        self._refreshing = False
        if history is not self.history:
            return  # the store was switched (demo) while this read ran
        selected = self.selected_ids()
        if self.model.set_rows(rows) or not self._sized:
            self._size_columns()
        if selected and self.selected_ids() != selected:
            self.select_runs(selected)
        running = sum(1 for r in rows if r.state == "running")
        self.count_label.setText(
            "No runs yet: launch one from the Launch page." if not rows else
            f"{len(rows)} run{'s' if len(rows) != 1 else ''}" + (f", {running} running" if running else ""))

    def _load_failed(self, history: RunHistory, error: str) -> None:
        self._refreshing = False
        if history is self.history:
            self.count_label.setText(f"Cannot read the runs: {error.splitlines()[0] if error else 'unknown error'}")

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

    def _selection_changed(self, *_args: Any) -> None:
        count = len(self.table.selectionModel().selectedRows())
        self.open_button.setEnabled(count == 1)
        self.compare_button.setEnabled(count == 2)

    def open_selected(self) -> None:
        ids = self.selected_ids()
        if len(ids) == 1:
            self.ctx.open_run.emit(ids[0])

    # ------------------------------------------------------------------------------------------------ compare
    def compare_selected(self) -> None:
        ids = self.selected_ids()
        if len(ids) != 2:
            self.compare_title.setText("Select exactly two runs to compare (Ctrl+click the second).")
            return
        by_id = {r.run_id: r for r in self.model.rows}
        # The older run is A: "B vs A" then reads as what changed since.
        a, b = sorted(ids, key=lambda i: by_id[i].created_at if i in by_id else 0)
        self.compare(a, b)

    def compare(self, id_a: str, id_b: str) -> None:
        self.compare_title.setText("Comparing…")
        self.ctx.tasks.run(_compare, self.history.store_path, id_a, id_b, done=self._show_comparison,
                           failed=lambda error: self.compare_title.setText(
                               f"Cannot compare: {error.splitlines()[0] if error else 'unknown error'}"))

    def _show_comparison(self, result: RunComparison) -> None:
        self.comparison = result
        a, b = result.a, result.b
        self.compare_title.setText(
            f"<b>A</b>: {a.name or a.run_id} <span style='color:gray'>({a.run_id})</span> &nbsp;·&nbsp; "
            f"<b>B</b>: {b.name or b.run_id} <span style='color:gray'>({b.run_id})</span>"
            + (f"<br>{'; '.join(result.problems)}" if result.problems else ""))

        rows = [(f.what, f.a, f.b, f.change) for f in result.figures]
        if result.metrics:
            rows.append(("Final metrics", "", "", ""))
            rows += [(f"  {m.what}", m.a, m.b, m.change) for m in result.metrics]
        self._fill(self.figures_table, rows, bold_rows={len(result.figures)} if result.metrics else set())
        differing = [(setting_name(d.key), d.text("a"), d.text("b")) for d in result.differences]
        self._fill(self.config_table, differing)
        self.tabs.setTabText(1, f"Config differences ({len(differing)})")
        self.config_table.setToolTip(f"{result.same} settings are the same in both runs")
        self.diff_view.setPlainText(result.unified_diff or "The two runs' config files are the same.")

    def _fill(self, table: QTableWidget, rows: Sequence[tuple[str, ...]], bold_rows: set[int] | None = None) -> None:
        table.setRowCount(len(rows))
        for r, values in enumerate(rows):
            for c, text in enumerate(values):
                item = QTableWidgetItem(text)
                item.setToolTip(text)
                if bold_rows and r in bold_rows:
                    font = item.font()
                    font.setBold(True)
                    item.setFont(font)
                table.setItem(r, c, item)

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self.model.restyle()  # state and diff colours follow the theme
            self._highlighter.rehighlight()

    # ------------------------------------------------------------------------------------------------ hooks
    def load_demo(self) -> None:
        """A few finished runs written to a store of their own (never the user's), two of them compared."""
        self._demo_dir = tempfile.mkdtemp(prefix="traindeck-demo-history-")
        atexit.register(shutil.rmtree, self._demo_dir, True)  # screenshots quit without closing the window
        root = Path(self._demo_dir)
        from traindeck.backend.runs.demo_history import create_demo_runs

        self.ctx.tasks.run(create_demo_runs, root / "runs.sqlite3", root, done=self._demo_ready)

    def _demo_ready(self, ids: list[str]) -> None:
        old = self.history
        self.history = RunHistory(Path(self._demo_dir or ".") / "runs.sqlite3", mark_lost=False)  # no supervisors
        self.ctx.tasks.run(old.close)
        self._refreshing = False
        wanted = ids[:2]

        def loaded(rows: list[RunFigures]) -> None:
            self._loaded(self.history, rows)
            self.select_runs(wanted)
            self.compare_selected()

        self.ctx.tasks.run(self.history.rows, done=loaded)

    def shutdown(self) -> None:
        self._timer.stop()
        # On the pool: closing waits for a read in flight; the window waits for the pool before it exits.
        self.ctx.tasks.run(self._close, self.history, self._demo_dir)

    @staticmethod
    def _close(history: RunHistory, demo_dir: str | None) -> None:
        history.close()
        if demo_dir:
            shutil.rmtree(demo_dir, ignore_errors=True)


PAGE = HistoryPage
