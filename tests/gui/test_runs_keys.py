"""The Runs page's keyboard: Ctrl+. asks to stop the open run from wherever the focus is on the page."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from PySide6.QtCore import QSettings, Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QWidget

from traindeck.backend.core import paths
from traindeck.gui.context import AppContext
from traindeck.gui.pages.runs import RunsPage


@pytest.fixture
def demo_page(qtbot) -> Iterator[RunsPage]:  # type: ignore[no-untyped-def]
    """The page with its demo run open (running, in a private store: nothing to stop for real)."""
    settings = QSettings(str(paths.config_dir() / "window.ini"), QSettings.Format.IniFormat)
    page = RunsPage(AppContext(settings=settings))
    qtbot.addWidget(page)
    page.resize(1200, 800)
    page.show()
    qtbot.waitExposed(page)
    page.load_demo()
    qtbot.waitUntil(lambda: page.stop_panel.stop_button.isVisible(), timeout=10000)
    yield page
    page.shutdown()
    page.ctx.tasks.wait(30000)


def focus_targets(page: RunsPage) -> dict[str, QWidget]:
    return {"console": page.console.view, "search field": page.console.search, "run list": page.run_list,
            "loss chart": page.charts.loss_chart, "metric box": page.charts.other_box}


@pytest.mark.parametrize("target", ["console", "search field", "run list", "loss chart", "metric box"])
def test_ctrl_period_asks_to_stop_from_any_focus_on_the_page(qtbot, demo_page, monkeypatch, target) -> None:  # type: ignore[no-untyped-def]
    asked: list[bool] = []
    monkeypatch.setattr(demo_page.stop_panel, "_confirm", lambda _record, force: asked.append(force) or False)
    widget = focus_targets(demo_page)[target]
    widget.setFocus(Qt.FocusReason.OtherFocusReason)
    qtbot.waitUntil(lambda: QApplication.focusWidget() is widget, timeout=5000)
    QTest.keyClick(widget, Qt.Key.Key_Period, Qt.KeyboardModifier.ControlModifier)
    assert asked == [False], f"Ctrl+. with the focus on the {target} asked no stop"
    assert QApplication.focusWidget() is widget  # the key was not typed into anything else on the way


def test_ctrl_period_shows_the_stop_confirmation(qtbot, demo_page) -> None:  # type: ignore[no-untyped-def]
    """The key asks first, as the Stop button does: the confirmation box opens and Cancel stops nothing."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QMessageBox

    seen: list[str] = []

    def answer() -> None:
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox):
            QTimer.singleShot(20, answer)
            return
        seen.append(box.windowTitle())
        box.button(QMessageBox.StandardButton.Cancel).click()

    QTimer.singleShot(0, answer)
    demo_page.console.view.setFocus()
    qtbot.waitUntil(lambda: QApplication.focusWidget() is demo_page.console.view, timeout=5000)
    QTest.keyClick(demo_page.console.view, Qt.Key.Key_Period, Qt.KeyboardModifier.ControlModifier)
    assert seen == ["Stop run"]
    assert demo_page.stop_panel.stop_button.isEnabled() and not demo_page.watched.stop_pending
