"""History's run table sorted by a click on a column's header: the sort arrow on that column, figures ordered as
numbers (durations, seconds per step, a metric's final value, negative ones included) with runs that lack one kept
together at an end, and the order kept over the table's refreshes. Real run directories, a real run store,
offscreen widgets, real mouse clicks."""

from __future__ import annotations

import psutil
import pytest

pytest.importorskip("PySide6")

from fixtures.history_runs import T0, make_run  # noqa: E402
from PySide6.QtCore import QPoint, Qt  # noqa: E402
from PySide6.QtTest import QTest  # noqa: E402

from traindeck.backend.runs.record.run_store import RunRecord, RunStore  # noqa: E402

# name: (steps, seconds a step, final loss or None): durations 0:35 .. 12:10 and s/step 0.05 .. 14 s read wrongly as
# text ("12:10" < "9:50", "10 s" < "2 s"); a loss-like objective may be negative.
RUNS = {"a": (100, 0.05, 10.0), "b": (20, 2.0, 2.0), "c": (50, 14.0, -0.5), "d": (56, 10.0, -3.0),
        "e": (10, 1.0, None)}


@pytest.fixture
def page(qtbot):
    from traindeck.gui.context import AppContext
    from traindeck.gui.pages.history import HistoryPage

    made = HistoryPage(AppContext())
    qtbot.addWidget(made)
    made.resize(1400, 700)
    made.show()
    qtbot.waitExposed(made)
    yield made
    made.shutdown()
    made.ctx.tasks.wait(10000)


def _click_header(table, column: int) -> None:
    header = table.table.header()
    x = header.sectionViewportPosition(column) + header.sectionSize(column) // 2
    QTest.mouseClick(header.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(x, header.height() // 2))


def _column(table, column: int) -> list[str]:
    return [table.proxy.index(row, column).data() for row in range(table.proxy.rowCount())]


def _number(text: str) -> float:
    """A cell's figure: "0:35" and "12:10" as seconds, "2 s" as 2, "-0.5 @ 50" as -0.5."""
    word = text.split()[0]
    if ":" in word:
        minutes, seconds = word.split(":")
        return 60 * float(minutes) + float(seconds)
    return float(word)


def _ordered(cells: list[str], ascending: bool) -> None:
    """The figures in numeric order, the cells without one ("-") together at one end."""
    blanks = [i for i, text in enumerate(cells) if text == "-"]
    assert blanks == list(range(len(blanks))) or blanks == list(range(len(cells) - len(blanks), len(cells))), cells
    numbers = [_number(text) for text in cells if text != "-"]
    assert numbers == sorted(numbers, reverse=not ascending), cells


def test_a_click_on_a_header_sorts_by_number_and_the_order_outlives_refreshes(qtbot, page):
    with RunStore() as store:
        for i, (name, (steps, sps, loss)) in enumerate(RUNS.items()):
            started = T0 + 100 * i
            metric = ("loss", steps, started + 30 + steps * sps, loss, 0) if loss is not None else \
                ("accuracy", steps, started + 30 + steps * sps, 0.5, 0)
            make_run(store, name, steps=steps, seconds_per_step=sps, started=started, samples=0, port=29800 + i,
                     metrics=[metric])
    page.page_shown()
    table = page.run_table
    qtbot.waitUntil(lambda: table.proxy.rowCount() == len(RUNS), timeout=10000)
    header = table.table.header()
    headers = table.model.headers
    duration, per_step, final = headers.index("Duration"), headers.index("s/step"), headers.index("Final loss")
    assert header.isSortIndicatorShown() and header.sortIndicatorSection() == headers.index("Started")

    for column in (duration, per_step, final):
        _click_header(table, column)
        assert header.sortIndicatorSection() == column  # the arrow moved to the column clicked
        ascending = header.sortIndicatorOrder() == Qt.SortOrder.AscendingOrder
        _ordered(_column(table, column), ascending)
        _click_header(table, column)  # again: the other way
        assert header.sortIndicatorSection() == column and \
            (header.sortIndicatorOrder() == Qt.SortOrder.AscendingOrder) != ascending
        _ordered(_column(table, column), not ascending)
    assert _column(table, duration) != sorted(_column(table, duration))  # not ordered as text

    # Sorted by the final loss: a refresh that lists a new run (the table is reset) keeps the order, and one whose
    # running run logged a new final value moves its row.
    order = header.sortIndicatorOrder()
    me = psutil.Process()  # the test stands in for the run's supervisor (a run without one is marked lost)
    with RunStore() as store:
        store.add_run(RunRecord(id="live-run", run_dir="/nowhere", created_at=T0 + 7200, started_at=T0 + 7200,
                                name="live", progress={"current": 40, "rate": 2.0, "unit": "it"},
                                supervisor_pid=me.pid, supervisor_started=me.create_time()))
        store.add_metrics("live-run", [("loss", 40, T0 + 7220, 5.0, 0)])
    page.refresh()
    qtbot.waitUntil(lambda: table.proxy.rowCount() == len(RUNS) + 1, timeout=10000)
    assert header.sortIndicatorSection() == final and header.sortIndicatorOrder() == order
    _ordered(_column(table, final), order == Qt.SortOrder.AscendingOrder)
    with RunStore() as store:
        store.add_metrics("live-run", [("loss", 50, T0 + 7230, -10.0, 0)])
    page.refresh()
    qtbot.waitUntil(lambda: "-10 @ 50" in _column(table, final), timeout=10000)
    assert header.sortIndicatorSection() == final and header.sortIndicatorOrder() == order
    _ordered(_column(table, final), order == Qt.SortOrder.AscendingOrder)
