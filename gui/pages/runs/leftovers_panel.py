"""The Runs page's Checkpoints tab: what the open run leaves behind, beside the charts (checkpoints with
step, time, size; Resume, Open folder, Rerun, Bundle; where the run came from and its provenance).

The panel (gui/widgets/run_leftovers.py) reads on the thread pool. While a run goes it is read again with the
page's own poll, at most every LEFTOVERS_MS and only while the page is on screen: no timer of its own. What it
reads says whether the script has traindeck's companion, which decides the stop the header offers."""

from __future__ import annotations

import time
from typing import Any

from PySide6.QtCore import Signal

from traindeck.backend.runs import SAVE_THEN_STOP, ViewChange, WatchedRun
from traindeck.gui.pages.runs.source import RunsSource
from traindeck.gui.tasks import Tasks
from traindeck.gui.widgets.run_leftovers import RunLeftoversPanel

LEFTOVERS_MS = 5000  # a running run's checkpoints are listed again this often (a folder walk each time)


class CheckpointsTab(RunLeftoversPanel):
    """The left-behind panel for the Runs page's open run, read again after the page's polls."""

    listed = Signal(int, bool)  # the open run's checkpoints were read: how many, and whether it has the companion

    def __init__(self, tasks: Tasks, watched: WatchedRun, source: RunsSource) -> None:
        super().__init__(tasks, None)
        self._watched, self._source = watched, source
        self._read_at = 0.0  # monotonic time of the last read
        self.setObjectName("checkpointsPanel")
        self.save_button.setVisible(False)  # the header's Save now is the one shown
        self.loaded.connect(self._loaded)

    def open_run(self, run_id: str) -> None:
        """Show this run's checkpoints (this machine's files only: nothing over SSH yet)."""
        if self._source.remote is not None:
            return
        self.store_path = str(self._source.store_path) if self._source.store_path is not None else None
        self.show_run(run_id)
        self._read_at = time.monotonic()

    def news(self, change: ViewChange, on_screen: bool) -> None:
        """After each poll of the open run: list the checkpoints again while it goes (on screen, every
        LEFTOVERS_MS), and once more when it ends (its last save)."""
        if change.ended_now:
            self.due(on_screen, force=True)
        elif change.record.state == "running":
            self.due(on_screen)

    def due(self, on_screen: bool, force: bool = False) -> None:
        if self._watched.run_id is None or not on_screen or self._source.remote is not None:
            return
        now = time.monotonic()
        if force or now - self._read_at >= LEFTOVERS_MS / 1000:
            self._read_at = now
            self.refresh(self._watched.record)

    def _loaded(self, data: dict[str, Any]) -> None:
        if data.get("id") != self._watched.run_id:
            return
        self.listed.emit(len(data.get("checkpoints") or []), data.get("stop") == SAVE_THEN_STOP)
