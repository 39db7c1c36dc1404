"""History: every run with its state, duration, peak memory and speed; open one, or compare two to eight side by side.

The list is `traindeck.backend.runs.control.history.RunHistory` read on the thread pool every few seconds while the page is
shown, with what the trials' records say of the trials its runs are candidates of (`backend.trials.history_rows`); a comparison is `traindeck.backend.runs.control.compare.compare_runs`, also off the UI thread. This module only
draws them.

The page is an assembly of three panels it wires together: the runs table (run_table.py), the comparison of the
selected runs (compare_panel.py, with their curves overlaid: overlay_panel.py) and what a run leaves behind (leftovers_panel.py: Rerun, Bundle, its line of work). The page
keeps the run store, reads it, and holds the bar of buttons and the count of runs. Each read also goes to the
comparison (`ComparePanel.runs_read`): while a compared run is live its figures and curves follow it, at the list's
pace and only while the page is seen (the poller pauses off screen).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path
from typing import Any

from PySide6.QtCore import QByteArray, Qt
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QApplication, QHBoxLayout, QLabel, QPushButton, QSplitter, QVBoxLayout

from traindeck.backend.runs import MAX_COMPARED, RunFigures, RunHistory, TrialSummary
from traindeck.backend.trials import history_rows
from traindeck.gui.context import AppContext
from traindeck.gui.pages.base import Page
from traindeck.gui.pages.history.compare_panel import ComparePanel
from traindeck.gui.pages.history.leftovers_panel import LeftoversPanel
from traindeck.gui.pages.history.run_table import RunTable
from traindeck.gui.polling import Poller

REFRESH_MS = 3000
SPLITTER_KEY = "history/splitter"  # the list and comparison's heights, as the user left them


class HistoryPage(Page):
    key = "history"
    title = "History"
    order = 60

    def __init__(self, ctx: AppContext):
        super().__init__(ctx)
        self.history = RunHistory()
        self._refreshing = False
        self._demo_dir: str | None = None
        self.poller = Poller(self, self.refresh, live_ms=REFRESH_MS)  # paused while the page is not seen
        self._build()

    # ------------------------------------------------------------------------------------------------ layout
    def _build(self) -> None:
        # Parented by the layouts below, in the order they are placed: the tab order follows the page's layout.
        self.run_table = RunTable(settings=self.ctx.settings)
        self.compare_panel = ComparePanel(self.ctx, self._store_path)
        self.leftovers = LeftoversPanel(self.ctx, self.run_table, self._store_path)

        bar = QHBoxLayout()
        self.count_label = QLabel("Reading runs…")
        bar.addWidget(self.count_label, 1)
        self.open_button = QPushButton("&Open")
        self.open_button.setToolTip("Show the selected run in the run view: log, charts, config (Enter or double-click)")
        self.open_button.clicked.connect(self.open_selected)
        self.compare_button = QPushButton("&Compare")
        self.compare_button.setToolTip(f"Select two to {MAX_COMPARED} runs, then compare their configs, figures and "
                                       "curves side by side (Ctrl+D)")
        self.compare_button.clicked.connect(self.compare_selected)
        self.refresh_button = QPushButton("&Refresh")
        self.refresh_button.setToolTip("Read the runs again now (F5); the list also refreshes every few seconds")
        self.refresh_button.clicked.connect(self.refresh)
        for widget in (self.open_button, self.leftovers, self.compare_button, self.refresh_button):
            bar.addWidget(widget)
        self.chain_label = QLabel("")
        self.chain_label.setWordWrap(True)
        self.chain_label.setVisible(False)
        self.group_note = QLabel("")  # a sweep's row selected: the runs it leaves out of the comparison
        self.group_note.setWordWrap(True)
        self.group_note.setVisible(False)
        self._compared_group: str | None = None  # the group's row whose runs were last compared on selecting it

        self.run_table.open_requested.connect(self.open_selected)
        self.run_table.selection_changed.connect(self._selection_changed)
        self.leftovers.line_of_work.connect(self._show_line_of_work)
        for keys, slot in (("Ctrl+D", self.compare_selected), ("F5", self.refresh),
                           (QKeySequence.StandardKey.Find, self.run_table.filter_box.focus)):
            shortcut = QShortcut(QKeySequence(keys), self)
            shortcut.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
            shortcut.activated.connect(slot)

        self.splitter = splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self.run_table)
        splitter.addWidget(self.compare_panel)
        splitter.setStretchFactor(0, 2)
        splitter.setStretchFactor(1, 3)
        splitter.setChildrenCollapsible(False)
        # The list's share of the height: as the user left it, else 2 : 3 (the panels' size hints would leave
        # the list a handful of rows).
        state = self.ctx.settings.value(SPLITTER_KEY)
        if not (isinstance(state, QByteArray) and not state.isEmpty() and splitter.restoreState(state)):
            splitter.setSizes([400, 600])
        splitter.splitterMoved.connect(
            lambda *_args: self.ctx.settings.setValue(SPLITTER_KEY, self.splitter.saveState()))
        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addWidget(self.chain_label)
        layout.addWidget(self.group_note)
        layout.addWidget(splitter, 1)
        self._selection_changed(self.run_table.selected_ids())

    def _store_path(self) -> Path:
        return self.history.store_path

    # ------------------------------------------------------------------------------------------------ list
    def page_shown(self) -> None:
        self.refresh()
        self.poller.start()
        focus = QApplication.focusWidget()
        if focus is None or not self.isAncestorOf(focus):
            # Keys after Ctrl+6 go to the runs' table (arrows, Enter, Ctrl+D), not to the page list.
            self.run_table.table.setFocus(Qt.FocusReason.ShortcutFocusReason)

    def hideEvent(self, event: Any) -> None:  # only a shown list is kept fresh
        self.poller.off_screen()
        super().hideEvent(event)

    def window_minimised(self, minimised: bool) -> None:  # nor one in a minimised window
        if minimised:
            self.poller.off_screen()
        else:
            self.page_shown()

    def refresh(self) -> None:
        if self._refreshing:
            return  # the previous read is still running (a slow disk): skip this tick
        self._refreshing = True
        history = self.history
        self.ctx.tasks.run(history_rows, history, done=lambda read: self._loaded(history, *read),
                           failed=lambda error: self._load_failed(history, error))

    def _loaded(self, history: RunHistory, rows: list[RunFigures],
                trials: dict[str, TrialSummary] | None = None) -> None:
        self._refreshing = False
        if history is not self.history:
            return  # the store was switched (demo) while this read ran
        self.run_table.show_rows(rows, trials)
        self.compare_panel.runs_read(rows)  # a live compared run's figures and curves follow
        running = sum(1 for r in rows if r.state == "running")
        self.count_label.setText(
            "No runs yet: launch one from the Launch page." if not rows else
            f"{len(rows)} run{'s' if len(rows) != 1 else ''}" + (f", {running} running" if running else ""))

    def _load_failed(self, history: RunHistory, error: str) -> None:
        self._refreshing = False
        if history is self.history:
            self.count_label.setText(f"Cannot read the runs: {error.splitlines()[0] if error else 'unknown error'}")

    def _selection_changed(self, ids: list[str]) -> None:
        """Buttons for the selection; a trial's or sweep's row chosen alone compares its runs at once (a sweep's on
        the Overlay tab), and says how many runs of a sweep were left out."""
        self.open_button.setEnabled(len(ids) == 1)
        self.compare_button.setEnabled(2 <= len(ids) <= MAX_COMPARED)
        group = self.run_table.selected_group()
        key, left_out = group if group is not None else ("", 0)
        self.group_note.setText(
            f"This sweep's {len(ids)} best runs by {self.run_table.history.metric} are compared; {left_out} more "
            f"left out (at most {MAX_COMPARED} side by side: Ctrl+click runs to choose others)." if left_out else "")
        self.group_note.setVisible(bool(left_out))
        if group is None:
            self._compared_group = None
        elif key != self._compared_group and 2 <= len(ids) <= MAX_COMPARED:  # not again when a refresh reselects
            self._compared_group = key
            self.compare_selected()
            if key.startswith("sweep:"):
                self.compare_panel.show_overlay()

    def _show_line_of_work(self, text: str | None) -> None:
        if text is not None:
            self.chain_label.setText(text)
        self.chain_label.setVisible(text is not None)

    def open_selected(self) -> None:
        ids = self.run_table.selected_ids()
        if len(ids) == 1:
            self.ctx.open_run.emit(ids[0])

    def compare_selected(self) -> None:
        self.run_table.select_current_if_none()
        self.compare_panel.compare_selected(self.run_table.selected_ids(), self.run_table.rows)

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
            self.run_table.select_runs(wanted)
            self.compare_selected()

        self.ctx.tasks.run(self.history.rows, done=loaded)

    def shutdown(self) -> None:
        self.poller.stop()
        # On the pool: closing waits for a read in flight; the window waits for the pool before it exits.
        self.ctx.tasks.run(self._close, self.history, self._demo_dir)

    @staticmethod
    def _close(history: RunHistory, demo_dir: str | None) -> None:
        history.close()
        if demo_dir:
            shutil.rmtree(demo_dir, ignore_errors=True)


PAGE = HistoryPage
