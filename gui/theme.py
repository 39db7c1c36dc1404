"""Light and dark themes: Qt's Fusion style with a palette, and pyqtgraph's colours to match.

Every text colour of both palettes reads at WCAG AA (contrast >= 4.5:1) on the backgrounds it is drawn on, as
computed from these tables. Secondary text (a run's subtitle, metric names) uses the
PlaceholderText role through `set_muted`, never a style sheet: Qt resolves `palette(...)` in a style sheet once,
so after a theme switch such text would keep the other theme's colour (black at half opacity on a dark window).
"""

from __future__ import annotations

import logging

import shiboken6
from PySide6.QtCore import QEvent, QObject, QPoint, QRect, Qt
from PySide6.QtGui import QColor, QPainter, QPaintEvent, QPalette
from PySide6.QtWidgets import QAbstractSpinBox, QApplication, QComboBox, QSplitter, QWidget

logger = logging.getLogger(__name__)

THEMES = ("system", "light", "dark")
Role = QPalette.ColorRole

_DARK = {
    Role.Window: "#202124", Role.WindowText: "#e8eaed",
    Role.Base: "#171717", Role.AlternateBase: "#26272b",
    Role.ToolTipBase: "#2d2e31", Role.ToolTipText: "#e8eaed",
    Role.Text: "#e8eaed", Role.Button: "#2d2e31",
    Role.ButtonText: "#e8eaed", Role.BrightText: "#ff6b6b",
    Role.Highlight: "#2c63c9", Role.HighlightedText: "#ffffff",
    Role.Link: "#8ab4f8", Role.PlaceholderText: "#a8adb3",
}
# Over Qt's own light palette: its placeholder text is black at half opacity (3.9:1 on white), its selection
# blue under white text 3.7:1.
_LIGHT = {Role.PlaceholderText: "#5f6368", Role.Link: "#1a5fc8", Role.Highlight: "#2470c0"}

# (text role, background role) pairs people read: each must reach 4.5:1 in both themes.
READ_PAIRS = (
    (Role.WindowText, Role.Window), (Role.Text, Role.Base), (Role.Text, Role.AlternateBase),
    (Role.ButtonText, Role.Button), (Role.PlaceholderText, Role.Window), (Role.PlaceholderText, Role.Base),
    (Role.Link, Role.Window), (Role.Link, Role.Base), (Role.HighlightedText, Role.Highlight),
    (Role.ToolTipText, Role.ToolTipBase),
)


def is_dark(app: QApplication) -> bool:
    """Whether the application's window background is dark."""
    return app.palette().color(QPalette.ColorRole.Window).lightness() < 128


def theme_palette(theme: str, app: QApplication) -> QPalette:
    """The palette a theme shows ("system": the platform's, with the light fixes when it is a light one)."""
    if theme == "dark":
        palette = QPalette()
        for role, colour in _DARK.items():
            palette.setColor(role, QColor(colour))
        palette.setColor(QPalette.ColorGroup.Disabled, Role.Text, QColor("#80868b"))
        palette.setColor(QPalette.ColorGroup.Disabled, Role.ButtonText, QColor("#80868b"))
        return palette
    palette = app.style().standardPalette() if theme == "light" else QPalette()
    if palette.color(Role.Window).lightness() >= 128:
        for role, colour in _LIGHT.items():
            palette.setColor(role, QColor(colour))
    return palette


# Keyboard focus is drawn as a ring in the Link colour (>= 5:1 on the window and on fields, in both themes): Fusion's
# own focus cue is a 1 px highlight outline (3:1 in the light theme, and none at all on a default button or a text
# area), which a person tabbing through a form does not find.
FOCUS_RING_WIDTH = 2


class FocusRing(QWidget):
    """A ring just outside the control that has keyboard focus, drawn over the control's parent; where the parent
    ends at the control's edge, that side of the ring is drawn just inside the control instead."""

    def __init__(self) -> None:
        super().__init__()
        self.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.target: QWidget | None = None

    def follow(self, target: QWidget | None) -> None:
        if self.target is not None and shiboken6.isValid(self.target):
            self.target.removeEventFilter(self)
            self.target.destroyed.disconnect(self._target_gone)
        self.target = target
        parent = target.parentWidget() if target is not None else None
        while isinstance(parent, QSplitter):  # a splitter takes every child widget as a pane of its own
            parent = parent.parentWidget()
        if target is None or parent is None:
            self.hide()
            return
        self.setParent(parent)
        target.installEventFilter(self)
        target.destroyed.connect(self._target_gone)
        self._place()

    def _target_gone(self) -> None:
        self.target = None
        self.hide()

    def _place(self) -> None:
        target, parent = self.target, self.parentWidget()
        if target is None or parent is None or not target.isVisible():
            self.hide()
            return
        where = QRect(target.mapTo(parent, QPoint(0, 0)), target.size())
        grown = where.adjusted(-FOCUS_RING_WIDTH, -FOCUS_RING_WIDTH, FOCUS_RING_WIDTH, FOCUS_RING_WIDTH)
        self.setGeometry(grown.intersected(parent.rect()))
        self.show()
        self.raise_()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.target and event.type() in (QEvent.Type.Move, QEvent.Type.Resize, QEvent.Type.Show,
                                                        QEvent.Type.Hide, QEvent.Type.ZOrderChange):
            self._place()
        return False

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        colour = self.palette().color(Role.Link)
        w = FOCUS_RING_WIDTH
        rect = self.rect()
        for band in (rect.adjusted(0, 0, 0, w - rect.height()), rect.adjusted(0, rect.height() - w, 0, 0),
                     rect.adjusted(0, 0, w - rect.width(), 0), rect.adjusted(rect.width() - w, 0, 0, 0)):
            painter.fillRect(band, colour)
        painter.end()


class _FocusFollower(QObject):
    """Moves one FocusRing to each new focus widget (made again when the parent it sat in was deleted)."""

    def __init__(self, app: QApplication) -> None:
        super().__init__(app)
        self.ring: FocusRing | None = None
        app.focusChanged.connect(self._focus_changed)

    def _focus_changed(self, _old: QWidget | None, new: QWidget | None) -> None:
        target = _ring_target(new)
        if self.ring is not None and not shiboken6.isValid(self.ring):
            self.ring = None  # deleted with the parent of the control it last surrounded
        if self.ring is None:
            if target is None:
                return
            self.ring = FocusRing()
        self.ring.follow(target)


def _ring_target(widget: QWidget | None) -> QWidget | None:
    """The control to ring: the focus widget, or the spin box / combo box whose inner field it is."""
    if widget is None or widget.isWindow() or widget.parentWidget() is None:
        return None
    parent = widget.parentWidget()
    if isinstance(parent, (QAbstractSpinBox, QComboBox)) and parent.focusProxy() is widget:
        return parent
    return widget


def show_keyboard_focus(app: QApplication) -> None:
    """Draw a FocusRing around whichever widget has keyboard focus, from now on (once per application)."""
    if app.property("traindeck_focus_ring"):
        return
    app.setProperty("traindeck_focus_ring", True)
    _FocusFollower(app)


def apply_theme(app: QApplication, theme: str) -> str:
    """Apply "light", "dark" or "system"; returns the theme now shown ("light" or "dark")."""
    app.setStyle("Fusion")
    app.setPalette(theme_palette(theme, app))
    show_keyboard_focus(app)
    shown = "dark" if is_dark(app) else "light"
    try:  # charts follow the theme; pyqtgraph is imported here only when a page already uses it
        import sys

        if "pyqtgraph" in sys.modules:
            import pyqtgraph

            pyqtgraph.setConfigOptions(background="#171717" if shown == "dark" else "w",
                                       foreground="#e8eaed" if shown == "dark" else "#303030")
    except Exception:  # the palette is applied; charts keep their colours until the next switch
        logger.warning("charts could not follow the %s theme", shown, exc_info=True)
    return shown


def set_muted(widget: QWidget) -> None:
    """Secondary text: the palette's placeholder colour, which follows theme switches (a style sheet would not)."""
    widget.setForegroundRole(Role.PlaceholderText)


def luminance(colour: QColor) -> float:
    """WCAG relative luminance of an sRGB colour (alpha ignored)."""
    def channel(value: float) -> float:
        return value / 12.92 if value <= 0.03928 else ((value + 0.055) / 1.055) ** 2.4

    return 0.2126 * channel(colour.redF()) + 0.7152 * channel(colour.greenF()) + 0.0722 * channel(colour.blueF())


def contrast(foreground: QColor, background: QColor) -> float:
    """WCAG contrast ratio; a translucent foreground is blended over the background first, as it is painted."""
    if foreground.alphaF() < 1.0:
        a = foreground.alphaF()
        foreground = QColor.fromRgbF(foreground.redF() * a + background.redF() * (1 - a),
                                     foreground.greenF() * a + background.greenF() * (1 - a),
                                     foreground.blueF() * a + background.blueF() * (1 - a))
    high, low = sorted((luminance(foreground), luminance(background)), reverse=True)
    return (high + 0.05) / (low + 0.05)
