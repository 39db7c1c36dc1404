"""Environment variables for a run: a NAME / value table. Values of secret-looking names (tokens, keys,
passwords: backend.launch.environ's rules) are masked on screen, and `savable()` leaves out every value the backend
would mask, so those never reach QSettings or any other file."""

from __future__ import annotations

import re
from collections.abc import Mapping

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLineEdit,
    QPushButton,
    QTableWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.launch import is_secret_name, masked_env

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
SECRET_TIP = ("A secret-looking name: the value is hidden here and never saved to disk (enter it again after a "
              "restart). The run gets it; its command.json shows ***.")


class EnvTable(QWidget):
    changed = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.table = QTableWidget(0, 3)
        self.table.setHorizontalHeaderLabels(["Name", "Value", ""])
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Interactive)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.ResizeToContents)
        self.table.setColumnWidth(0, 180)
        self.table.verticalHeader().hide()
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.table.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.add_button = QPushButton("Add variable")
        self.add_button.clicked.connect(lambda: self.add_row("", "", focus=True))
        buttons = QHBoxLayout()
        buttons.addWidget(self.add_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.table, 1)
        layout.addLayout(buttons)

    # ---------------------------------------------------------------------------------------------- content
    def set_env(self, env: Mapping[str, str]) -> None:
        self.table.setRowCount(0)
        for name, value in env.items():
            self.add_row(name, value, emit=False)
        self.changed.emit()

    def add_row(self, name: str, value: str, *, focus: bool = False, emit: bool = True) -> int:
        row = self.table.rowCount()
        self.table.insertRow(row)
        name_edit, value_edit = QLineEdit(name), QLineEdit(value)
        name_edit.setPlaceholderText("NAME")
        value_edit.setPlaceholderText("value")
        for edit in (name_edit, value_edit):
            edit.setFrame(False)
            edit.textChanged.connect(self._edited)
        name_edit.editingFinished.connect(lambda e=name_edit: self._split_pasted(e))
        remove = QToolButton()
        remove.setText("✕")
        remove.setToolTip("Remove this variable")
        remove.clicked.connect(lambda _=False, e=name_edit: self._remove(e))
        self.table.setCellWidget(row, 0, name_edit)
        self.table.setCellWidget(row, 1, value_edit)
        self.table.setCellWidget(row, 2, remove)
        self._mask(row)
        if focus:
            name_edit.setFocus()
        if emit:
            self.changed.emit()
        return row

    def rows(self) -> list[tuple[str, str]]:
        out = []
        for row in range(self.table.rowCount()):
            name, value = self._edits(row)
            out.append((name.text().strip(), value.text()))
        return out

    def env(self) -> dict[str, str]:
        """The variables as the run gets them (rows without a name are left out; a later row wins)."""
        return {name: value for name, value in self.rows() if name}

    def problems(self) -> list[str]:
        seen: set[str] = set()
        found = []
        for name, value in self.rows():
            if not name:
                if value:
                    found.append("Environment variables: a row has a value but no name")
                continue
            if not _NAME.match(name):
                found.append(f"Environment variables: {name!r} is not a valid name (letters, digits and _, not "
                             "starting with a digit)")
            elif name in seen:
                found.append(f"Environment variables: {name} is given twice")
            seen.add(name)
        return found

    def savable(self) -> list[tuple[str, str]]:
        """(name, value) safe to write to disk: a value the backend masks (secret name, password in a URL) is
        replaced by "" so only the name is kept."""
        out = []
        for name, value in self.rows():
            if not name:
                continue
            out.append((name, value if masked_env({name: value})[name] == value else ""))
        return out

    def is_masked(self, name: str) -> bool:
        for row in range(self.table.rowCount()):
            name_edit, value_edit = self._edits(row)
            if name_edit.text().strip() == name:
                return value_edit.echoMode() != QLineEdit.EchoMode.Normal
        raise KeyError(name)

    def value_edit(self, name: str) -> QLineEdit:
        for row in range(self.table.rowCount()):
            name_edit, value_edit = self._edits(row)
            if name_edit.text().strip() == name:
                return value_edit
        raise KeyError(name)

    # ------------------------------------------------------------------------------------------- internals
    def _edits(self, row: int) -> tuple[QLineEdit, QLineEdit]:
        return self.table.cellWidget(row, 0), self.table.cellWidget(row, 1)  # type: ignore[return-value]

    def _row_of(self, widget: QWidget) -> int:
        for row in range(self.table.rowCount()):
            if self.table.cellWidget(row, 0) is widget or self.table.cellWidget(row, 1) is widget:
                return row
        return -1

    def _edited(self) -> None:
        sender = self.sender()
        if isinstance(sender, QWidget):
            row = self._row_of(sender)
            if row >= 0:
                self._mask(row)
        self.changed.emit()

    def _mask(self, row: int) -> None:
        name_edit, value_edit = self._edits(row)
        secret = is_secret_name(name_edit.text().strip())
        value_edit.setEchoMode(QLineEdit.EchoMode.Password if secret else QLineEdit.EchoMode.Normal)
        value_edit.setToolTip(SECRET_TIP if secret else "")
        if secret and not value_edit.text():
            value_edit.setPlaceholderText("secret: not saved, enter it for this session")
        else:
            value_edit.setPlaceholderText("value")

    def _split_pasted(self, name_edit: QLineEdit) -> None:
        # "NAME=value" typed or pasted into the name cell: split it, as a shell line would be read.
        text = name_edit.text()
        if "=" not in text:
            return
        row = self._row_of(name_edit)
        name, _, value = text.partition("=")
        value_edit = self._edits(row)[1]
        name_edit.setText(name.strip())
        if not value_edit.text():
            value_edit.setText(value)

    def _remove(self, name_edit: QLineEdit) -> None:
        row = self._row_of(name_edit)
        if row >= 0:
            self.table.removeRow(row)
            self.changed.emit()
