"""A short list of findings (errors, warnings, notes, good news) as one wrapped label, in colours that read on the
light and the dark theme alike."""

from __future__ import annotations

import html
from collections.abc import Iterable

from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QLabel, QWidget

# severity -> (marker, colour on a light background, colour on a dark one)
_STYLE = {
    "error": ("✖", "#c62828", "#ff7b72"),
    "warning": ("⚠", "#9a5b00", "#f0b429"),
    "ok": ("✔", "#2a7030", "#81c995"),  # each at 4.5:1 or more on its theme (WCAG AA, as in theme.py)
    "note": ("•", "", ""),  # the palette's text colour
}


def tone(severity: str, widget: QWidget) -> str:
    """The colour for `severity` on `widget`'s background ("" for the normal text colour)."""
    _, light, dark = _STYLE.get(severity, _STYLE["note"])
    return dark if widget.palette().color(QPalette.ColorRole.Window).lightness() < 128 else light


def rich_line(severity: str, text: str, widget: QWidget, *, bold: bool = False) -> str:
    """One finding as HTML: its severity's marker and colour for `widget`'s theme, the text escaped."""
    marker = _STYLE.get(severity, _STYLE["note"])[0]
    colour = tone(severity, widget)
    body = html.escape(text)
    if bold:
        body = f"<b>{body}</b>"
    style = f' style="color:{colour}"' if colour else ""
    return f"<span{style}>{marker}&nbsp;{body}</span>"


class MessageList(QLabel):
    """Shows (severity, text) items one per line; hidden while empty. `items()` gives back what is shown."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWordWrap(True)
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self._items: list[tuple[str, str]] = []
        self._heading = ""
        self.hide()

    def set_items(self, items: Iterable[tuple[str, str]], heading: str = "") -> None:
        self._items = list(items)
        self._heading = heading
        self._render()

    def items(self) -> list[tuple[str, str]]:
        return list(self._items)

    def plain_text(self) -> str:
        return "\n".join(([self._heading] if self._heading else []) + [text for _, text in self._items])

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == event.Type.PaletteChange:  # the theme changed: re-colour
            self._render()

    def _render(self) -> None:
        lines = [f"<b>{html.escape(self._heading)}</b>"] if self._heading else []
        lines += [rich_line(severity, text, self) for severity, text in self._items]
        self.setText("<br>".join(lines))
        self.setVisible(bool(self._items))
