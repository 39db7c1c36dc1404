"""What a run leaves behind, as one panel: its checkpoints (step, kind, written, size), where it came from (parent,
checkpoint resumed from, git commit), the stop it supports, and Resume / Rerun / Save now / Bundle.

A separate widget for the Runs page (issue 14); every backend call runs on the context's thread pool.
"""

from __future__ import annotations

import time
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.runs import leftbehind

COLUMNS = ("Step", "Kind", "Written", "Size", "Path")


def size_text(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


class RunLeftoversPanel(QWidget):
    run_started = Signal(str)  # a run id started from here (resume, rerun)
    message = Signal(str)  # one line for the status bar

    def __init__(self, tasks: Any, store_path: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.tasks, self.store_path = tasks, store_path
        self.run_id: str | None = None
        self.data: dict[str, Any] | None = None
        layout = QVBoxLayout(self)
        self.origin = QLabel("")
        self.origin.setWordWrap(True)
        self.stop_kind = QLabel("")
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setStretchLastSection(True)
        buttons = QHBoxLayout()
        self.resume_button = QPushButton("Resume from checkpoint")
        self.resume_button.setToolTip("Start the run again from the selected checkpoint (default: the newest)")
        self.rerun_button = QPushButton("Rerun")
        self.save_button = QPushButton("Save now")
        self.save_button.setToolTip("Ask the script to save a checkpoint at its next step (needs traindeck's "
                                    "companion in the script)")
        self.bundle_button = QPushButton("Bundle for a bug report…")
        for button in (self.resume_button, self.rerun_button, self.save_button, self.bundle_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        layout.addWidget(self.origin)
        layout.addWidget(self.stop_kind)
        layout.addWidget(self.table, 1)
        layout.addLayout(buttons)
        self.resume_button.clicked.connect(self.resume)
        self.rerun_button.clicked.connect(self.rerun)
        self.save_button.clicked.connect(self.save_now)
        self.bundle_button.clicked.connect(self.ask_bundle)
        self._update_buttons()

    # -- showing a run ----------------------------------------------------------------------------------------
    def show_run(self, run_id: str) -> None:
        self.run_id = run_id
        self.refresh()

    def refresh(self) -> None:
        if self.run_id is None:
            return
        run_id = self.run_id
        self.tasks.run(leftbehind.run_leftovers, self.store_path, run_id,
                       done=lambda data: self._shown(run_id, data), failed=self.message.emit)

    def _shown(self, run_id: str, data: dict[str, Any]) -> None:
        if run_id != self.run_id:
            return  # another run was chosen meanwhile
        self.data = data
        checkpoints = list(reversed(data["checkpoints"]))  # newest first
        self.table.setRowCount(len(checkpoints))
        for row, c in enumerate(checkpoints):
            cells = ("" if c["step"] is None else str(c["step"]), c["kind"] + (" (latest)" if c["latest"] else ""),
                     time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(c["time"])), size_text(c["bytes"]), c["path"])
            for column, text in enumerate(cells):
                self.table.setItem(row, column, QTableWidgetItem(text))
        parts = []
        if data.get("parent"):
            parts.append(f"Resumed from {data['resumed_from']} of run {data['parent']}" if data.get("resumed_from")
                         else f"Rerun of {data['parent']}")
        git = (data.get("provenance") or {}).get("git")
        if git:
            parts.append(f"git {str(git.get('commit'))[:12]} on {git.get('branch')}"
                         + (" with uncommitted changes" if git.get("dirty") else ""))
        if not data["checkpoints"]:
            parts.append("No checkpoint written (yet).")
        self.origin.setText(" · ".join(parts))
        self.stop_kind.setText("Stop: save a checkpoint, then stop" if data.get("stop") == "save-then-stop"
                               else "Stop: signals (the script has no traindeck companion)")
        self._update_buttons()

    def _update_buttons(self) -> None:
        data = self.data or {}
        running = data.get("state") == "running"
        self.resume_button.setEnabled(bool(data.get("checkpoints")) and not running)
        self.rerun_button.setEnabled(bool(data))
        self.save_button.setEnabled(running and data.get("stop") == "save-then-stop")
        self.bundle_button.setEnabled(bool(data))

    def selected_checkpoint(self) -> str | None:
        rows = self.table.selectionModel().selectedRows()
        if not rows:
            return None
        item = self.table.item(rows[0].row(), len(COLUMNS) - 1)
        return item.text() if item is not None else None

    # -- actions ----------------------------------------------------------------------------------------------
    def resume(self) -> None:
        self._relaunch("resume", self.selected_checkpoint())

    def rerun(self) -> None:
        self._relaunch("rerun", None)

    def _relaunch(self, how: str, checkpoint: str | None) -> None:
        if self.run_id is None:
            return
        self.tasks.run(leftbehind.relaunch_run, self.store_path, self.run_id, how, checkpoint,
                       done=self.run_started.emit, failed=self.message.emit)

    def save_now(self) -> None:
        if self.data is None:
            return
        from traindeck.backend.runs.savestop import request_save

        run_dir = str(self.data.get("run_dir") or "")
        self.tasks.run(request_save, run_dir,
                       done=lambda ok: self.message.emit("asked the script to save a checkpoint" if ok else
                                                         "the script has no traindeck companion"),
                       failed=self.message.emit)

    def ask_bundle(self) -> None:
        if self.run_id is None:
            return
        target, _ = QFileDialog.getSaveFileName(self, "Bundle for a bug report", f"{self.run_id}.zip", "Zip (*.zip)")
        if target:
            self.write_bundle(target)

    def write_bundle(self, target: str) -> None:
        self.tasks.run(leftbehind.bundle_run, self.store_path, str(self.run_id), target,
                       done=lambda size: self.message.emit(f"wrote {target} ({size_text(size)})"),
                       failed=self.message.emit)
