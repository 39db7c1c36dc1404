"""A form generated from a config section's description: one row per key, nested sections as groups.

The form edits the user's dict in place through traindeck.backend.config.editing, so keys it does not show are
never touched. "Unset" (the tool's default applies) is a state of its own: an empty field, or the first
"(default: ...)" entry of a choice, removes the key instead of writing the default into the file.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable
from typing import Any

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QApplication,
    QComboBox,
    QFormLayout,
    QGroupBox,
    QLabel,
    QLineEdit,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.config import (
    FieldSpec,
    FieldTextError,
    Message,
    PathT,
    Section,
    fields_of,
    form_keys,
    format_path,
    get_path,
    remove_path,
    set_path,
    text_from_value,
    value_from_text,
)

_UNSET = "(default"  # the first entry of every choice: "(default)" or "(default: VALUE)"


class ConfigForm(QWidget):
    """Edits `data` (the whole document) at `path` (where `section` sits in it)."""

    edited = Signal()  # the data was changed by typing
    input_rejected = Signal()  # typed text is not a value of its key (the data keeps its value; see input_errors)

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
        self._input_errors: dict[str, str] = {}  # key -> why the text typed there is not a value (data unchanged)
        layout = QFormLayout(self)
        layout.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        # One row per key, under the spelling the file uses (DeepSpeed accepts stage3_max_live_parameters and
        # max_live_parameters alike).
        for key in form_keys(self._specs, get_path(data, path) if path else data):
            self._add_row(layout, key, self._specs[key])
        self.refresh()

    # -------------------------------------------------------------------------------------------- building

    def _add_row(self, layout: QFormLayout, key: str, spec: FieldSpec) -> None:
        tip = f"{spec.help}\nAllowed: {spec.describe()}" + (f"\nApplies to: {spec.applies}" if spec.applies else "")
        if spec.kind == "section" and spec.section is not None:
            box = QGroupBox(f"{people_words(key)}  ({key})" if people_words(key).lower() != key.lower() else key)
            box.setToolTip(tip)
            inner = QVBoxLayout(box)
            child = ConfigForm(spec.section, self._data, self._path + (key,), box)
            child.edited.connect(self.edited)
            child.input_rejected.connect(self.input_rejected)
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
            # In a scrolled form the wheel must scroll the form, not change the value under the pointer.
            combo.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
            # Long choices ("max-autotune-no-cudagraphs") must not set the form's minimum width.
            combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
            combo.setMinimumContentsLength(12)
            combo.installEventFilter(self)
            editor = combo
        else:
            line = QLineEdit()
            if spec.default is not None:
                line.setPlaceholderText(f"default: {text_from_value(spec, spec.default)}")
            line.textEdited.connect(lambda text, k=key: self._typed(k, text))
            editor = line
        editor.setToolTip(tip)
        editor.setObjectName(format_path(self._path + (key,)))
        # The words people use, with the key as the file writes it beneath (what docs and error messages name).
        label = QLabel(f"{html.escape(people_words(key))}<br><small><code>{html.escape(key)}</code></small>")
        label.setTextFormat(Qt.TextFormat.RichText)
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
        for key in list(self._input_errors):
            self._input_errors.pop(key)
            self._note(key, None, "")
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
            self._input_errors[key] = str(exc)
            self._note(key, "error", str(exc))
            self.input_rejected.emit()
            return
        if self._input_errors.pop(key, None) is not None:
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
            if key in self._input_errors:  # what was typed is still wrong: that stays in front
                typed = self._input_errors[key]
                # The page hands the typed error back among the messages (the list shows it too): once here.
                self._note(key, "error", "\n".join(dict.fromkeys([typed] + [m.message for m in found])))
            elif found:
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
        note.setStyleSheet(note_style(severity, note))
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

    def filter_rows(self, visible: Callable[[PathT, FieldSpec], bool] | None) -> int:
        """Show the rows `visible(path, spec)` accepts (all with None); a section shows when it is accepted and
        has a row left to show. Returns the number of rows shown. Hidden keys stay in the data, untouched."""
        shown = 0
        for key, widgets in self._rows.items():
            spec = self._specs[key]
            path = self._path + (key,)
            on = visible is None or visible(path, spec)
            if spec.kind == "section" and spec.section is not None:
                inner = self.child(key).filter_rows(visible) if on else 0
                on = on and inner > 0
                shown += inner
            elif on:
                shown += 1
            for widget in widgets:
                if widget.isHidden() == on:  # only real changes: each one relayouts the form
                    widget.setVisible(on)
        return shown

    def set_data(self, data: dict[str, Any]) -> None:
        """Edit another document (the same section kind) from now on, and show its values."""
        self._bind(data)
        self.refresh()

    def _bind(self, data: dict[str, Any]) -> None:
        self._data = data
        for child in self._children:
            child._bind(data)

    @property
    def data(self) -> dict[str, Any]:
        return self._data

    def input_errors(self) -> list[Message]:
        """Keys whose typed text is not a value (the data keeps the previous one): errors until corrected."""
        out = [Message("error", format_path(self._path + (key,)), text) for key, text in self._input_errors.items()]
        for child in self._children:
            out += child.input_errors()
        return out

    def locate(self, path: PathT) -> QWidget | None:
        """The editor of the key at `path` (a path in the whole document), or the group of its deepest section
        shown here; None when the path is not in this form."""
        if tuple(path[: len(self._path)]) != tuple(self._path) or len(path) <= len(self._path):
            return None
        key = path[len(self._path)]
        if not isinstance(key, str) or key not in self._rows:
            return None
        spec = self._specs[key]
        if spec.kind == "section" and spec.section is not None:
            return self.child(key).locate(path) or self._rows[key][0]
        return self._editors.get(key)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Wheel and isinstance(watched, QComboBox) and not watched.hasFocus():
            parent = watched.parentWidget()
            if parent is not None:  # ignored there, Qt passes it up to the scroll area
                QApplication.sendEvent(parent, event)
            return True
        return super().eventFilter(watched, event)

    def editor(self, key: str) -> QWidget:
        return self._editors[key]

    def child(self, key: str) -> ConfigForm:
        path = self._path + (key,)
        return next(c for c in self._children if c._path == path)


# Words a key spells in short: written out or in their usual case.
_WORDS = {"gpu": "GPU", "gpus": "GPUs", "cpu": "CPU", "nvme": "NVMe", "fp16": "fp16", "bf16": "bf16", "fp32": "fp32",
          "fp8": "fp8", "dtype": "type", "lr": "learning rate", "io": "I/O", "aio": "async I/O", "num": "number of",
          "max": "max", "min": "min", "fsdp": "FSDP", "zero": "ZeRO", "zero3": "ZeRO-3", "mpi": "MPI", "tpu": "TPU",
          "ds": "DeepSpeed", "id": "ID", "ip": "IP", "dp": "data-parallel", "mp": "model-parallel", "sdp": "SDP",
          "nccl": "NCCL", "ep": "expert-parallel", "pp": "pipeline-parallel", "tp": "tensor-parallel",
          "deepspeed": "DeepSpeed", "stage3": "stage 3", "cuda": "CUDA", "hf": "HF"}


def people_words(key: str) -> str:
    """A key in words: "train_micro_batch_size_per_gpu" -> "Train micro batch size per GPU"."""
    words = [_WORDS.get(w.lower(), w) for w in key.replace("-", "_").split("_") if w]
    if not words:
        return key
    text = " ".join(words)
    if words[0] in ("fp16", "bf16", "fp32", "fp8"):  # a precision is written in lower case
        return text
    return text[0].upper() + text[1:]


def note_style(severity: str | None, widget: QWidget) -> str:
    """Message colours readable on the theme's background (dark red on white is unreadable on dark grey)."""
    if not severity:
        return ""
    dark = widget.palette().color(QPalette.ColorRole.Window).lightness() < 128
    colours = {"error": ("#c62828", "#ff8a80"), "warning": ("#8f5600", "#ffcc80")}  # 4.5:1 or more
    return f"color: {colours.get(severity, ('', ''))[1 if dark else 0]};"
