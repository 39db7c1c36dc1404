"""The History page's layout with a trial's candidates (a real run store, the trial planted as its driver leaves
it): the list gets a fair share of the height, kept as the user leaves it; a candidate's name is not cut; short
runs' curves in the overlay are drawn with their points marked."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")

from fixtures.history_runs import T0, make_run  # noqa: E402
from fixtures.trial_runs import TRIAL_ID, plant_trial  # noqa: E402
from PySide6.QtCore import QSettings, Qt  # noqa: E402
from PySide6.QtWidgets import QSplitter  # noqa: E402

from traindeck.backend.runs.record.run_store import RunStore  # noqa: E402


@pytest.fixture
def make_page(qtbot, tmp_path):
    made = []

    def make():
        from traindeck.gui.context import AppContext
        from traindeck.gui.pages.history import HistoryPage

        page = HistoryPage(AppContext(settings=QSettings(str(tmp_path / "window.ini"), QSettings.Format.IniFormat)))
        qtbot.addWidget(page)
        page.resize(1100, 760)
        page.show()
        page.page_shown()
        made.append(page)
        return page

    yield make
    for page in made:
        page.shutdown()
        page.ctx.tasks.wait(10000)


def test_the_list_takes_a_fair_share_of_the_height_and_keeps_the_users(qtbot, make_page):
    with RunStore() as store:
        plant_trial(store)
    page = make_page()
    qtbot.waitUntil(lambda: page.run_table.proxy.rowCount() == 1, timeout=10000)
    splitter = page.findChild(QSplitter)
    listed, compared = splitter.sizes()
    assert listed >= 0.35 * (listed + compared), splitter.sizes()

    splitter.setSizes([500, 200])  # as a drag of the handle leaves it
    splitter.splitterMoved.emit(splitter.sizes()[0], 1)
    kept = splitter.sizes()
    again = make_page()
    assert again.findChild(QSplitter).sizes() == kept


def test_a_candidates_name_is_whole_and_its_tooltip_names_it(qtbot, make_page):
    with RunStore() as store:
        trial = plant_trial(store)
    page = make_page()
    proxy, table = page.run_table.proxy, page.run_table.table
    qtbot.waitUntil(lambda: proxy.rowCount() == 1, timeout=10000)
    group = proxy.index(0, 0)
    table.expand(group)
    winner = next(proxy.index(r, 0, group) for r in range(proxy.rowCount(group))
                  if proxy.index(r, 0, group).data().startswith("★"))
    assert winner.data() == "★ ZeRO-2 cpu mb 4"
    font = table.font()
    font.setBold(True)
    from PySide6.QtGui import QFontMetrics

    drawn = table.visualRect(winner)  # the cell, after the row's indentation
    assert drawn.width() >= QFontMetrics(font).horizontalAdvance(winner.data()) + 4, (drawn, table.columnWidth(0))
    assert table.textElideMode() == Qt.TextElideMode.ElideMiddle  # a name too long for the column keeps both ends
    tip = winner.data(Qt.ItemDataRole.ToolTipRole)
    assert tip.splitlines()[0] == "★ ZeRO-2 cpu mb 4" and trial.runs[1].id in tip
    assert TRIAL_ID in proxy.index(0, 0).data()


def test_an_overlay_of_short_runs_marks_their_points(qtbot, make_page):
    with RunStore() as store:
        runs = [make_run(store, f"short-{i}", started=T0 + 60 * i, steps=5, samples=0, port=29700 + i,
                         metrics=[("loss", s, T0 + 60 * i + s, 0.732, 0) for s in range(1, 6)]) for i in range(2)]
        longer = make_run(store, "long", started=T0 + 200, steps=40, samples=0, port=29710,
                          metrics=[("loss", s, T0 + 200 + s, 1.0 / s, 0) for s in range(1, 41)])
    page = make_page()
    qtbot.waitUntil(lambda: page.run_table.proxy.rowCount() == 3, timeout=10000)
    overlay = page.compare_panel.overlay
    page.run_table.select_runs([r.id for r in runs])
    page.compare_panel.tabs.setCurrentWidget(overlay)  # a hidden chart is not drawn
    page.compare_selected()
    qtbot.waitUntil(lambda: overlay.result is not None and len(overlay.result.curves) == 2, timeout=10000)
    overlay.chart.flush()
    curves = overlay.chart.plot_item.listDataItems()
    symbols = [c.opts["symbol"] for c in curves]
    assert None not in symbols and len(set(symbols)) == 2  # each run's points, in shapes of their own

    page.run_table.select_runs([runs[0].id, longer.id])
    page.compare_selected()
    qtbot.waitUntil(lambda: overlay.result is not None and {c.label.split(": ")[1].split()[0]
                                                           for c in overlay.result.curves} == {"short-0", "long"},
                    timeout=10000)
    overlay.chart.flush()
    by_name = {c.opts["name"].split(": ")[1].split()[0]: c.opts["symbol"]
               for c in overlay.chart.plot_item.listDataItems() if c.opts.get("name")}  # not the faint raw lines
    assert by_name["long"] is None and by_name["short-0"] is not None
