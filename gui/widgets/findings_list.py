"""Validation messages as a clickable list under a header that counts them: errors are visible at a glance, and a
click (or Enter) on one asks to jump to the key it is about."""

from __future__ import annotations

from collections.abc import Iterable

from PySide6.QtCore import QEvent, QRect, Qt, Signal
from PySide6.QtGui import QColor, QResizeEvent
from PySide6.QtWidgets import QLabel, QListWidget, QListWidgetItem, QSizePolicy, QStyle, QVBoxLayout, QWidget

from traindeck.backend.config import Message
from traindeck.gui.widgets.message_list import tone

_PATH_ROLE = Qt.ItemDataRole.UserRole


class FindingsList(QWidget):
    MAX_HEIGHT = 240
    jump = Signal(str)  # the dotted path of the message the user picked ("" for the whole preset)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.header = QLabel()
        self.header.setObjectName("findingsHeader")
        self.header.setTextFormat(Qt.TextFormat.RichText)
        self.list = QListWidget()
        self.list.setWordWrap(True)
        self.list.setUniformItemSizes(False)
        self.list.setResizeMode(QListWidget.ResizeMode.Adjust)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        self.list.itemActivated.connect(self._picked)
        self.list.itemClicked.connect(self._picked)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.header)
        layout.addWidget(self.list, 1)
        self._messages: list[Message] = []
        self._pending = False
        self.set_messages([])

    def set_messages(self, messages: Iterable[Message], pending: bool = False) -> None:
        """Show `messages`, errors first. `pending`: a check is still running (said in the header)."""
        rank = {"error": 0, "warning": 1, "note": 2}  # a note (who fills "auto") informs: last, and not counted
        self._messages = sorted(messages, key=lambda m: (rank.get(m.severity, 1), m.path))
        self._pending = pending
        self.list.clear()
        style = self.style()
        icons = {"error": style.standardIcon(QStyle.StandardPixmap.SP_MessageBoxCritical),
                 "warning": style.standardIcon(QStyle.StandardPixmap.SP_MessageBoxWarning),
                 "note": style.standardIcon(QStyle.StandardPixmap.SP_MessageBoxInformation)}
        for message in self._messages:
            where = message.path or "preset"
            item = QListWidgetItem(icons.get(message.severity, icons["warning"]), f"{where}: {message.message}")
            item.setData(_PATH_ROLE, message.path)
            item.setToolTip(f"{message.severity}: {where}\n{message.message}\n\nClick to go to the setting.")
            colour = tone(message.severity, self)
            if colour:
                item.setForeground(QColor(colour))
            self.list.addItem(item)
        self._render_header()
        self._fit_height()

    def set_pending(self, pending: bool) -> None:
        """Say in the header that a check is running (the list keeps the last results meanwhile)."""
        if pending != self._pending:
            self._pending = pending
            self._render_header()

    def messages(self) -> list[Message]:
        return list(self._messages)

    def counts(self) -> tuple[int, int]:
        errors = sum(1 for m in self._messages if m.severity == "error")
        return errors, sum(1 for m in self._messages if m.severity == "warning")

    def header_text(self) -> str:
        return self.header.text()

    def _render_header(self) -> None:
        errors, warnings = self.counts()
        parts = []
        if errors:
            parts.append(f'<span style="color:{tone("error", self)}"><b>✖ {errors} error{"s" * (errors != 1)}</b></span>')
        if warnings:
            parts.append(f'<span style="color:{tone("warning", self)}">⚠ {warnings} warning{"s" * (warnings != 1)}'
                         "</span>")
        if not parts:
            parts.append(f'<span style="color:{tone("ok", self)}">✔ No problems found</span>')
        if self._pending:
            parts.append("<i>checking…</i>")
        self.header.setText("&nbsp;&nbsp;".join(parts))

    def _fit_height(self) -> None:
        """As tall as its messages, up to MAX_HEIGHT (then it scrolls); hidden while there are none, so the space
        goes to what is below it."""
        count = self.list.count()
        self.list.setVisible(count > 0)
        if not count:
            return
        rows = sum(max(self.list.sizeHintForRow(i), self._wrapped_height(i)) for i in range(count))
        self.list.setFixedHeight(min(rows + 2 * self.list.frameWidth() + 4, self.MAX_HEIGHT))

    def _wrapped_height(self, row: int) -> int:
        """The row's height with its text wrapped at the list's width. The view's own size hint is computed for
        the width the list had when it was last laid out (one line while it was hidden), which would leave the
        list one line tall with the rest of a warning cut off."""
        item = self.list.item(row)
        icon = self.list.iconSize().width() or self.style().pixelMetric(QStyle.PixelMetric.PM_SmallIconSize)
        width = max(60, self.width() - 2 * self.list.frameWidth() - icon - 24
                    - self.list.verticalScrollBar().sizeHint().width())
        text = self.list.fontMetrics().boundingRect(QRect(0, 0, width, 100_000), Qt.TextFlag.TextWordWrap,
                                                    item.text())
        return text.height() + 6

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit_height()  # wrapped messages take more lines in a narrower list

    def _picked(self, item: QListWidgetItem) -> None:
        self.jump.emit(str(item.data(_PATH_ROLE) or ""))

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:  # the theme changed: re-colour
            self.set_messages(self._messages, self._pending)
