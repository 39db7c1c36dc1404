"""Questions in a message box whose every button has an Alt key.

Qt's own texts give Yes and No theirs ("&Yes", "&No") but not Save or Discard, so a person at the keyboard had to
Tab to Discard; here Save is Alt+S and Discard Alt+D (Escape is Cancel, Enter the default)."""

from __future__ import annotations

from PySide6.QtWidgets import QMessageBox, QWidget

Button = QMessageBox.StandardButton
KEYED = {Button.Save: "&Save", Button.Discard: "&Discard"}


def question_box(parent: QWidget | None, title: str, text: str, buttons: Button, default: Button) -> QMessageBox:
    """The box, not yet shown (tests drive it); `ask` shows it."""
    box = QMessageBox(QMessageBox.Icon.Question, title, text, buttons, parent)
    box.setDefaultButton(default)
    for which, label in KEYED.items():
        button = box.button(which)
        if button is not None:
            button.setText(label)
    return box


def ask(parent: QWidget | None, title: str, text: str, buttons: Button, default: Button) -> Button:
    """The button chosen (Escape: Cancel where there is one)."""
    return Button(question_box(parent, title, text, buttons, default).exec())
