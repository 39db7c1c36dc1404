"""Light and dark themes: Qt's Fusion style with a palette, and pyqtgraph's colours to match."""

from __future__ import annotations

from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication

THEMES = ("system", "light", "dark")

_DARK = {
    QPalette.ColorRole.Window: "#202124", QPalette.ColorRole.WindowText: "#e8eaed",
    QPalette.ColorRole.Base: "#171717", QPalette.ColorRole.AlternateBase: "#26272b",
    QPalette.ColorRole.ToolTipBase: "#2d2e31", QPalette.ColorRole.ToolTipText: "#e8eaed",
    QPalette.ColorRole.Text: "#e8eaed", QPalette.ColorRole.Button: "#2d2e31",
    QPalette.ColorRole.ButtonText: "#e8eaed", QPalette.ColorRole.BrightText: "#ff6b6b",
    QPalette.ColorRole.Highlight: "#3b78e7", QPalette.ColorRole.HighlightedText: "#ffffff",
    QPalette.ColorRole.Link: "#8ab4f8", QPalette.ColorRole.PlaceholderText: "#9aa0a6",
}


def is_dark(app: QApplication) -> bool:
    return app.palette().color(QPalette.ColorRole.Window).lightness() < 128


def apply_theme(app: QApplication, theme: str) -> str:
    """Apply "light", "dark" or "system"; returns the theme now shown ("light" or "dark")."""
    app.setStyle("Fusion")
    if theme == "dark":
        palette = QPalette()
        for role, colour in _DARK.items():
            palette.setColor(role, QColor(colour))
        palette.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text, QColor("#6f7378"))
        palette.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.ButtonText, QColor("#6f7378"))
        app.setPalette(palette)
    elif theme == "light":
        app.setPalette(app.style().standardPalette())
    else:
        app.setPalette(QPalette())
    shown = "dark" if is_dark(app) else "light"
    try:  # charts follow the theme; pyqtgraph is imported here only when a page already uses it
        import sys

        if "pyqtgraph" in sys.modules:
            import pyqtgraph

            pyqtgraph.setConfigOptions(background="#171717" if shown == "dark" else "w",
                                       foreground="#e8eaed" if shown == "dark" else "#303030")
    except Exception:
        pass
    return shown
