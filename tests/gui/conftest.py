"""Fixtures shared by the dashboard's page tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(autouse=True)
def garbage_collected_by_the_dashboard(qapp) -> None:  # type: ignore[no-untyped-def]
    """The dashboard's own collector (a one-second timer on the UI thread), as create_window installs it."""
    from traindeck.gui.app import collect_garbage_on_ui_thread

    collect_garbage_on_ui_thread()


def _pages(qtbot, page_type: type, settings_file: Path, default_size: tuple[int, int],  # type: ignore[no-untyped-def]
           wait_ms: int) -> Iterator[Callable[..., object]]:
    """A fixture's `make((width, height))`: pages of `page_type` over settings in `settings_file` (a second page
    reads what the first kept), each shown at that size; each shut down at the end, its background reads waited for."""
    from PySide6.QtCore import QSettings

    from traindeck.gui.context import AppContext

    pages: list = []  # type: ignore[type-arg]

    def make(size: tuple[int, int] = default_size) -> object:
        page = page_type(AppContext(settings=QSettings(str(settings_file), QSettings.Format.IniFormat)))
        qtbot.addWidget(page)
        page.resize(*size)
        page.show()
        pages.append(page)
        return page

    yield make
    for page in pages:
        page.shutdown()
        page.ctx.tasks.wait(wait_ms)


@pytest.fixture
def make_runs_page(qtbot) -> Iterator[Callable[..., object]]:  # type: ignore[no-untyped-def]
    """`make((width, height))`: a Runs page over the test's store and settings (see _pages)."""
    from traindeck.backend.core import paths
    from traindeck.gui.pages.runs import RunsPage

    yield from _pages(qtbot, RunsPage, paths.config_dir() / "window.ini", (1200, 800), 30000)


@pytest.fixture
def make_history_page(qtbot, traindeck_home) -> Iterator[Callable[..., object]]:  # type: ignore[no-untyped-def]
    """`make((width, height))`: a History page with settings in a file of the test's (see _pages)."""
    from traindeck.gui.pages.history import HistoryPage

    yield from _pages(qtbot, HistoryPage, traindeck_home / "window.ini", (1300, 800), 10000)


@pytest.fixture
def configure_window(qtbot, traindeck_home) -> Iterator[Callable[[], tuple[Any, Any]]]:  # type: ignore[no-untyped-def]
    """`open()`: the dashboard's window as the app creates it, shown and active on the Configure page (built), as
    (window, page). Call it once the test has made what the window should find (a saved preset); each window's
    background work is waited for at the end."""
    from PySide6.QtWidgets import QApplication

    from traindeck.gui.app import create_window

    windows: list = []  # type: ignore[type-arg]

    def open_window() -> tuple[Any, Any]:
        _app, window = create_window()
        qtbot.addWidget(window)
        window.show()
        window.activateWindow()
        window.show_page("configure")
        page = window.page("configure")
        page.ensure_built()
        windows.append(window)
        return window, page

    yield open_window
    for window in windows:
        window.ctx.tasks.wait(10000)
    QApplication.processEvents()


@pytest.fixture
def console(qtbot) -> Iterator[Any]:  # type: ignore[no-untyped-def]
    """A shown LogConsole, 900 x 400, its log closed at the end."""
    from traindeck.gui.widgets.console import LogConsole

    widget = LogConsole()
    qtbot.addWidget(widget)
    widget.resize(900, 400)
    widget.show()
    yield widget
    widget.close_log()
