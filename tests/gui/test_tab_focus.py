"""Tab moves the focus out of every editable text field: a multi-line editor used as a form field (the Launch page's
sweep box) takes Tab as "next field", never as a tab character, so keyboard users are not trapped in it."""

from __future__ import annotations

import shutil
from pathlib import Path

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


def test_every_multi_line_text_field_of_the_dashboard_lets_tab_move_on() -> None:
    """Qt's QPlainTextEdit and QTextEdit take Tab as a character by default, so the keyboard alone is trapped in
    them: every one the dashboard makes (pages, panels, dialogs, made at once or on demand) turns that off in the
    function that makes it."""
    import ast

    gui = Path(__file__).resolve().parents[2] / "gui"
    trapped = []
    made = 0
    for source in sorted(gui.rglob("*.py")):
        tree = ast.parse(source.read_text(encoding="utf-8"))
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            fields = [ast.unparse(node.targets[0]) for node in ast.walk(function) if isinstance(node, ast.Assign)
                      and isinstance(node.value, ast.Call)
                      and ast.unparse(node.value.func) in ("QPlainTextEdit", "QTextEdit", "QTextBrowser")]
            released = {ast.unparse(node.func.value) for node in ast.walk(function) if isinstance(node, ast.Call)
                        and isinstance(node.func, ast.Attribute) and node.func.attr == "setTabChangesFocus"
                        and node.args and ast.unparse(node.args[0]) == "True"}
            made += len(fields)
            trapped += [f"{source.relative_to(gui)}:{function.name}: {field}" for field in fields
                        if field not in released]
    assert made >= 5, made  # the walk finds the fields it is about
    assert trapped == []
