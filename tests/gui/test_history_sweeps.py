"""The History page answers "which was best": a sweep's runs under the sweep's row, their swept values and the
chosen metric's final and best values as columns, the sweep's best run marked; one click on the sweep's row compares
and overlays its runs. Runs are planted in a real run store, each sweep run with the sweep.json the queue writes when
it starts one."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")

from fixtures.history_runs import T0, make_run  # noqa: E402
from PySide6.QtCore import Qt  # noqa: E402

from traindeck.backend.runs.record.run_store import RunStore  # noqa: E402
from traindeck.backend.runs.record.sweep_mark import SweepMark, write_sweep_mark  # noqa: E402


def _losses(started: float, *values: float) -> list[tuple[str, int | None, float, float, int | None]]:
    return [("loss", step, started + step, value, 0) for step, value in enumerate(values, 1)] + [
        ("accuracy", step, started + step, 1 - value / 10, 0) for step, value in enumerate(values, 1)]


@pytest.fixture
def planted():
    """A lone run between two runs of a sweep over lr (4 queued, 3 shown: one failed with the lowest loss)."""
    with RunStore() as store:
        runs = {}
        for i, (lr, state, losses) in enumerate((("1e-3", "succeeded", (2.0, 1.2, 0.9, 1.0)),
                                                 ("3e-3", "succeeded", (2.0, 0.8, 0.5, 0.6)),
                                                 ("1e-2", "failed", (2.0, 0.1)))):
            started = T0 + i * 600
            run = make_run(store, f"tiny-lr={lr}", preset="cpu-demo", started=started, state=state, samples=0,
                           metrics=_losses(started, *losses), port=29500 + i)
            write_sweep_mark(run.run_dir, SweepMark("sweep-1", "tiny", 4, {"lr": lr}))
            runs[lr] = run
        runs["lone"] = make_run(store, "lone", preset="cpu-demo", started=T0 + 300, samples=0,
                                metrics=_losses(T0 + 300, 3.0, 0.05))
        yield runs


def _column(page, header: str) -> int:
    model = page.run_table.model
    return model.headers.index(header)


def test_history_shows_a_sweep_grouped_with_its_values_final_and_best_loss_and_its_best_run(qtbot, planted):
    from traindeck.gui.context import AppContext
    from traindeck.gui.pages.history import HistoryPage

    page = HistoryPage(AppContext())
    qtbot.addWidget(page)
    try:
        page.page_shown()
        proxy = page.run_table.proxy
        qtbot.waitUntil(lambda: proxy.rowCount() == 2, timeout=10000)
        sweep, lr = _column(page, "Sweep"), _column(page, "lr")
        final, best = _column(page, "Final loss"), _column(page, "Best loss")
        # Newest first: the sweep's row (its runs under it although the lone run started between them), the lone run.
        assert [proxy.index(r, 0).data() for r in range(2)] == ["sweep tiny: lr (3 of 4 runs), best: tiny-lr=3e-3 (lowest loss reached)",
                                                                "lone"]
        group = proxy.index(0, 0)
        rows = [proxy.index(r, 0, group) for r in range(3)] + [proxy.index(1, 0)]
        cells = [{c: row.sibling(row.row(), c).data() for c in (0, sweep, lr, final, best)} for row in rows]
        assert [c[0] for c in cells] == ["tiny-lr=1e-2", "tiny-lr=3e-3", "tiny-lr=1e-3", "lone"]
        assert [c[lr] for c in cells] == ["1e-2", "3e-3", "1e-3", "-"]
        # The failed run and the lone run stopped at step 2, the others at 4: each final value says its step.
        assert [c[final] for c in cells] == ["0.1 @ 2", "0.6 @ 4", "1 @ 4", "0.05 @ 2"]
        assert "different steps" in proxy.headerData(final, Qt.Orientation.Horizontal, Qt.ItemDataRole.ToolTipRole)
        assert [c[best] for c in cells] == ["0.1", "0.5", "0.9", "0.05"]
        # The best of the sweep is lr=3e-3: the failed run's loss is no result, the lone run is no sweep's.
        assert [c[sweep] for c in cells] == ["tiny: lr (3 of 4 runs)", "★ tiny: lr (3 of 4 runs)",
                                             "tiny: lr (3 of 4 runs)", "-"]
        assert rows[1].data(Qt.ItemDataRole.FontRole).bold()
        assert "lowest loss" in rows[1].sibling(rows[1].row(), sweep).data(Qt.ItemDataRole.ToolTipRole)
        assert "lowest" in proxy.headerData(best, Qt.Orientation.Horizontal, Qt.ItemDataRole.ToolTipRole)

        # Sorting by the best loss answers "which was best" within the sweep; by lr, numerically.
        page.run_table.table.sortByColumn(best, Qt.SortOrder.AscendingOrder)
        group = proxy.index(0, 0)
        assert [proxy.index(r, 0, group).data() for r in range(3)] == ["tiny-lr=1e-2", "tiny-lr=3e-3", "tiny-lr=1e-3"]
        page.run_table.table.sortByColumn(lr, Qt.SortOrder.DescendingOrder)
        group = next(proxy.index(r, 0) for r in range(2) if proxy.index(r, 0).data() != "lone")
        assert [proxy.index(r, lr, group).data() for r in range(3)] == ["1e-2", "3e-3", "1e-3"]

        # Another metric: accuracy is best highest; the chooser lists what the runs logged.
        box = page.run_table.metric_box
        assert [box.itemText(i) for i in range(box.count())] == ["accuracy", "loss"] and box.currentText() == "loss"
        box.setCurrentText("accuracy")
        assert page.run_table.history.metric == "accuracy" and page.run_table.history.higher_is_better
        assert "Best accuracy" in page.run_table.model.headers and "Final loss" not in page.run_table.model.headers
        marked = [r.run.name for r in page.run_table.history.rows if r.is_best]
        assert marked == ["tiny-lr=3e-3"]
        # A refresh keeps the chosen metric.
        page.refresh()
        qtbot.waitUntil(lambda: not page._refreshing, timeout=10000)
        assert box.currentText() == "accuracy" and page.run_table.history.metric == "accuracy"
    finally:
        page.shutdown()
        page.ctx.tasks.wait(10000)



def _page(qtbot):
    from traindeck.gui.context import AppContext
    from traindeck.gui.pages.history import HistoryPage

    page = HistoryPage(AppContext())
    qtbot.addWidget(page)
    page.resize(1400, 800)
    page.show()
    page.page_shown()
    return page


def test_one_click_on_a_sweeps_row_compares_and_overlays_its_runs(qtbot, planted):
    page = _page(qtbot)
    try:
        proxy, table = page.run_table.proxy, page.run_table.table
        qtbot.waitUntil(lambda: proxy.rowCount() == 2, timeout=10000)
        group = proxy.index(0, 0)
        assert "select this row to compare and overlay its runs" in group.data(Qt.ItemDataRole.ToolTipRole)
        assert not table.isExpanded(group)
        # One click: its runs are selected (the best first; the failed one last), compared and overlaid at once.
        qtbot.mouseClick(table.viewport(), Qt.MouseButton.LeftButton, pos=table.visualRect(group).center())
        ids = [planted[lr].id for lr in ("3e-3", "1e-3", "1e-2")]
        assert page.run_table.selected_ids() == ids
        compared = page.compare_panel
        qtbot.waitUntil(lambda: compared.many is not None, timeout=10000)
        assert sorted(r.run_id for r in compared.many.runs) == sorted(ids)
        assert compared.tabs.currentWidget() is compared.overlay
        qtbot.waitUntil(lambda: compared.overlay.result is not None, timeout=10000)
        assert len(compared.overlay.result.curves) == 3
        assert page.group_note.isHidden()  # nothing left out
        # A refresh keeps the sweep's row selected.
        page.refresh()
        qtbot.waitUntil(lambda: not page._refreshing, timeout=10000)
        assert page.run_table.selected_ids() == ids
    finally:
        page.shutdown()
        page.ctx.tasks.wait(10000)


def test_a_sweep_of_more_runs_than_compare_takes_compares_its_best_and_says_how_many_were_left_out(qtbot):
    from traindeck.backend.runs import MAX_COMPARED

    count = MAX_COMPARED + 2
    with RunStore() as store:
        runs = []
        for i in range(count):
            started = T0 + i * 60
            run = make_run(store, f"big-lr={i}", started=started, samples=0, port=29600 + i,
                           metrics=_losses(started, 3.0, 2.0 - i / 100))  # the later, the lower its loss
            write_sweep_mark(run.run_dir, SweepMark("sweep-big", "big", count, {"lr": str(i)}))
            runs.append(run)
    page = _page(qtbot)
    try:
        proxy, table = page.run_table.proxy, page.run_table.table
        qtbot.waitUntil(lambda: proxy.rowCount() == 1, timeout=10000)
        group = proxy.index(0, 0)
        assert "2 more left out" in group.data(Qt.ItemDataRole.ToolTipRole)
        qtbot.mouseClick(table.viewport(), Qt.MouseButton.LeftButton, pos=table.visualRect(group).center())
        assert page.run_table.selected_ids() == [r.id for r in reversed(runs)][:MAX_COMPARED]
        assert not page.group_note.isHidden()
        assert f"{MAX_COMPARED} best runs by loss are compared; 2 more left out" in page.group_note.text()
        compared = page.compare_panel
        qtbot.waitUntil(lambda: compared.overlay.result is not None, timeout=10000)
        assert len(compared.overlay.result.curves) == MAX_COMPARED
        # A run chosen instead: no note.
        child = proxy.index(0, 0, group)
        table.expand(group)
        qtbot.mouseClick(table.viewport(), Qt.MouseButton.LeftButton, pos=table.visualRect(child).center())
        assert page.group_note.isHidden() and len(page.run_table.selected_ids()) == 1
    finally:
        page.shutdown()
        page.ctx.tasks.wait(10000)


def test_ctrl_d_on_the_current_sweep_row_compares_its_runs_when_nothing_is_selected(qtbot, planted):
    # A refresh can leave the keyboard's current row unselected: Home on it then moves nothing and selects nothing,
    # and Ctrl+D said "Select two to 8 runs".
    from PySide6.QtCore import QItemSelectionModel
    from PySide6.QtWidgets import QApplication

    from traindeck.gui.context import AppContext
    from traindeck.gui.pages.history import HistoryPage

    page = HistoryPage(AppContext())
    qtbot.addWidget(page)
    page.resize(1300, 800)
    page.show()
    try:
        page.page_shown()
        proxy, table = page.run_table.proxy, page.run_table.table
        qtbot.waitUntil(lambda: proxy.rowCount() == 2, timeout=10000)
        table.selectionModel().setCurrentIndex(proxy.index(0, 0), QItemSelectionModel.SelectionFlag.NoUpdate)
        table.setFocus()
        qtbot.waitUntil(lambda: QApplication.focusWidget() is table, timeout=5000)
        assert page.run_table.selected_ids() == []
        qtbot.keyClick(table, Qt.Key.Key_D, Qt.KeyboardModifier.ControlModifier)
        qtbot.waitUntil(lambda: "tiny-lr=3e-3" in page.compare_panel.compare_title.text(), timeout=10000)
        assert len(page.run_table.selected_ids()) == 3  # the sweep's row is now the selection, as shown
    finally:
        page.shutdown()
        page.ctx.tasks.wait(10000)
