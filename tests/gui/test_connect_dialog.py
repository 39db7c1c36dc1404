"""File > Connect to machine...'s dialog, as a newcomer first sees it (no recent machines yet)."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")


def test_the_empty_machine_box_says_what_goes_in_it(qtbot) -> None:
    from traindeck.gui.remote_connect import ConnectDialog

    dialog = ConnectDialog([], "")
    qtbot.addWidget(dialog)
    line = dialog.host_box.lineEdit()
    assert line is not None and "@" in line.placeholderText()


def test_the_machine_line_names_both_machines_only_while_connected(qtbot, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Each page's line says which machine it shows and names the other one; on this machine alone there is none."""
    from traindeck.gui.app import create_window
    from traindeck.gui.remote_connect import machine_line_text

    for page in ("runs", "queue"):
        assert machine_line_text(page, "me@gpu-box", "laptop").startswith("Showing me@gpu-box")
    for page in ("monitor", "history", "launch", "configure", "estimate"):
        text = machine_line_text(page, "me@gpu-box", "laptop")
        assert text.startswith("Showing this machine (laptop)") and "me@gpu-box" in text
    assert "not shown for another machine's runs (connected to me@gpu-box)" in machine_line_text(
        "monitor", "me@gpu-box", "laptop")

    monkeypatch.setenv("TRAINDECK_NO_CLOSE_PROMPT", "1")
    _app, window = create_window()
    try:
        window.show()
        for page_type in window.page_types:
            window.show_page(page_type.key)
            assert window.machine_line.isHidden() and not window.machine_line.text(), page_type.key
    finally:
        window.close()
        window.ctx.tasks.wait(10000)
