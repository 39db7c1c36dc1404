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
