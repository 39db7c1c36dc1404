"""A run list's filter box (History's table, the Runs page's list): the text typed, remembered per page, read as
`traindeck.backend.runs.parse_filter` reads it (a substring, or a /regex/), and a note beside it: how many runs are
shown ("4 of 31 runs"), or why a /regex/ is not one. The list it filters asks `filter` and listens to `changed`,
and names itself (`lead_to`) so that Down in the box goes on into it, as in a browser's or an editor's search box."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent, QObject, QSettings, Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QBoxLayout, QLabel, QLineEdit, QSizePolicy, QWidget

from traindeck.backend.runs import RunFilter, count_text, parse_filter
from traindeck.gui.widgets.message_list import tone

TIP = ("Show only the runs whose name, id, script, preset, state or tags (sweep, swept values, trial) hold this "
       "text, case ignored; write /like this/ for a regular expression (Ctrl+F)")


class RunFilterBox(QWidget):
    """A line edit and its note; `filter` is the text as parsed, `changed` carries it after each edit."""

    changed = Signal(object)  # RunFilter

    def __init__(self, settings: QSettings | None, key: str, *, note_below: bool = False,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._settings, self._key = settings, key
        self.edit = QLineEdit()
        self.edit.setPlaceholderText("Filter runs (Ctrl+F)")
        self.edit.setClearButtonEnabled(True)
        self.edit.setToolTip(TIP)
        self.note = QLabel("")
        self.note.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.note.setVisible(False)
        if note_below:  # a narrow list: the note wraps rather than widening it
            self.note.setWordWrap(True)
            self.note.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        layout = QBoxLayout(QBoxLayout.Direction.TopToBottom if note_below else QBoxLayout.Direction.LeftToRight, self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.edit, 1)
        layout.addWidget(self.note)
        self._count: tuple[int, int] | None = None
        text = str(settings.value(key, "") or "") if settings is not None else ""
        self.filter: RunFilter = parse_filter(text)
        self.edit.setText(text)
        self._show_note()
        self.edit.textChanged.connect(self._edited)
        self._list: QWidget | None = None
        self._arrive: Callable[[], None] | None = None
        self.edit.installEventFilter(self)

    def lead_to(self, widget: QWidget, arrive: Callable[[], None] | None = None) -> None:
        """Down (or Page Down) in the box moves the keyboard into `widget`, the list the box filters; `arrive` then
        makes a row current where none shown is (the first run the filter shows)."""
        self._list, self._arrive = widget, arrive

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802
        if (watched is self.edit and self._list is not None and event.type() == QEvent.Type.KeyPress
                and isinstance(event, QKeyEvent) and event.key() in (Qt.Key.Key_Down, Qt.Key.Key_PageDown)
                and event.modifiers() == Qt.KeyboardModifier.NoModifier):
            self._list.setFocus(Qt.FocusReason.OtherFocusReason)
            if self._arrive is not None:
                self._arrive()
            return True
        return super().eventFilter(watched, event)

    def focus(self) -> None:
        """Ctrl+F: into the box, its text selected (typing replaces it)."""
        self.edit.setFocus(Qt.FocusReason.ShortcutFocusReason)
        self.edit.selectAll()

    def show_count(self, shown: int, total: int) -> None:
        """The note says how many of the runs the filter shows (nothing while it hides none)."""
        self._count = (shown, total)
        self._show_note()

    def _edited(self, text: str) -> None:
        self.filter = parse_filter(text)
        if self._settings is not None:
            self._settings.setValue(self._key, text)
        self._show_note()
        self.changed.emit(self.filter)

    def _show_note(self) -> None:
        found = self.filter
        if found.error:
            self.note.setText(found.error)
            self.note.setStyleSheet(f"color: {tone('error', self)}")
            self.edit.setToolTip(f"{found.error}\n\n{TIP}")
        else:
            self.note.setText(count_text(*self._count) if found.active and self._count is not None else "")
            self.note.setStyleSheet("")
            self.edit.setToolTip(TIP)
        self.note.setVisible(bool(self.note.text()))
