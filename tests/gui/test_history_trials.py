"""The History page with a trial's candidates: one row for the trial (its size and winner) with the candidates under
it, named by their set-up; selecting the trial's row compares its measured candidates side by side. The trial is
planted as its driver leaves it (its folder and record, each candidate's run marked with trial.json) in a real run
store, beside a run of no trial."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")

from fixtures.history_runs import T0, make_run  # noqa: E402
from fixtures.trial_runs import TRIAL_ID, plant_trial  # noqa: E402
from PySide6.QtCore import Qt  # noqa: E402

from traindeck.backend.runs.record.run_store import RunStore  # noqa: E402

LABEL = f"trial {TRIAL_ID} — 3 of 5 candidates measured, winner: ZeRO-2 cpu mb 4"


@pytest.fixture
def planted():
    with RunStore() as store:
        trial = plant_trial(store)
        lone = make_run(store, "lone", started=T0 + 90, samples=0, port=29700)
        yield trial, lone


@pytest.fixture
def page(qtbot):
    from traindeck.gui.context import AppContext
    from traindeck.gui.pages.history import HistoryPage

    made = HistoryPage(AppContext())
    qtbot.addWidget(made)
    yield made
    made.shutdown()
    made.ctx.tasks.wait(10000)


def _names(proxy, parent=None) -> list[str]:
    from PySide6.QtCore import QModelIndex

    parent = parent or QModelIndex()
    return [proxy.index(r, 0, parent).data() for r in range(proxy.rowCount(parent))]


def test_a_trial_is_one_row_with_its_candidates_under_it_and_selecting_it_compares_them(qtbot, planted, page):
    trial, lone = planted
    ids = {i: r.id for i, r in trial.runs.items()}
    page.resize(1400, 800)
    page.show()
    page.page_shown()
    proxy, table = page.run_table.proxy, page.run_table.table
    qtbot.waitUntil(lambda: proxy.rowCount() == 2, timeout=10000)
    # Two rows: the trial (its newest candidate is newer than the lone run) and the lone run, as before.
    assert _names(proxy) == [LABEL, "lone"]
    group = proxy.index(0, 0)
    assert proxy.index(0, 1).data() == "finished" and "measured to the end" in group.data(Qt.ItemDataRole.ToolTipRole)
    assert [proxy.index(1, c).data() for c in (1, 4)] == ["succeeded", "zero2"]
    # Its candidates under it, newest first, named by their set-up (the winner starred), not by the script.
    assert _names(proxy, group) == ["ZeRO-3 cpu+params mb 8", "ZeRO-3 mb 4", "★ ZeRO-2 cpu mb 4", "ZeRO-2 mb 2"]
    assert [proxy.index(r, 1, group).data() for r in range(4)] == ["failed (1)", "stopped", "stopped", "stopped"]
    assert "tiny-zero2-cpu-mb4" in proxy.index(2, 0, group).data(Qt.ItemDataRole.ToolTipRole)
    assert not table.isExpanded(group)  # closed until opened

    # A click on the trial's row selects its measured candidates (fastest first): Compare shows them side by side.
    qtbot.mouseClick(table.viewport(), Qt.MouseButton.LeftButton, pos=table.visualRect(group).center())
    assert page.run_table.selected_ids() == [ids[1], ids[0], ids[2]]
    assert page.compare_button.isEnabled() and not page.open_button.isEnabled()
    qtbot.mouseClick(page.compare_button, Qt.MouseButton.LeftButton)
    compared = page.compare_panel
    qtbot.waitUntil(lambda: compared.many is not None, timeout=10000)
    assert [r.run_id for r in compared.many.runs] == [ids[0], ids[1], ids[2]]  # oldest first: A, B, C
    qtbot.waitUntil(lambda: compared.overlay.result is not None, timeout=10000)
    assert len(compared.overlay.result.curves) == 3

    # Opened, sorted by name and refreshed: the candidates stay under their trial, sorted among themselves, the
    # trial open and selected.
    table.expand(group)
    table.sortByColumn(0, Qt.SortOrder.AscendingOrder)
    assert _names(proxy) == ["lone", LABEL]
    group = proxy.index(1, 0)
    assert _names(proxy, group) == ["★ ZeRO-2 cpu mb 4", "ZeRO-2 mb 2", "ZeRO-3 cpu+params mb 8", "ZeRO-3 mb 4"]
    page.refresh()
    qtbot.waitUntil(lambda: not page._refreshing, timeout=10000)
    assert table.isExpanded(proxy.index(1, 0)) and page.run_table.selected_ids() == [ids[1], ids[0], ids[2]]

    # A candidate alone opens as any run does.
    child = proxy.index(0, 0, proxy.index(1, 0))
    with qtbot.waitSignal(page.ctx.open_run, timeout=5000) as opened:
        qtbot.mouseClick(table.viewport(), Qt.MouseButton.LeftButton, pos=table.visualRect(child).center())
        qtbot.mouseDClick(table.viewport(), Qt.MouseButton.LeftButton, pos=table.visualRect(child).center())
    assert opened.args == [ids[1]]
