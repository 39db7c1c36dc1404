"""One colour per step phase (forward, backward, communication, optimizer, swap, other), the same in every chart
that draws them (the Runs page's Step tab, the Monitor's Offload tab), told apart on white and on near-black
backgrounds; "other" (outside the engine) is grey."""

from __future__ import annotations

from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QWidget

PHASE_COLOURS_LIGHT = {"forward": "#1f77b4", "backward": "#2ca02c", "communication": "#d62728",
                       "optimizer": "#9467bd", "swap": "#ff7f0e", "other": "#9e9e9e"}
PHASE_COLOURS_DARK = {"forward": "#8ab4f8", "backward": "#81c995", "communication": "#f28b82",
                      "optimizer": "#c58af9", "swap": "#fdd663", "other": "#8a8a8a"}


def phase_colours(widget: QWidget) -> dict[str, str]:
    """The phase colours for `widget`'s theme (its palette's base colour)."""
    dark = widget.palette().color(QPalette.ColorRole.Base).lightness() < 128
    return PHASE_COLOURS_DARK if dark else PHASE_COLOURS_LIGHT
