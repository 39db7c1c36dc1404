"""`CoreBars`: every CPU core's load as a compact horizontal bar, laid out in columns like htop's meters.

Painted in one paintEvent (no child widget per core), so a 128-core machine costs the same as a 4-core one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFontMetrics, QPainter, QPalette
from PySide6.QtWidgets import QSizePolicy, QWidget

ROW_HEIGHT = 15
ROW_GAP = 3


def columns_for(count: int) -> int:
    """How many columns of bars: one up to 8 cores, then enough to keep about 8-16 rows."""
    if count <= 8:
        return 1
    if count <= 32:
        return 2
    if count <= 64:
        return 4
    return 8


class CoreBars(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._values: tuple[float, ...] = ()
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setToolTip("Each CPU core's load over the last sampling interval (like htop's CPU meters)")

    def values(self) -> tuple[float, ...]:
        return self._values

    def set_values(self, per_core_percent: Sequence[float]) -> None:
        values = tuple(float(v) for v in per_core_percent)
        resized = len(values) != len(self._values)
        self._values = values
        if resized:
            self.updateGeometry()
        self.update()

    def _rows(self) -> int:
        count = max(1, len(self._values))
        return math.ceil(count / columns_for(count))

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(400, self._rows() * (ROW_HEIGHT + ROW_GAP) + ROW_GAP)

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        return QSize(160, self.sizeHint().height())

    def paintEvent(self, event: object) -> None:  # noqa: N802
        painter = QPainter(self)
        palette = self.palette()
        text = palette.color(QPalette.ColorRole.Text)
        base = palette.color(QPalette.ColorRole.Base)
        dark = base.lightness() < 128
        trough = QColor(base).darker(115) if not dark else QColor(base).lighter(160)
        user = QColor("#81c995" if dark else "#2e9d4b")
        busy = QColor("#f28b82" if dark else "#d0392f")
        metrics = QFontMetrics(self.font())
        count = len(self._values)
        if not count:
            painter.setPen(text)
            painter.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, "waiting for the first CPU sample...")
            return
        columns = columns_for(count)
        rows = math.ceil(count / columns)
        gap = 12
        width = (self.width() - gap * (columns - 1)) / columns
        label_w = metrics.horizontalAdvance(str(count - 1)) + 6
        value_w = metrics.horizontalAdvance("100%") + 6
        for index, value in enumerate(self._values):
            column, row = divmod(index, rows)
            x = column * (width + gap)
            y = ROW_GAP + row * (ROW_HEIGHT + ROW_GAP)
            painter.setPen(text)
            painter.drawText(QRectF(x, y, label_w - 4, ROW_HEIGHT),
                             Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, str(index))
            bar = QRectF(x + label_w, y + 2, max(10.0, width - label_w - value_w), ROW_HEIGHT - 4)
            painter.fillRect(bar, trough)
            share = max(0.0, min(100.0, value)) / 100.0
            painter.fillRect(QRectF(bar.x(), bar.y(), bar.width() * share, bar.height()),
                             busy if value >= 90 else user)
            painter.drawText(QRectF(bar.right() + 4, y, value_w, ROW_HEIGHT),
                             Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, f"{value:.0f}%")
        painter.end()
