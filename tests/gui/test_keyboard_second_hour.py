"""The keyboard alone through a second hour: building, keeping and sharing a preset, reading the estimate and a
trial's results. Every Configure action has a key (the toolbar is not in the Tab chain), and Tab leaves a read-only
table (the arrows move inside it), so no page traps the focus."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings, Qt  # noqa: E402
from PySide6.QtWidgets import QApplication, QFileDialog, QInputDialog, QMessageBox, QWidget  # noqa: E402

from traindeck.backend.core import paths  # noqa: E402
from traindeck.backend.presets import load_preset, save_preset  # noqa: E402
from traindeck.gui.context import AppContext  # noqa: E402


def _settings() -> QSettings:
    return QSettings(str(paths.config_dir() / "window.ini"), QSettings.Format.IniFormat)


def _tab_out_of(qtbot, table: QWidget) -> QWidget | None:  # type: ignore[no-untyped-def]
    table.setFocus(Qt.FocusReason.TabFocusReason)
    qtbot.waitUntil(lambda: QApplication.focusWidget() is table, timeout=5000)
    qtbot.keyClick(table, Qt.Key.Key_Tab)
    return QApplication.focusWidget()


def test_configure_import_export_and_delete_have_keys_shown_in_their_tooltips(qtbot, configure_window,
                                                                               monkeypatch, tmp_path: Path) -> None:
    mine = load_preset("cpu-demo")
    mine.name, mine.builtin, mine.path = "mine", False, None
    save_preset(mine)
    window, page = configure_window()
    qtbot.waitUntil(lambda: "mine" in page.presets.names(), timeout=10000)
    assert page.files.load_named("mine")
    page.presets.setFocus()
    qtbot.waitUntil(lambda: QApplication.focusWidget() is page.presets, timeout=5000)
    for act, key in ((page.action_import, "Ctrl+I"), (page.action_export, "Ctrl+E"),
                     (page.action_delete, "Ctrl+Del")):
        assert act.shortcut().toString() == key
        assert act.toolTip().endswith(f"({key})")
    assert any("Ctrl+I" in keys and "Ctrl+E" in keys for keys, _what in window.shortcut_rows())  # F1 lists them

    asked: list[str] = []
    monkeypatch.setattr(QFileDialog, "getOpenFileNames",
                        staticmethod(lambda *a, **k: (asked.append("import"), ([], ""))[1]))
    qtbot.keyClick(page.presets, Qt.Key.Key_I, Qt.KeyboardModifier.ControlModifier)
    assert asked == ["import"]

    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", staticmethod(lambda *a, **k: str(out)))
    qtbot.keyClick(page.presets, Qt.Key.Key_E, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: (out / "ds_config.json").is_file(), timeout=10000)

    monkeypatch.setattr(QMessageBox, "question", staticmethod(lambda *a, **k: QMessageBox.StandardButton.Yes))
    monkeypatch.setattr(QInputDialog, "getText", staticmethod(lambda *a, **k: ("", False)))
    qtbot.keyClick(page.presets, Qt.Key.Key_Delete, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: not (paths.presets_dir() / "mine.yaml").exists(), timeout=10000)


def test_tab_leaves_the_estimate_table(qtbot, traindeck_home: Path) -> None:
    from traindeck.gui.pages.estimate import EstimatePage

    page = EstimatePage(AppContext(settings=_settings()))
    qtbot.addWidget(page)
    page.resize(1300, 800)
    page.show()
    qtbot.waitExposed(page)
    try:
        qtbot.waitUntil(lambda: page.detection_finished and page.results.table.rowCount() > 3, timeout=20000)
        table = page.results.table
        table.setCurrentCell(0, 0)
        after = _tab_out_of(qtbot, table)
        assert after is not table and after is not None
    finally:
        page.shutdown()
        page.ctx.tasks.wait(10000)


def test_tab_leaves_a_trials_results_table(qtbot, traindeck_home: Path) -> None:
    from test_trials_gui import TRIAL, _finished_trial  # the finished trial the results window tests read

    from traindeck.gui.widgets.trial_results import TrialResults

    _finished_trial()
    window = TrialResults(AppContext(settings=_settings()), TRIAL)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitExposed(window)
    qtbot.waitUntil(lambda: window.view is not None and window.table.rowCount() >= 2, timeout=20000)
    window.table.setCurrentCell(0, 0)
    after = _tab_out_of(qtbot, window.table)
    assert after is not window.table and after is not None


def test_home_and_end_in_the_preset_list_go_to_the_first_and_last_preset(qtbot) -> None:
    """The list opens with a heading and may end with a note ("(none yet)", an unreadable file): Home and End go
    to the first and last preset, which loads it as a click would."""
    from traindeck.gui.widgets.preset_list import PresetList

    presets = [load_preset("single-process"), load_preset("cpu-demo")]
    mine = load_preset("cpu-demo")
    mine.name, mine.builtin = "mine", False
    chosen: list[str] = []
    plist = PresetList()
    qtbot.addWidget(plist)
    plist.chosen.connect(chosen.append)
    plist.set_presets([*presets, mine], problems=["broken.yaml: cannot be read"])
    plist.select("cpu-demo")
    plist.show()
    plist.setFocus()
    qtbot.waitUntil(lambda: QApplication.focusWidget() is plist, timeout=5000)
    qtbot.keyClick(plist, Qt.Key.Key_Home)
    qtbot.keyClick(plist, Qt.Key.Key_End)
    assert chosen == ["single-process", "mine"]


@pytest.mark.parametrize("from_a_page", [False, True])
@pytest.mark.parametrize(("key", "page_key", "field"), [(Qt.Key.Key_1, "configure", "presets"),
                                                       (Qt.Key.Key_5, "estimate", "inputs.params"),
                                                       (Qt.Key.Key_7, "queue", "table"),
                                                       (Qt.Key.Key_3, "runs", "run_list"),
                                                       (Qt.Key.Key_6, "history", "run_table.table")])
def test_ctrl_n_puts_the_focus_in_the_page_shown(qtbot, traindeck_home: Path, key, page_key: str, field: str,
                                                 from_a_page: bool) -> None:  # type: ignore[no-untyped-def]
    """Keys typed after Ctrl+1, Ctrl+5 or Ctrl+7 go to the page (its presets, its first field, its rows), not to
    the page list, where a letter typed jumps to another page, nor to the scroll area the hidden page's focus
    passed to."""
    from PySide6.QtWidgets import QLineEdit, QScrollArea

    from traindeck.gui.app import create_window

    _app, window = create_window()
    qtbot.addWidget(window)
    window.show()
    window.activateWindow()
    qtbot.waitExposed(window)
    try:
        other = "runs" if page_key == "history" else "history"
        window.show_page(other)
        start: QWidget = window.nav
        if from_a_page:  # typing in the other page's filter
            start = next(e for e in window.page(other).findChildren(QLineEdit) if e.isVisible())
        start.setFocus()
        qtbot.waitUntil(lambda: QApplication.focusWidget() is start, timeout=5000)
        qtbot.keyClick(start, key, Qt.KeyboardModifier.ControlModifier)
        page = window.page(page_key)
        qtbot.waitUntil(lambda: page.isVisible(), timeout=5000)
        target: object = page
        for part in field.split("."):
            target = getattr(target, part)
        focus = QApplication.focusWidget()
        assert focus is not None and page.isAncestorOf(focus) and not isinstance(focus, QScrollArea)
        if not from_a_page or page_key == "estimate":  # (the hidden page may pass it on to another control)
            assert focus is target
    finally:
        window.ctx.tasks.wait(10000)
        QApplication.processEvents()


@pytest.mark.parametrize(("key", "chosen"), [(Qt.Key.Key_D, "Discard"), (Qt.Key.Key_S, "Save")])
def test_save_and_discard_answer_alt_keys_in_the_dashboards_dialogs(qtbot, key, chosen: str) -> None:  # type: ignore[no-untyped-def]
    # Qt's own texts give Yes and No Alt keys but not Save or Discard: the unsaved-changes question's Discard was a
    # Tab away at the keyboard.
    from PySide6.QtWidgets import QMessageBox

    from traindeck.gui.app import create_window

    _app, window = create_window()
    qtbot.addWidget(window)
    button = QMessageBox.StandardButton
    box = QMessageBox(QMessageBox.Icon.Question, "Unsaved changes", "Save them?",
                      button.Save | button.Discard | button.Cancel, window)
    box.setDefaultButton(button.Save)
    qtbot.addWidget(box)
    box.show()
    box.activateWindow()
    qtbot.waitUntil(box.isActiveWindow, timeout=5000)
    assert [box.button(b).text() for b in (button.Save, button.Discard, button.Cancel)] == ["&Save", "&Discard",
                                                                                          "Cancel"]
    qtbot.keyClick(box, key, Qt.KeyboardModifier.AltModifier)
    qtbot.waitUntil(lambda: box.clickedButton() is not None, timeout=5000)
    assert box.clickedButton() is box.button(getattr(button, chosen))
