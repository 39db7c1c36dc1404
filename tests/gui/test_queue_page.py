"""The Queue page: the run store's queued runs in order with what they wait for; hold, move, remove, pause."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")

from PySide6.QtCore import Qt  # noqa: E402

from traindeck.backend.queue.entries import QueuedLaunch, QueueStore  # noqa: E402


@pytest.fixture
def page(qtbot):
    from traindeck.gui.context import AppContext
    from traindeck.gui.pages.queue import QueuePage

    page = QueuePage(AppContext())
    qtbot.addWidget(page)
    yield page
    page.shutdown()
    page.ctx.tasks.wait(10000)


def _names(page) -> list[tuple[str, str, str]]:
    return [(page.table.item(r, 0).text(), page.table.item(r, 1).text(), page.table.item(r, 3).text())
            for r in range(page.table.rowCount())]


def test_lists_waiting_runs_in_order_and_acts_on_them(qtbot, page):
    with QueueStore() as queue:
        queue.update_settings(paused=True)  # nothing starts while the test looks
        ids = [queue.add(QueuedLaunch(script="t.py"), name=n).id for n in ("a", "b", "c")]
    page.page_shown()
    qtbot.waitUntil(lambda: page.table.rowCount() == 3, timeout=10000)
    assert _names(page) == [("1", "a", "the queue is paused"), ("2", "b", "the queue is paused"),
                            ("3", "c", "the queue is paused")]
    assert "paused" in page.summary.text() and page.buttons["pause"].text() == "&Resume queue"

    page.table.selectRow(2)
    qtbot.mouseClick(page.buttons["up"], Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: [n for _, n, _ in _names(page)] == ["a", "c", "b"], timeout=10000)
    page.table.selectRow(0)
    qtbot.mouseClick(page.buttons["hold"], Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.table.rowCount() == 3 and page.table.item(0, 3).text() == "held", timeout=10000)
    page.table.selectRow(2)
    qtbot.mouseClick(page.buttons["remove"], Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.table.rowCount() == 2, timeout=10000)
    with QueueStore() as queue:
        assert [(e.name, e.held) for e in queue.waiting()] == [("a", True), ("c", False)]
        assert queue.runs.get_run(ids[1]) is None


def test_the_demo_window_reads_the_real_queue(qtbot):
    """`make demo` opens the window with demo=True and launches real runs: its Queue page said "Reading the
    queue..." forever (it skipped every read in demo mode), while a sweep queued from its Launch page waited."""
    from traindeck.gui.context import AppContext
    from traindeck.gui.pages.queue import QueuePage

    with QueueStore() as queue:
        queue.update_settings(paused=True)
        queue.add(QueuedLaunch(script="t.py"), name="from-the-demo")
    page = QueuePage(AppContext(demo=True))
    qtbot.addWidget(page)
    try:
        page.page_shown()
        qtbot.waitUntil(lambda: page.table.rowCount() == 1, timeout=10000)
        assert page.table.item(0, 1).text() == "from-the-demo"
        assert "1 waiting" in page.summary.text()
        page._busy = False
        page.refresh()  # a read under way when the screenshots' made-up queue is shown does not replace it
        page.load_demo()
        page.refresh()
        page.ctx.tasks.wait(5000)
        qtbot.wait(100)
        assert page.table.rowCount() == 3
    finally:
        page.shutdown()
        page.ctx.tasks.wait(10000)


def test_ids_are_shown_whole_and_rows_are_not_numbered_beside_pos(qtbot):
    """The walk-through's screenshot: row numbers 1, 2, 3 beside the Pos column, and ids cut to "20260101-09..."."""
    from traindeck.gui.context import AppContext
    from traindeck.gui.pages.queue import QueuePage

    page = QueuePage(AppContext(demo=True))
    qtbot.addWidget(page)
    page.resize(1100, 500)
    page.show()
    page.load_demo()
    qtbot.wait(50)
    try:
        assert page.table.verticalHeader().isHidden()
        id_column = 5  # "Id"
        needed = page.table.fontMetrics().horizontalAdvance(page.table.item(0, id_column).text())
        assert page.table.columnWidth(id_column) >= needed
    finally:
        page.shutdown()


def test_an_empty_queue_says_how_runs_get_there(qtbot, page):
    page.page_shown()
    qtbot.waitUntil(lambda: "empty" in page.summary.text(), timeout=10000)
    assert "Launch page" in page.summary.text() and "queue add" in page.summary.text()
