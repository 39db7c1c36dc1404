"""The Runs page's part for what a run leaves behind (issue 14): the Checkpoints tab beside the charts (checkpoints
with step, time, size; Resume, Open folder, Rerun, Save now, Bundle; where the run came from and its provenance),
and in the header the stop the run supports: "Stop and save" and "Save now" only when the script has traindeck's
companion.

The panel (gui/widgets/run_leftovers.py) reads on the thread pool. While a run goes it is read again with the
page's own poll, at most every LEFTOVERS_MS and only while the page is on screen: no timer of its own."""

from __future__ import annotations

import time
from typing import Any

from PySide6.QtWidgets import QLabel, QPushButton, QTabWidget, QWidget

from traindeck.backend.runs import SAVE_THEN_STOP, ViewChange
from traindeck.gui.pages.runs.shared import RunsPageShared
from traindeck.gui.theme import set_muted
from traindeck.gui.widgets.run_leftovers import RunLeftoversPanel

LEFTOVERS_MS = 5000  # a running run's checkpoints are listed again this often (a folder walk each time)


class RunLeftoversPart(RunsPageShared):
    leftovers: RunLeftoversPanel
    lower_tabs: QTabWidget
    save_now_button: QPushButton
    stop_kind_label: QLabel
    _leftovers_read_at: float

    def _build_stop_kind(self) -> None:
        """The header's widgets for the stop the run supports (built before the header is laid out)."""
        self.companion = False
        self._leftovers_read_at = 0.0
        self.save_now_button = QPushButton("Save now")
        self.save_now_button.setToolTip("Ask the script to save a checkpoint at its next step, without stopping "
                                        "(its traindeck companion does it)")
        self.save_now_button.clicked.connect(lambda: self.save_now())
        self.save_now_button.setVisible(False)
        self.stop_kind_label = QLabel()
        set_muted(self.stop_kind_label)

    def _build_leftovers(self, charts: QWidget) -> QTabWidget:
        """The tabs below the console: Charts, Checkpoints."""
        self.leftovers = RunLeftoversPanel(self.ctx.tasks, None)
        self.leftovers.setObjectName("checkpointsPanel")
        self.leftovers.message.connect(self.ctx.status.emit)
        self.leftovers.run_started.connect(self.ctx.run_started.emit)
        self.leftovers.loaded.connect(self._leftovers_loaded)
        self.leftovers.save_button.setVisible(False)  # the header's Save now is the one shown
        self.lower_tabs = QTabWidget()
        self.lower_tabs.setDocumentMode(True)
        self.lower_tabs.addTab(charts, "Charts")
        self.lower_tabs.addTab(self.leftovers, "Checkpoints")
        self.lower_tabs.currentChanged.connect(lambda _index: self._leftovers_due(force=True))
        return self.lower_tabs

    def _leftovers_opened(self, run_id: str) -> None:
        self.companion = False
        self.save_now_button.setVisible(False)
        self.stop_kind_label.clear()
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
        self.companion = data.get("stop") == SAVE_THEN_STOP
        record = self.record
        if record is not None:
            self._show_stop_kind(record)

    def _show_stop_kind(self, record: Any) -> None:
        """The header says which stop the run supports; Save now / Stop and save only with the companion."""
        running = record.state == "running"
        self.save_now_button.setVisible(running and self.companion)
        if not running:
            self.stop_kind_label.clear()
            return
        stopping = record.stop_requested_at is not None or self.watched.stop_pending
        if self.companion:
            self.stop_kind_label.setText("stop saves a checkpoint first")
            self.stop_kind_label.setToolTip("The script has traindeck's companion: Stop asks it to save a "
                                            "checkpoint and end by itself; signals follow only if it does not")
            if not stopping:
                self.stop_button.setText("Stop and save")
        else:
            self.stop_kind_label.setText("stop does not save")
            self.stop_kind_label.setToolTip("The script has no traindeck companion: Stop interrupts it as Ctrl+C "
                                            "would (SIGINT, then SIGTERM, then SIGKILL); what it learnt since its "
                                            "last checkpoint is lost unless it saves when interrupted")

    def save_now(self) -> None:
        record = self.record
        if record is None or record.state != "running" or not self.companion:
            return
        self.leftovers.save_now()
