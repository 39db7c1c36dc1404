"""History: every run with its state, duration, peak memory and speed; open one, or compare two side by side.

The list is `traindeck.backend.runs.control.history.RunHistory` read on the thread pool every few seconds while the page is
shown; a comparison is `traindeck.backend.runs.control.compare.compare_runs`, also off the UI thread. This module only
draws them.

The page's layout and its list; beside it, the runs table's model (history_table.py) and the comparison's drawing
(history_compare.py; the comparison itself is backend/runs/control/compare.py).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path
from typing import Any

from PySide6.QtCore import (
    QEvent,
    QItemSelection,
    QItemSelectionModel,
    QObject,
    QSortFilterProxyModel,
    Qt,
    QTimer,
)
from PySide6.QtGui import (
    QFontDatabase,
    QKeySequence,
    QShortcut,
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
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.runs import RunComparison, RunFigures, RunHistory
from traindeck.gui.context import AppContext
from traindeck.gui.pages.history.compare_panel import DiffHighlighter
from traindeck.gui.pages.history.leftovers_panel import HistoryLeftoversPart
from traindeck.gui.pages.history.run_table import COLUMNS, ID_ROLE, SORT_ROLE, RunsModel

REFRESH_MS = 3000


class HistoryPage(HistoryLeftoversPart):
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
        for button in (self.open_button, *self._build_leftovers(), self.compare_button, self.refresh_button):
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
        self.tabs.addTab(self.provenance_table, "Code and packages")
        panel.addWidget(self.tabs, 1)

        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self.table)
        splitter.addWidget(self.compare_panel)
        splitter.setStretchFactor(0, 2)
        splitter.setStretchFactor(1, 3)
        splitter.setChildrenCollapsible(False)
        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addWidget(self.chain_label)
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
        self._leftovers_selection(self.selected_ids())

    def open_selected(self) -> None:
        ids = self.selected_ids()
        if len(ids) == 1:
            self.ctx.open_run.emit(ids[0])

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
        from traindeck.backend.runs import create_demo_runs

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
