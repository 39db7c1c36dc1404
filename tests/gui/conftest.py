"""Fixtures shared by the dashboard's page tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest


@pytest.fixture(autouse=True)
def garbage_collected_by_the_dashboard(qapp) -> None:  # type: ignore[no-untyped-def]
    """The dashboard's own collector (a one-second timer on the UI thread), as create_window installs it."""
    from traindeck.gui.app import collect_garbage_on_ui_thread

    collect_garbage_on_ui_thread()


@pytest.fixture
def make_runs_page(qtbot) -> Iterator[Callable[..., object]]:  # type: ignore[no-untyped-def]
    """`make((width, height))`: a Runs page over the test's store and settings, shown at that size; each page is
    shut down at the end and its background reads waited for."""
    from PySide6.QtCore import QSettings

    from traindeck.backend.core import paths
    from traindeck.gui.context import AppContext
    from traindeck.gui.pages.runs import RunsPage

    pages: list[RunsPage] = []

    def make(size: tuple[int, int] = (1200, 800)) -> RunsPage:
        settings = QSettings(str(paths.config_dir() / "window.ini"), QSettings.Format.IniFormat)
        page = RunsPage(AppContext(settings=settings))
        qtbot.addWidget(page)
        page.resize(*size)
        page.show()
        pages.append(page)
        return page

    yield make
    for page in pages:
        page.shutdown()
        page.ctx.tasks.wait(30000)


@pytest.fixture
def make_history_page(qtbot, traindeck_home) -> Iterator[Callable[..., object]]:  # type: ignore[no-untyped-def]
    """`make((width, height))`: a History page with settings in a file of the test's (a second page reads what the
    first kept), shown at that size; each page is shut down at the end and its background reads waited for."""
    from PySide6.QtCore import QSettings

    from traindeck.gui.context import AppContext
    from traindeck.gui.pages.history import HistoryPage

    pages: list[HistoryPage] = []

    def make(size: tuple[int, int] = (1300, 800)) -> HistoryPage:
        settings = QSettings(str(traindeck_home / "window.ini"), QSettings.Format.IniFormat)
        page = HistoryPage(AppContext(settings=settings))
        qtbot.addWidget(page)
        page.resize(*size)
        page.show()
        pages.append(page)
        return page

    yield make
    for page in pages:
        page.shutdown()
        page.ctx.tasks.wait(10000)
