"""A path typed or picked: a line edit with a "Browse…" button that opens a file or folder dialog."""

from __future__ import annotations

import os

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QLineEdit, QPushButton, QWidget


class PathField(QWidget):
    """`mode` "file" or "dir". `start_dir` (a callable) says where the dialog opens when the field is empty."""

    textChanged = Signal(str)
    picked = Signal(str)  # a path chosen in the dialog (also emits textChanged)

    def __init__(self, mode: str = "file", *, caption: str = "", name_filter: str = "", placeholder: str = "",
                 parent: QWidget | None = None):
        super().__init__(parent)
        self.mode, self.caption, self.name_filter = mode, caption, name_filter
        self.start_dir = lambda: ""
        self.line = QLineEdit()
        self.line.setPlaceholderText(placeholder)
        self.line.setClearButtonEnabled(True)
        self.line.textChanged.connect(self.textChanged)
        self.button = QPushButton("Browse…")
        self.button.clicked.connect(self.browse)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.line, 1)
        layout.addWidget(self.button)
        self.setFocusProxy(self.line)

    def text(self) -> str:
        return self.line.text().strip()

    def setText(self, text: str) -> None:
        self.line.setText(text)

    def setToolTip(self, tip: str) -> None:  # the tooltip belongs on the field people point at
        self.line.setToolTip(tip)

    def browse(self) -> None:
        current = os.path.expanduser(self.text())
        start = current if current and os.path.exists(current) else (self.start_dir() or os.path.expanduser("~"))
        if self.mode == "dir":
            chosen = QFileDialog.getExistingDirectory(self, self.caption or "Choose a folder", start)
        else:
            chosen, _ = QFileDialog.getOpenFileName(self, self.caption or "Choose a file", start, self.name_filter)
        if chosen:
            self.line.setText(chosen)
            self.picked.emit(chosen)
