"""The log console over a real log file: a tqdm bar with other lines between its redraws is one line updated in
place; long lines wrap or scroll sideways with the rank tag kept in view; search counts and steps through matches."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QPalette
from support.growing_log import append

from traindeck.backend.logparse.tqdm_bar import looks_like_bar
from traindeck.gui.widgets.console import LogConsole
from traindeck.gui.widgets.log_view import MARGIN


def test_a_bar_with_log_lines_between_its_redraws_is_one_line_updated(qtbot, console: LogConsole, log: Path) -> None:  # type: ignore[no-untyped-def]
    """Real tqdm on a piped stdout, three log lines after each update: the console keeps one bar line, the first,
    and shows the newest drawing there (the view is handed each part before the next is written)."""
    program = textwrap.dedent("""
        import sys
        from tqdm import tqdm
        bar = tqdm(total=3, desc="Epoch 1", file=sys.stdout, mininterval=0, miniters=1, ncols=70)
        for step in range(3):
            bar.update(1)
            for i in range(3):
                print(f"[INFO] [logging.py:96:log_dist] step={step} line {i}", flush=True)
        bar.close()
    """)
    output = subprocess.run([sys.executable, "-c", program], check=True, capture_output=True, timeout=60).stdout
    console.open_log(log)
    parts = output.split(b"line 2\n")
    assert len(parts) == 4  # three updates with their lines, then the last drawing (close)
    for n, part in enumerate(parts[:3]):
        append(log, part + b"line 2\n")
        qtbot.waitUntil(lambda n=n: console.shown_lines()[-1:] == [f"[INFO] [logging.py:96:log_dist] step={n} "
                                                                     "line 2"], timeout=5000)
        assert [t for t in console.shown_lines() if looks_like_bar(t)] == [console.shown_lines()[0]]
        assert f"{n + 1}/3" in console.shown_lines()[0]
    append(log, parts[3] + b"done\n")
    qtbot.waitUntil(lambda: console.shown_lines()[-1:] == ["done"], timeout=5000)
    lines = console.shown_lines()
    assert len(lines) == 1 + 3 * 3 + 1 and lines[0].startswith("Epoch 1: 100%|") and "3/3" in lines[0]
    assert sum(looks_like_bar(t) for t in lines) == 1


def test_search_counts_matches_as_you_type_and_steps_through_them(qtbot, console: LogConsole, log: Path) -> None:  # type: ignore[no-untyped-def]
    append(log, b"".join(b"step %d loss %d.0\n" % (i, i) if i % 3 == 0 else b"step %d\n" % i for i in range(51)))
    console.open_log(log, ended=True)
    qtbot.waitUntil(lambda: console.ended and len(console.shown_lines()) == 51, timeout=5000)
    qtbot.keyClick(console.view, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClicks(console.search, "LOS")  # no Enter: the search runs once typing pauses
    qtbot.waitUntil(lambda: console.search_state.text() == "1 of 17", timeout=5000)
    assert console.view.selected_text() == "los" and console.view.selection_row() == 0
    qtbot.keyClicks(console.search, "S 3")  # typing on: the same place while it still matches
    qtbot.waitUntil(lambda: console.search_state.text() == "1 of 5", timeout=5000)  # 3.0, 30.0, 33.0, ...
    assert console.view.selection_row() == 3 and console.view.selected_text() == "loss 3"
    console.search.setText("loss")
    console.find_next(again=True)
    assert console.search_state.text() == "2 of 17" and console.view.selection_row() == 3
    qtbot.keyClick(console.search, Qt.Key.Key_Return)
    assert console.search_state.text() == "3 of 17" and console.view.selection_row() == 6
    qtbot.keyClick(console.search, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClick(console.search, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    assert console.search_state.text() == "1 of 17" and console.view.selection_row() == 0
    qtbot.keyClick(console.search, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)  # round to the last
    assert console.search_state.text() == "17 of 17" and console.view.selection_row() == 48
    qtbot.keyClick(console.search, Qt.Key.Key_F3)  # and on, round to the first
    assert console.search_state.text() == "1 of 17" and console.view.selection_row() == 0
    assert not console.find_next("no such text")
    assert console.search_state.text() == "not found"


def _has_ink(image, row: int, x_low: int, x_high: int, line_height: int, base: QColor) -> bool:  # type: ignore[no-untyped-def]
    return any(QColor(image.pixel(x, y)) != base for x in range(x_low, x_high)
               for y in range(row * line_height, (row + 1) * line_height))


def test_a_match_far_right_keeps_its_rank_tag_in_view_scrolled_or_wrapped(qtbot, console: LogConsole, log: Path) -> None:  # type: ignore[no-untyped-def]
    far = b" " * 600 + b"needle here"
    append(log, b"launcher line\n[default1]:" + far + b"\n[default0]:after\n")
    console.open_log(log, ended=True)
    qtbot.waitUntil(lambda: console.ended and len(console.shown_lines()) == 3, timeout=5000)
    view = console.view
    assert not console.wrap and console.find_next("needle")
    assert view.selection_row() == 1 and view.horizontalScrollBar().value() > 0  # scrolled sideways to it
    # The tag "[1] " is drawn at the left edge although its columns are scrolled off (the line is blank there).
    image = view.viewport().grab().toImage()
    base = view.palette().color(QPalette.ColorRole.Base)
    tag_width = int(MARGIN + 3 * view._advance)
    assert _has_ink(image, 1, MARGIN, tag_width, view._line_height, base)
    assert not _has_ink(image, 0, MARGIN, tag_width, view._line_height, base)  # untagged: scrolled off

    with qtbot.waitSignal(console.wrap_changed) as changed:
        console.wrap_button.click()
    assert changed.args == [True] and console.wrap and view.horizontalScrollBar().value() == 0
    assert console.find_next("needle")  # the same match, found again: nothing scrolls sideways
    assert view.horizontalScrollBar().value() == 0 and view.selected_text() == "needle"
    columns = view.columns()
    assert columns < 600 and len(view._screen_rows()) > 3  # the long line takes several rows
    image = view.viewport().grab().toImage()
    assert _has_ink(image, 0, MARGIN, tag_width, view._line_height, base)  # "launcher line" at the left again
    console.set_wrap(False)
    assert not console.wrap and not console.wrap_button.isChecked()
