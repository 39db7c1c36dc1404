"""How a run's state looks: one colour and one symbol per state, as an icon (lists) or a badge (headers).

The colours read on light and dark backgrounds alike (white text on the badge); the symbol tells the states apart
without colour.
"""

from __future__ import annotations

from functools import lru_cache

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QFont, QIcon, QPainter, QPixmap

STATE_COLOURS = {
    "running": "#1a73e8",
    "succeeded": "#188038",
    "failed": "#d93025",
    "stopped": "#6f7378",
    "lost": "#e37400",
}
STATE_SYMBOLS = {"running": "▶", "succeeded": "✓", "failed": "✗", "stopped": "■", "lost": "?"}
# Tinted panels (diagnosis, warnings): a translucent fill works over both palettes.
PANEL_STYLES = {
    "failed": ("rgba(217, 48, 37, 0.13)", "#d93025"),
    "lost": ("rgba(227, 116, 0, 0.14)", "#e37400"),
    "stopped": ("rgba(128, 134, 139, 0.14)", "#80868b"),
    "warning": ("rgba(249, 171, 0, 0.18)", "#f9ab00"),
    "info": ("rgba(26, 115, 232, 0.10)", "#1a73e8"),
}


def state_colour(state: str) -> str:
    return STATE_COLOURS.get(state, "#80868b")


@lru_cache(maxsize=16)
def state_icon(state: str, size: int = 32) -> QIcon:
    """A filled circle in the state's colour with its symbol in white."""
    pixmap = QPixmap(size, size)
    pixmap.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pixmap)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setPen(Qt.PenStyle.NoPen)
    painter.setBrush(QColor(state_colour(state)))
    painter.drawEllipse(QRectF(1, 1, size - 2, size - 2))
    font = QFont()
    font.setPixelSize(int(size * 0.55))
    font.setBold(True)
    painter.setFont(font)
    painter.setPen(QColor("white"))
    painter.drawText(QRectF(0, 0, size, size), Qt.AlignmentFlag.AlignCenter, STATE_SYMBOLS.get(state, "•"))
    painter.end()
    return QIcon(pixmap)


def badge_style(state: str) -> str:
    return (f"background: {state_colour(state)}; color: white; border-radius: 4px; padding: 2px 8px;"
            " font-weight: bold;")


def panel_style(kind: str, object_name: str) -> str:
    fill, edge = PANEL_STYLES.get(kind, PANEL_STYLES["info"])
    return (f"#{object_name} {{ background: {fill}; border: 1px solid {edge}; border-left: 4px solid {edge};"
            " border-radius: 4px; }")
