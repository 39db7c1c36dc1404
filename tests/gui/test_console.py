"""The log console widget over a real log file: bar redraws as one updating line, rank filter, search, follow,
bounded lines."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from support.growing_log import append
from support.qt_events import EventCount

from traindeck.gui.widgets.console import PAUSED_TICK_MS, LogConsole


def test_bar_redraws_update_one_line_in_place(qtbot, console: LogConsole, log: Path) -> None:  # type: ignore[no-untyped-def]
    console.open_log(log)
    append(log, b"\x1b[32mstarting\x1b[0m\n")
    for i in range(1, 6):
        append(log, b"\rtrain: %3d%%|#     | %d/10 [00:0%d<00:05, 1.00it/s]" % (i * 10, i, i))
    qtbot.waitUntil(lambda: "5/10" in console.text(), timeout=5000)
    assert console.shown_lines() == ["starting", "train:  50%|#     | 5/10 [00:05<00:05, 1.00it/s]"]  # no ANSI
    for i in range(6, 11):
        append(log, b"\rtrain: %3d%%|######| %d/10 [00:%02d<00:00, 1.00it/s]" % (i * 10, i, i))
    append(log, b"\ndone\n")
    qtbot.waitUntil(lambda: console.shown_lines()[-1:] == ["done"], timeout=5000)
    assert console.shown_lines() == ["starting", "train: 100%|######| 10/10 [00:10<00:00, 1.00it/s]", "done"]


def test_rank_filter_shows_one_rank_and_untagged_lines(qtbot, console: LogConsole, log: Path) -> None:  # type: ignore[no-untyped-def]
    append(log, b"launcher says hi\n[default0]:zero a\n[default1]:one a\n[default0]:zero b\n[default1]:one b\n")
    console.open_log(log)
    qtbot.waitUntil(lambda: len(console.shown_lines()) == 5, timeout=5000)
    assert console.shown_lines() == ["launcher says hi", "[0] zero a", "[1] one a", "[0] zero b", "[1] one b"]
    assert [console.rank_box.itemText(i) for i in range(console.rank_box.count())] == ["All ranks", "Rank 0",
                                                                                        "Rank 1"]
    console.rank_box.setCurrentIndex(console.rank_box.findData(1))
    assert console.rank_filter == 1
    assert console.shown_lines() == ["launcher says hi", "[1] one a", "[1] one b"]
    append(log, b"[default0]:zero c\n[default1]:one c\n")  # new lines follow the filter too
    qtbot.waitUntil(lambda: console.shown_lines()[-1:] == ["[1] one c"], timeout=5000)
    assert "[0] zero c" not in console.shown_lines()
    console.set_rank_filter(None)
    assert console.shown_lines()[-2:] == ["[0] zero c", "[1] one c"] and len(console.shown_lines()) == 7


def test_search_selects_matches_wraps_and_says_when_nothing_matches(qtbot, console: LogConsole, log: Path) -> None:  # type: ignore[no-untyped-def]
    append(log, b"".join(b"line %d\n" % i for i in range(50)) + b"RuntimeError: boom\n" + b"more\n" * 50)
    console.open_log(log, ended=True)
    qtbot.waitUntil(lambda: console.ended and len(console.shown_lines()) == 101, timeout=5000)
    qtbot.keyClick(console.view, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    assert console.search.hasFocus()
    qtbot.keyClicks(console.search, "runtimeerror")
    qtbot.keyClick(console.search, Qt.Key.Key_Return)
    assert console.view.selected_text() == "RuntimeError"  # case-insensitive
    assert console.view.selection_row() == 50
    assert not console.following  # the match stays in view
    bar = console.view.verticalScrollBar()
    assert bar.value() <= 50 < bar.value() + console.view.visible_rows()
    assert console.find_next()  # the only match again, found by wrapping around
    assert console.view.selection_row() == 50
    assert console.find_next("line 4", backward=True)
    assert console.view.selected_text() == "line 4" and console.view.selection_row() == 49  # "line 49"
    assert console.find_next(backward=True)
    assert console.view.selection_row() == 48
    assert not console.find_next("no such text")
    assert console.search_state.text() == "not found"


def test_follow_stops_when_scrolled_up_and_resumes_at_the_end(qtbot, console: LogConsole, log: Path) -> None:  # type: ignore[no-untyped-def]
    append(log, b"".join(b"line %d\n" % i for i in range(500)))
    console.open_log(log)
    qtbot.waitUntil(lambda: len(console.shown_lines()) == 500, timeout=5000)
    bar = console.view.verticalScrollBar()
    assert console.following and bar.value() == bar.maximum()
    bar.setValue(100)  # the user scrolls up
    assert not console.following and not console.follow_button.isChecked()
    append(log, b"".join(b"more %d\n" % i for i in range(100)))
    qtbot.waitUntil(lambda: len(console.shown_lines()) == 600, timeout=5000)
    assert bar.value() == 100  # what the user reads stays put
    bar.setValue(bar.maximum())
    assert console.following
    append(log, b"the end\n")
    qtbot.waitUntil(lambda: console.shown_lines()[-1:] == ["the end"], timeout=5000)
    assert bar.value() == bar.maximum()
    console.follow_button.click()
    assert not console.following


def test_lines_are_bounded_and_earlier_ones_pointed_to_output_log(qtbot, log: Path) -> None:  # type: ignore[no-untyped-def]
    console = LogConsole(max_lines=200)
    qtbot.addWidget(console)
    console.show()
    console.open_log(log)
    for chunk in range(10):
        append(log, b"".join(b"line %05d\n" % (chunk * 300 + i) for i in range(300)))
        qtbot.wait(30)
    qtbot.waitUntil(lambda: console.shown_lines()[-1:] == ["line 02999"], timeout=5000)
    shown = console.shown_lines()
    assert len(shown) == 200
    assert shown == [f"line {i:05d}" for i in range(3000 - len(shown), 3000)]  # the newest, in order, no gap
    assert console.total_lines == 3000
    assert console.earlier_label.isVisible() and "output.log" in console.earlier_label.text()
    assert console.open_button.isEnabled()
    console.close_log()
    assert console.shown_lines() == [] and not console.earlier_label.isVisible()


def test_text_can_be_selected_with_the_mouse_and_copied(qtbot, console: LogConsole, log: Path) -> None:  # type: ignore[no-untyped-def]
    from PySide6.QtCore import QPoint
    from PySide6.QtGui import QGuiApplication

    from traindeck.gui.widgets.log_view import MARGIN

    append(log, b"alpha one\n[default1]:beta two\ngamma three\n")
    console.open_log(log, ended=True)
    qtbot.waitUntil(lambda: console.ended and len(console.shown_lines()) == 3, timeout=5000)
    view = console.view
    height, advance = view._line_height, view._advance

    def at(row: int, col: int) -> QPoint:
        return QPoint(int(MARGIN + col * advance), int(row * height + height / 2))

    qtbot.mousePress(view.viewport(), Qt.MouseButton.LeftButton, pos=at(0, 6))
    qtbot.mouseMove(view.viewport(), at(2, 5))
    qtbot.mouseRelease(view.viewport(), Qt.MouseButton.LeftButton, pos=at(2, 5))
    assert view.selected_text() == "one\n[1] beta two\ngamma"
    qtbot.keyClick(view, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier)
    assert QGuiApplication.clipboard().text() == "one\n[1] beta two\ngamma"
    qtbot.mouseDClick(view.viewport(), Qt.MouseButton.LeftButton, pos=at(1, 6))
    assert view.selected_text() == "beta"
    qtbot.keyClick(view, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
    assert view.selected_text() == "alpha one\n[1] beta two\ngamma three"


def test_a_paused_console_still_moves_lines_into_its_view_so_none_pile_up_in_the_feed(qtbot, console: LogConsole,
                                                                                    log: Path) -> None:  # type: ignore[no-untyped-def]
    """Hidden page or minimised window: batches still go into the (undrawn) view every PAUSED_TICK_MS; lines left
    pending in the feed were a second copy of up to max_lines texts, grown every time the page was hidden. Nothing
    is painted meanwhile (a minimised window's widgets still count as visible), and once on resuming."""
    counter = EventCount(QEvent.Type.Paint)
    console.view.viewport().installEventFilter(counter)
    console.open_log(log)
    qtbot.wait(200)
    console.set_paused(True)
    painted = counter.count
    assert console.timer.isActive() and console.timer.interval() == PAUSED_TICK_MS
    with log.open("a") as out:
        out.write("".join(f"line {i}\n" for i in range(3000)))
    qtbot.waitUntil(lambda: console.feed is not None and console.feed.lines_read == 3000, timeout=10_000)
    qtbot.waitUntil(lambda: len(console.shown_lines()) == 3000, timeout=PAUSED_TICK_MS * 3)
    assert console.feed is not None and not console.feed._pending  # nothing held for a return
    assert console.timer.interval() == PAUSED_TICK_MS  # still the slow pace while paused
    qtbot.wait(100)
    assert counter.count == painted  # the view (still "visible": this widget is shown) drew none of them
    console.set_paused(False)
    assert console.timer.interval() < PAUSED_TICK_MS
    qtbot.waitUntil(lambda: counter.count > painted, timeout=2000)  # and draws them on resuming


class _Clock(QObject):
    tick = Signal()


def test_a_stream_is_applied_on_the_clock_it_follows_and_quiet_output_on_its_own_timer(qtbot, console: LogConsole,
                                                                                      log: Path) -> None:  # type: ignore[no-untyped-def]
    """The Runs page's 1 s clock drives a stream's applies, so the console repaints with the clock and the page's
    news in one cycle; once the log is quiet the console's own quick timer shows the next line by itself."""
    clock = _Clock()
    console.follow_clock(clock.tick)
    console.open_log(log)
    append(log, b"".join(b"first %d\n" % i for i in range(10)))
    qtbot.waitUntil(lambda: len(console.shown_lines()) == 10, timeout=5000)  # the quick timer, as ever
    qtbot.waitUntil(lambda: console._on_clock, timeout=5000)  # lines came: a stream, applied on the clock now
    assert not console.timer.isActive()

    append(log, b"".join(b"more %d\n" % i for i in range(10)))
    qtbot.waitUntil(lambda: console.feed is not None and console.feed.lines_read == 20, timeout=5000)
    qtbot.wait(1500)  # longer than STREAM_TICK_MS: nothing applies them but the clock
    assert len(console.shown_lines()) == 10
    clock.tick.emit()
    assert console.shown_lines()[-1] == "more 9"

    clock.tick.emit()  # nothing new: quiet again, back on the console's own timer
    assert not console._on_clock and console.timer.isActive()
    append(log, b"alone\n")
    qtbot.waitUntil(lambda: console.shown_lines()[-1:] == ["alone"], timeout=3000)
