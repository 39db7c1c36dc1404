"""What a run leaves behind, as one panel: its checkpoints (step, kind, written, size), where it came from (parent,
checkpoint resumed from, git commit), the stop it supports, and Resume / Rerun / Save now / Bundle.

A part of the Runs page; every backend call runs on the context's thread pool, and its outcome (or its
failure, as one line) is said through `message` for the status bar.
"""

from __future__ import annotations

import time
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.runs.control import leftbehind

COLUMNS = ("Step", "Kind", "Written", "Size", "Path")


def size_text(n: float) -> str:
    """A byte count in binary units (512 B, 1.5 MiB, ...)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def one_line(text: str) -> str:
    """A failure as the status bar shows it: its first line, never a traceback."""
    first = next((line.strip() for line in str(text).splitlines() if line.strip()), "")
    return first or "failed (no reason given)"


def provenance_text(provenance: dict[str, Any] | None) -> str:
    """The run's provenance in a few lines: versions, host, packages (the git line is in the origin line)."""
    if not provenance:
        return "Provenance: not recorded (yet): it is captured beside the run in its first minute."
    versions = provenance.get("versions") or {}
    names = (("python", "Python"), ("torch", "torch"), ("cuda", "CUDA"), ("nccl", "NCCL"), ("deepspeed", "DeepSpeed"),
             ("accelerate", "accelerate"), ("transformers", "transformers"))
    shown = [f"{label} {versions[key]}" for key, label in names if versions.get(key)]
    host = provenance.get("host") or {}
    gpus = host.get("gpus") or []
    machine = [str(host.get("hostname") or "?"), f"{host.get('cpus') or '?'} CPUs"]
    if host.get("ram_bytes"):
        machine.append(f"{size_text(float(host['ram_bytes']))} RAM")
    machine.append(f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''}" + (f" ({gpus[0].get('name')})" if gpus else ""))
    lines = ["Versions: " + (", ".join(shown) or "-"), "Host: " + ", ".join(machine)]
    if provenance.get("packages_file"):
        lines.append(f"Packages: pip freeze kept as {provenance['packages_file']} in the run folder")
    return "\n".join(lines)


class RunLeftoversPanel(QWidget):
    run_started = Signal(str)  # a run id started from here (resume, rerun)
    message = Signal(str)  # one line for the status bar
    loaded = Signal(dict)  # what was read of the run (the page shows the stop it supports from it)

    def __init__(self, tasks: Any, store_path: str | None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.tasks, self.store_path = tasks, store_path
        self.run_id: str | None = None
        self.data: dict[str, Any] | None = None
        self.refreshing = False  # a read is on its way: a refresh asked meanwhile waits for it
        self.busy = ""  # the long job under way ("bundle", "resume", "rerun"), one at a time
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        self.origin = QLabel("")
        self.origin.setWordWrap(True)
        self.origin.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.stop_kind = QLabel("")
        self.details = QLabel("")
        self.details.setWordWrap(True)
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        header = self.table.horizontalHeader()
        header.setStretchLastSection(True)
        for column in range(len(COLUMNS) - 1):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        buttons = QHBoxLayout()
        self.resume_button = QPushButton("Resume from checkpoint")
        self.resume_button.setToolTip("Start the run again from the selected checkpoint (default: the newest)")
        self.rerun_button = QPushButton("Rerun")
        self.rerun_button.setToolTip("Start the same run again: same script, arguments, configs, launcher")
        self.open_button = QPushButton("Open folder")
        self.open_button.setToolTip("Open the selected checkpoint's folder (default: the newest) in the file manager")
        self.save_button = QPushButton("Save now")
        self.save_button.setToolTip("Ask the script to save a checkpoint at its next step (needs traindeck's "
                                    "companion in the script)")
        self.bundle_button = QPushButton("Bundle for a bug report…")
        self.bundle_button.setToolTip("One zip for a bug report: logs, configs, command, diagnosis, provenance, "
                                      "resource summary; secrets masked")
        for button in (self.resume_button, self.open_button, self.rerun_button, self.save_button, self.bundle_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        layout.addWidget(self.origin)
        layout.addWidget(self.stop_kind)
        layout.addWidget(self.details)
        layout.addWidget(self.table, 1)
        layout.addLayout(buttons)
        self.resume_button.clicked.connect(self.resume)
        self.rerun_button.clicked.connect(self.rerun)
        self.open_button.clicked.connect(self.open_folder)
        self.save_button.clicked.connect(self.save_now)
        self.bundle_button.clicked.connect(self.ask_bundle)
        self._update_buttons()

    # -- showing a run ----------------------------------------------------------------------------------------
    def show_run(self, run_id: str) -> None:
        if run_id != self.run_id:
            self.data = None
            self.table.setRowCount(0)
            self.origin.setText("Reading…")
            self.stop_kind.clear()
            self.details.clear()
            self._update_buttons()
        self.run_id = run_id
        self.refreshing = False  # an answer on its way is about the run before: dropped in _shown
        self.refresh()

    def refresh(self, record: Any = None) -> None:
        """Read the run's checkpoints and origin again (the page calls this while the run goes, on screen only,
        with the run's record as its poll read it: then the store is not opened for it)."""
        if self.run_id is None or self.refreshing:
            return
        self.refreshing = True
        run_id = self.run_id
        self.tasks.run(leftbehind.run_leftovers, self.store_path, run_id, record,
                       done=lambda data: self._shown(run_id, data), failed=lambda text: self._read_failed(run_id, text))

    def _read_failed(self, run_id: str, text: str) -> None:
        if run_id == self.run_id:
            self.refreshing = False
            self.message.emit(f"Checkpoints of {run_id}: {one_line(text)}")

    def _shown(self, run_id: str, data: dict[str, Any]) -> None:
        if run_id != self.run_id:
            return  # another run was chosen meanwhile
        self.refreshing = False
        if data == self.data:
            return  # nothing new (read every few seconds while the run goes)
        selected = self.selected_checkpoint()
        self.data = data
        checkpoints = list(reversed(data["checkpoints"]))  # newest first
        self.table.setRowCount(len(checkpoints))
        for row, c in enumerate(checkpoints):
            cells = ("" if c["step"] is None else str(c["step"]), c["kind"] + (" (latest)" if c["latest"] else ""),
                     time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(c["time"])), size_text(c["bytes"]), c["path"])
            for column, text in enumerate(cells):
                self.table.setItem(row, column, QTableWidgetItem(text))
            if c["path"] == selected:
                self.table.selectRow(row)
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
        self.stop_kind.setText("Stop: save a checkpoint, then stop (the script has traindeck's companion)"
                               if data.get("stop") == "save-then-stop"
                               else "Stop: signals (SIGINT, SIGTERM, SIGKILL; the script has no traindeck companion)")
        self.details.setText(provenance_text(data.get("provenance")))
        self._update_buttons()
        self.loaded.emit(data)

    def _update_buttons(self) -> None:
        data = self.data or {}
        running = data.get("state") == "running"
        idle = not self.busy
        self.resume_button.setEnabled(bool(data.get("checkpoints")) and not running and idle)
        self.open_button.setEnabled(bool(data.get("checkpoints")))
        self.rerun_button.setEnabled(bool(data) and idle)
        companion = running and data.get("stop") == "save-then-stop"
        self.save_button.setVisible(companion)  # only where the script can do it
        self.save_button.setEnabled(companion)
        self.bundle_button.setEnabled(bool(data) and idle)

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
        if self.run_id is None or self.busy:
            return
        run_id = self.run_id
        what = f"resuming {run_id} from {checkpoint or 'its newest checkpoint'}" if how == "resume" else \
            f"starting {run_id} again"
        self._begin(how, what[0].upper() + what[1:] + "…")
        self.tasks.run(leftbehind.relaunch_run, self.store_path, run_id, how, checkpoint,
                       done=lambda new_id: self._relaunched(how, run_id, new_id),
                       failed=lambda text: self._end(f"Cannot {how} {run_id}: {one_line(text)}"))

    def _relaunched(self, how: str, run_id: str, new_id: str) -> None:
        self._end(f"{'Resumed' if how == 'resume' else 'Reran'} {run_id} as run {new_id}")
        self.run_started.emit(new_id)

    def _begin(self, busy: str, text: str) -> None:
        self.busy = busy
        self._update_buttons()
        self.message.emit(text)

    def _end(self, text: str) -> None:
        self.busy = ""
        self._update_buttons()
        self.message.emit(text)

    def open_folder(self) -> None:
        from PySide6.QtCore import QUrl
        from PySide6.QtGui import QDesktopServices

        path = self.selected_checkpoint() or self.newest_checkpoint()
        if path:
            QDesktopServices.openUrl(QUrl.fromLocalFile(path))

    def newest_checkpoint(self) -> str | None:
        checkpoints = (self.data or {}).get("checkpoints") or []
        return str(checkpoints[-1]["path"]) if checkpoints else None

    def save_now(self) -> None:
        if self.data is None:
            return
        from traindeck.backend.runs import request_save

        run_dir = str(self.data.get("run_dir") or "")
        self.tasks.run(request_save, run_dir,
                       done=lambda ok: self.message.emit("Asked the script to save a checkpoint at its next step"
                                                         if ok else "The script has no traindeck companion: "
                                                         "it cannot be asked to save"),
                       failed=lambda text: self.message.emit(f"Cannot ask for a save: {one_line(text)}"))

    def ask_bundle(self) -> None:
        if self.run_id is None:
            return
        target, _ = QFileDialog.getSaveFileName(self, "Bundle for a bug report", f"{self.run_id}.zip", "Zip (*.zip)")
        if target:
            self.write_bundle(target)

    def write_bundle(self, target: str) -> None:
        if self.run_id is None or self.busy:
            return
        self._begin("bundle", f"Writing the bug-report bundle of {self.run_id} to {target}…")
        self.tasks.run(leftbehind.bundle_run, self.store_path, str(self.run_id), target,
                       done=lambda size: self._end(f"wrote {target} ({size_text(size)})"),
                       failed=lambda text: self._end(f"Cannot write the bundle: {one_line(text)}"))
