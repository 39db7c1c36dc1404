"""Small label and panel makers shared by the Runs page's parts."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QLabel, QVBoxLayout


def panel(name: str) -> tuple[QFrame, QVBoxLayout]:
    """A hidden framed panel named `name` (for its style sheet), with its layout."""
    frame = QFrame()
    frame.setObjectName(name)
    layout = QVBoxLayout(frame)
    layout.setContentsMargins(10, 6, 10, 6)
    layout.setSpacing(2)
    frame.setVisible(False)
    return frame, layout


def label(text: str = "", *, selectable: bool = False, wrap: bool = False, bold: bool = False) -> QLabel:
    widget = QLabel(text)
    if selectable:
        widget.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    widget.setWordWrap(wrap)
    if bold:
        font = widget.font()
        font.setBold(True)
        widget.setFont(font)
    return widget
