"""What every page offers the main window."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from PySide6.QtWidgets import QWidget

from traindeck.gui.context import AppContext


class Page(QWidget):
    key: ClassVar[str] = ""  # stable id: settings, screenshots ("configure" -> 1-configure.png), ctx.navigate
    title: ClassVar[str] = ""  # shown in the navigation list
    order: ClassVar[int] = 100  # position in the navigation list; Ctrl+<position> shows it

    def __init__(self, ctx: AppContext):
        super().__init__()
        self.ctx = ctx

    def page_shown(self) -> None:
        """Called each time the page becomes the visible one (refresh cheap things here, off the UI thread)."""

    def on_screen(self) -> bool:
        """Shown and its window not minimised: only then is drawing worth the CPU (a window left open for days)."""
        return self.isVisible() and not self.window().isMinimized()

    def window_minimised(self, minimised: bool) -> None:
        """The window was minimised (True) or restored (False) while this page was the visible one: pause work done
        for the screen, catch up on restore. (A minimised window's widgets still report isVisible().)"""

    def load_demo(self) -> None:
        """Fill the page with demo data for `traindeck gui --screenshot` (no real run needed)."""

    def demo_views(self) -> list[tuple[str, Callable[[], None]]]:
        """More of the page worth a screenshot after load_demo's: (name, show it) each, taken in order
        (`<position>-<key>-<name>.png`)."""
        return []

    def confirm_close(self) -> bool:
        """Asked before the window closes: False keeps it open (e.g. the user cancelled on unsaved changes)."""
        return True

    def shutdown(self) -> None:
        """The window is closing: stop timers and background readers (never stops a run)."""
