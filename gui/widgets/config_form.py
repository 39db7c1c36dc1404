"""A form generated from a config section's description: one row per key, nested sections as groups.

The form edits the user's dict in place through traindeck.backend.config.editing, so keys it does not show are
never touched. "Unset" (the tool's default applies) is a state of its own: an empty field, or the first
"(default: ...)" entry of a choice, removes the key instead of writing the default into the file.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QFormLayout, QGroupBox, QLabel, QLineEdit, QVBoxLayout, QWidget

from traindeck.backend.config.editing import (
    FieldTextError,
    get_path,
    remove_path,
    set_path,
    text_from_value,
    value_from_text,
)
from traindeck.backend.config.messages import Message, PathT, format_path
from traindeck.backend.config.schema import FieldSpec, Section, fields_of

_UNSET = "(default"  # the first entry of every choice: "(default)" or "(default: VALUE)"


class ConfigForm(QWidget):
    """Edits `data` (the whole document) at `path` (where `section` sits in it)."""

    edited = Signal()

    def __init__(self, section: type[Section], data: dict[str, Any], path: PathT = (), parent: QWidget | None = None):
        super().__init__(parent)
        self._data = data
        self._path = path
        self._editors: dict[str, QWidget] = {}
        self._notes: dict[str, QLabel] = {}
        self._rows: dict[str, tuple[QWidget, ...]] = {}
        self._specs = fields_of(section)
        self._children: list[ConfigForm] = []
        self._updating = False
        layout = QFormLayout(self)
        layout.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        for key, spec in self._specs.items():
            self._add_row(layout, key, spec)
        self.refresh()

    # -------------------------------------------------------------------------------------------- building

    def _add_row(self, layout: QFormLayout, key: str, spec: FieldSpec) -> None:
        tip = f"{spec.help}\nAllowed: {spec.describe()}" + (f"\nApplies to: {spec.applies}" if spec.applies else "")
        if spec.kind == "section" and spec.section is not None:
            box = QGroupBox(key)
            box.setToolTip(tip)
            inner = QVBoxLayout(box)
            child = ConfigForm(spec.section, self._data, self._path + (key,), box)
            child.edited.connect(self.edited)
            inner.addWidget(child)
            self._children.append(child)
            layout.addRow(box)
            self._rows[key] = (box,)
            return
        editor: QWidget
        if spec.kind in ("bool", "choice"):
            combo = QComboBox()
            default = "" if spec.default is None else f": {text_from_value(spec, spec.default)}"
            combo.addItem(f"(default{default})")
            options = ["true", "false"] if spec.kind == "bool" else [text_from_value(spec, c) for c in spec.choices]
            combo.addItems(options)
            combo.setEditable(spec.also_text or spec.auto)
            if spec.auto:
                combo.addItem("auto")
            combo.currentTextChanged.connect(lambda text, k=key: self._typed(k, text))
            editor = combo
        else:
            line = QLineEdit()
            if spec.default is not None:
                line.setPlaceholderText(f"default: {text_from_value(spec, spec.default)}")
            line.textEdited.connect(lambda text, k=key: self._typed(k, text))
            editor = line
        editor.setToolTip(tip)
        editor.setObjectName(format_path(self._path + (key,)))
        label = QLabel(key)
        label.setToolTip(tip)
        note = QLabel()
        note.setWordWrap(True)
        note.hide()
        column = QWidget()
        column_layout = QVBoxLayout(column)
        column_layout.setContentsMargins(0, 0, 0, 0)
        column_layout.addWidget(editor)
        column_layout.addWidget(note)
        layout.addRow(label, column)
        self._editors[key] = editor
        self._notes[key] = note
        self._rows[key] = (label, column)

    # -------------------------------------------------------------------------------------------- model <-> view

    def refresh(self) -> None:
        """Show the values now in the data (after a load, an undo, or an edit elsewhere)."""
        self._updating = True
        try:
            for key, editor in self._editors.items():
                spec = self._specs[key]
                value = get_path(self._data, self._path + (key,))
                text = text_from_value(spec, value)
                if isinstance(editor, QComboBox):
                    index = editor.findText(text) if text else 0
                    if index >= 0:
                        editor.setCurrentIndex(index)
                    else:
                        editor.setEditText(text)
                elif isinstance(editor, QLineEdit):
                    editor.setText(text)
        finally:
            self._updating = False
        for child in self._children:
            child.refresh()

    def _typed(self, key: str, text: str) -> None:
        if self._updating:
            return
        spec = self._specs[key]
        path = self._path + (key,)
        if text.startswith(_UNSET):
            text = ""
        try:
            value = value_from_text(spec, text)
        except FieldTextError as exc:
            self._note(key, "error", str(exc))
            return
        self._note(key, None, "")
        if value is None and not (text.strip() == "null" and spec.nullable):
            remove_path(self._data, path)
        else:
            set_path(self._data, path, value)
        self.edited.emit()

    # -------------------------------------------------------------------------------------------- messages

    def show_messages(self, messages: Iterable[Message]) -> None:
        """Put each validation message beside the key it is about (deepest matching row)."""
        by_path: dict[str, list[Message]] = {}
        for message in messages:
            by_path.setdefault(message.path, []).append(message)
        self._apply(by_path)

    def _apply(self, by_path: dict[str, list[Message]]) -> None:
        for key in self._notes:
            found = by_path.get(format_path(self._path + (key,)), [])
            if found:
                worst = "error" if any(m.severity == "error" for m in found) else "warning"
                self._note(key, worst, "\n".join(m.message for m in found))
            else:
                self._note(key, None, "")
        for child in self._children:
            child._apply(by_path)

    def _note(self, key: str, severity: str | None, text: str) -> None:
        note = self._notes[key]
        note.setText(text)
        note.setProperty("severity", severity or "")
        note.setStyleSheet({"error": "color: #c62828;", "warning": "color: #b26a00;"}.get(severity or "", ""))
        note.setVisible(bool(text))

    def note_text(self, key: str) -> str:
        """The message shown beside `key` ('' when none): for tests and accessibility."""
        return self._notes[key].text() if key in self._notes else ""

    # -------------------------------------------------------------------------------------------- what applies

    def show_only_for_stage(self, stage: int | None) -> None:
        """Hide keys that have no effect at this ZeRO stage (they stay in the data, untouched)."""
        for key, widgets in self._rows.items():
            spec = self._specs[key]
            visible = stage is None or not spec.stages or stage in spec.stages
            for widget in widgets:
                widget.setVisible(visible)
        for child in self._children:
            child.show_only_for_stage(stage)

    def editor(self, key: str) -> QWidget:
        return self._editors[key]

    def child(self, key: str) -> ConfigForm:
        path = self._path + (key,)
        return next(c for c in self._children if c._path == path)
