"""Counting Qt events a widget receives (paints, layout requests): what the Runs page's steady drawing is checked by."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject


class EventCount(QObject):
    """Install on a widget (`widget.installEventFilter(counter)`): `count` is how many events of `kind` reached it."""

    def __init__(self, kind: QEvent.Type) -> None:
        super().__init__()
        self.kind = kind
        self.count = 0

    def eventFilter(self, _watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        self.count += event.type() == self.kind
        return False
