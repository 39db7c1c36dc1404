"""Tab moves the focus out of every editable text field: a multi-line editor used as a form field (the Launch page's
sweep box) takes Tab as "next field", never as a tab character, so keyboard users are not trapped in it."""

from __future__ import annotations

import shutil

from PySide6.QtCore import QSettings, Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication
from support.probe_fixture import probe_cache  # noqa: F401 (a fixture)

from traindeck.backend.core import paths
from traindeck.backend.presets import load_preset
from traindeck.gui.context import AppContext


def context() -> AppContext:
    return AppContext(settings=QSettings(str(paths.config_dir() / "window.ini"), QSettings.Format.IniFormat))


def test_tab_leaves_the_launch_pages_sweep_box(qtbot, traindeck_home, probe_cache) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    from traindeck.gui.pages.launch import LaunchPage

    shutil.copytree(probe_cache, traindeck_home / "cache" / "probes")
    ctx = context()
    ctx.draft.replace(load_preset("cpu-demo"), "cpu-demo")
    page = LaunchPage(ctx)
    qtbot.addWidget(page)
    page.resize(1100, 800)
    page.show()
    qtbot.waitExposed(page)
    try:
        box = page.sweep.rows
        box.setPlainText("lr = 1e-5, 3e-5")
        box.setFocus(Qt.FocusReason.TabFocusReason)
        qtbot.waitUntil(lambda: QApplication.focusWidget() is box, timeout=5000)
        QTest.keyClick(box, Qt.Key.Key_Tab)
        assert "\t" not in box.toPlainText()
        assert box.toPlainText() == "lr = 1e-5, 3e-5"
        assert QApplication.focusWidget() is not box and QApplication.focusWidget() is not None
    finally:
        page.shutdown()
        ctx.tasks.wait(30000)
