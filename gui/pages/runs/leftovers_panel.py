"""The Runs page's part for what a run leaves behind (issue 14): the Checkpoints tab beside the charts (checkpoints
with step, time, size; Resume, Open folder, Rerun, Save now, Bundle; where the run came from and its provenance),
and in the header the stop the run supports: "Stop and save" and "Save now" only when the script has traindeck's
companion.

The panel (gui/widgets/run_leftovers.py) reads on the thread pool. While a run goes it is read again with the
page's own poll, at most every LEFTOVERS_MS and only while the page is on screen: no timer of its own."""

from __future__ import annotations

import time
from typing import Any

from PySide6.QtWidgets import QTabWidget, QWidget

from traindeck.backend.runs import SAVE_THEN_STOP, ViewChange
from traindeck.gui.pages.runs.shared import RunsPageShared
from traindeck.gui.widgets.run_leftovers import RunLeftoversPanel

LEFTOVERS_MS = 5000  # a running run's checkpoints are listed again this often (a folder walk each time)


class RunLeftoversPart(RunsPageShared):
    leftovers: RunLeftoversPanel
    lower_tabs: QTabWidget
    _leftovers_read_at: float

    def _build_leftovers(self, charts: QWidget) -> QTabWidget:
        """The tabs below the console: Charts, Checkpoints."""
        self._leftovers_read_at = 0.0
        self.leftovers = RunLeftoversPanel(self.ctx.tasks, None)
        self.leftovers.setObjectName("checkpointsPanel")
        self.leftovers.message.connect(self.ctx.status.emit)
        self.leftovers.run_started.connect(self.ctx.run_started.emit)
        self.leftovers.loaded.connect(self._leftovers_loaded)
        self.leftovers.save_button.setVisible(False)  # the header's Save now is the one shown
        self.stop_panel.save_now_asked.connect(self.leftovers.save_now)
        self.lower_tabs = QTabWidget()
        self.lower_tabs.setDocumentMode(True)
        self.lower_tabs.addTab(charts, "Charts")
        self.lower_tabs.addTab(self.leftovers, "Checkpoints")
        self.lower_tabs.currentChanged.connect(lambda _index: self._leftovers_due(force=True))
        return self.lower_tabs

    def _leftovers_opened(self, run_id: str) -> None:
        self.lower_tabs.setTabText(1, "Checkpoints")
        self.lower_tabs.setTabEnabled(1, self.source.remote is None)  # read from this machine's files: not over SSH yet
        if self.source.remote is not None:
            self.lower_tabs.setCurrentIndex(0)
            return
        self.leftovers.store_path = str(self.source.store_path) if self.source.store_path is not None else None
        self.leftovers.show_run(run_id)
        self._leftovers_read_at = time.monotonic()

    def _leftovers_news(self, change: ViewChange) -> None:
        """After each poll of the open run: list the checkpoints again while it goes (on screen, every
        LEFTOVERS_MS), and once more when it ends (its last save)."""
        if change.ended_now:
            self._leftovers_due(force=True)
        elif change.record.state == "running":
            self._leftovers_due()

    def _leftovers_due(self, force: bool = False) -> None:
        if self.run_id is None or not self.on_screen() or self.source.remote is not None:
            return
        now = time.monotonic()
        if force or now - self._leftovers_read_at >= LEFTOVERS_MS / 1000:
            self._leftovers_read_at = now
            self.leftovers.refresh(self.record)

    def _leftovers_loaded(self, data: dict[str, Any]) -> None:
        if data.get("id") != self.run_id:
            return
        count = len(data.get("checkpoints") or [])
        self.lower_tabs.setTabText(1, f"Checkpoints ({count})" if count else "Checkpoints")
        self.stop_panel.set_companion(data.get("stop") == SAVE_THEN_STOP)
