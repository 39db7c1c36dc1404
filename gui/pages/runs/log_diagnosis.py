"""The Runs page's "Diagnose a log…" dialog: the diagnosis traindeck gives its own runs, for a log from anywhere
(a colleague's paste, a cluster job's output file, a run started without traindeck), through the backend's
diagnose_logs, as `traindeck diagnose` gives it. A file is opened, dropped on the Runs page, or pasted; the exit
status is given where known. The reading runs off the GUI thread."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.runs import MEMORY_WORDS, LogDiagnosis, diagnose_logs
from traindeck.gui.tasks import Tasks
from traindeck.gui.widgets.message_list import MessageList

UNKNOWN_CODE = -1000  # the spin box's "not known" value (shown as its special text)


def _diagnose_text(text: str, exit_code: int | None) -> LogDiagnosis:
    """A pasted log diagnosed as a file is: written to a private temporary file, read, removed."""
    fd, name = tempfile.mkstemp(prefix="traindeck-pasted-", suffix=".log")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as handle:
            handle.write(text)
        return diagnose_logs([Path(name)], exit_code)
    finally:
        os.unlink(name)


class LogDiagnosisDialog(QDialog):
    """Pick or paste a log, give its exit status if known, read the diagnosis."""

    def __init__(self, tasks: Tasks, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Diagnose a log")
        self.resize(760, 560)
        self.tasks = tasks
        self.found: LogDiagnosis | None = None
        self.path = QLineEdit()
        self.path.setPlaceholderText("A log file: a job's output, torchrun's or DeepSpeed's console, ...")
        browse = QPushButton("Open…")
        browse.clicked.connect(self._browse)
        self.paste = QPlainTextEdit()
        self.paste.setPlaceholderText("…or paste the log here (its end is what counts: the last MiB is read)")
        self.paste.setTabChangesFocus(True)
        self.exit_code = QSpinBox()
        self.exit_code.setRange(UNKNOWN_CODE, 255)
        self.exit_code.setSpecialValueText("not known")
        self.exit_code.setValue(UNKNOWN_CODE)
        self.exit_code.setToolTip("The exit status the job ended with: torchrun and accelerate exit 1 after a rank "
                                  "fails; DeepSpeed's launcher exits with the rank's code (247 for a SIGKILL)")
        self.verdict = MessageList()
        self.status = QLabel()
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.diagnose_button = buttons.addButton("&Diagnose", QDialogButtonBox.ButtonRole.ActionRole)
        self.diagnose_button.setDefault(True)
        self.diagnose_button.clicked.connect(self.diagnose)
        buttons.rejected.connect(self.reject)

        row = QHBoxLayout()
        row.addWidget(QLabel("Log file:"))
        row.addWidget(self.path, 1)
        row.addWidget(browse)
        code_row = QHBoxLayout()
        code_row.addWidget(QLabel("Exit status:"))
        code_row.addWidget(self.exit_code)
        code_row.addStretch(1)
        layout = QVBoxLayout(self)
        layout.addLayout(row)
        layout.addWidget(self.paste, 1)
        layout.addLayout(code_row)
        layout.addWidget(self.status)
        layout.addWidget(self.verdict)
        layout.addWidget(buttons)

    def open_file(self, path: str) -> None:
        """Diagnose this file now (a log dropped on the Runs page)."""
        self.path.setText(path)
        self.diagnose()

    def _browse(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open a log", self.path.text() or str(Path.home()),
                                              "Logs (*.log *.txt *.out *.err);;All files (*)")
        if path:
            self.path.setText(path)

    def diagnose(self) -> None:
        code = None if self.exit_code.value() == UNKNOWN_CODE else self.exit_code.value()
        path, text = self.path.text().strip(), self.paste.toPlainText()
        if not path and not text.strip():
            self.status.setText("Open a log file or paste a log first.")
            return
        self.diagnose_button.setEnabled(False)
        self.status.setText("Reading the log…")
        if path:
            self.tasks.run(diagnose_logs, [Path(path)], code, done=self._show, failed=self._failed)
        else:
            self.tasks.run(_diagnose_text, text, code, done=self._show, failed=self._failed)

    def _failed(self, error: str) -> None:
        self.diagnose_button.setEnabled(True)
        self.status.setText(f"Could not read the log: {error.splitlines()[0] if error else 'unknown error'}")

    def _show(self, found: LogDiagnosis) -> None:
        self.diagnose_button.setEnabled(True)
        self.found = found
        d = found.diagnosis
        self.status.setText("")
        items = [("error" if d.kind not in ("succeeded",) else "ok", d.summary)]
        memory = MEMORY_WORDS.get(d.memory or "")
        if memory:
            items.append(("note", f"memory: {memory}"))
        items += [("note", line) for line in d.evidence]
        items += [("note", f"then (a consequence): {line}") for line in d.follow_ons]
        if d.advice:
            items.append(("warning", d.advice))
        items += [("note", f"not known from a log alone: {line}") for line in found.unknown]
        self.verdict.set_items(items)
        self.verdict.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
