"""The Configure page's questions about presets, each a modal box over `parent`: a new preset's name (asked again
until it is one a preset may have, and no built-in's), what to do with unsaved changes, yes or no before something
is replaced or deleted; and a failure reported both in the status bar and in a warning box."""

from __future__ import annotations

from PySide6.QtWidgets import QInputDialog, QLineEdit, QMessageBox, QWidget

from traindeck.backend.presets import BUILTIN_NAMES, PresetError, check_name
from traindeck.gui.context import AppContext, Draft

Button = QMessageBox.StandardButton


def is_builtin(name: str | None) -> bool:
    """`name` is one of the built-in presets' (read-only) names."""
    return bool(name) and str(name).lower() in {b.lower() for b in BUILTIN_NAMES}


def valid_name(name: str) -> bool:
    """`name` may name a preset."""
    try:
        check_name(name)
    except PresetError:
        return False
    return True


def ask_name(parent: QWidget, title: str, label: str, suggestion: str) -> str | None:
    """A preset name typed by the user (None: cancelled); a name that is refused says why and is asked again."""
    text = suggestion
    while True:
        text, ok = QInputDialog.getText(parent, title, label, QLineEdit.EchoMode.Normal, text)
        if not ok:
            return None
        name = text.strip()
        try:
            check_name(name)
            if is_builtin(name):
                raise PresetError(f"'{name}' is the name of a built-in preset; choose another name")
        except PresetError as exc:
            QMessageBox.warning(parent, title, str(exc))
            continue
        return name


def ask_unsaved(parent: QWidget, draft: Draft) -> QMessageBox.StandardButton:
    """Save, Discard or Cancel, for the draft's unsaved changes."""
    name = draft.saved_as or (draft.preset.name if draft.preset else "the preset")
    return QMessageBox.question(
        parent, "Unsaved changes", f"The preset '{name}' has unsaved changes. Save them?",
        Button.Save | Button.Discard | Button.Cancel, Button.Save)


def confirm(parent: QWidget, title: str, text: str) -> bool:
    """Yes or No, No the default."""
    return QMessageBox.question(parent, title, text, Button.Yes | Button.No, Button.No) == Button.Yes


def report_error(parent: QWidget, ctx: AppContext, title: str, text: str) -> None:
    """A failure said twice: its first line in the status bar, the whole of it in a warning box."""
    ctx.status.emit(f"{title}: {text.splitlines()[0] if text else ''}")
    QMessageBox.warning(parent, title, text)
