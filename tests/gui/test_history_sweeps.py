"""The History page answers "which was best": a sweep's runs together, their swept values and the chosen metric's
final and best values as columns, the sweep's best run marked. Runs are planted in a real run store, each sweep
run with the sweep.json the queue writes when it starts one."""

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
        qtbot.waitUntil(lambda: proxy.rowCount() == 4, timeout=10000)
        sweep, lr = _column(page, "Sweep"), _column(page, "lr")
        final, best = _column(page, "Final loss"), _column(page, "Best loss")
        cells = [{c: proxy.index(r, c).data() for c in (0, sweep, lr, final, best)} for r in range(4)]
        # Newest first, the sweep's runs together although the lone run started between them.
        assert [c[0] for c in cells] == ["tiny-lr=1e-2", "tiny-lr=3e-3", "tiny-lr=1e-3", "lone"]
        assert [c[lr] for c in cells] == ["1e-2", "3e-3", "1e-3", "-"]
        # The failed run and the lone run stopped at step 2, the others at 4: each final value says its step.
        assert [c[final] for c in cells] == ["0.1 at step 2", "0.6 at step 4", "1 at step 4", "0.05 at step 2"]
        assert "different steps" in proxy.headerData(final, Qt.Orientation.Horizontal, Qt.ItemDataRole.ToolTipRole)
        assert [c[best] for c in cells] == ["0.1", "0.5", "0.9", "0.05"]
        # The best of the sweep is lr=3e-3: the failed run's loss is no result, the lone run is no sweep's.
        assert [c[sweep] for c in cells] == ["tiny: lr (3 of 4 runs)", "★ tiny: lr (3 of 4 runs)",
                                             "tiny: lr (3 of 4 runs)", "-"]
        assert proxy.index(1, 0).data(Qt.ItemDataRole.FontRole).bold()
        assert "lowest loss" in proxy.index(1, sweep).data(Qt.ItemDataRole.ToolTipRole)
        assert "lowest" in proxy.headerData(best, Qt.Orientation.Horizontal, Qt.ItemDataRole.ToolTipRole)

        # Sorting by the best loss answers "which was best" across every run; by lr, numerically.
        page.run_table.table.sortByColumn(best, Qt.SortOrder.AscendingOrder)
        assert [proxy.index(r, 0).data() for r in range(4)] == ["lone", "tiny-lr=1e-2", "tiny-lr=3e-3",
                                                                 "tiny-lr=1e-3"]
        page.run_table.table.sortByColumn(lr, Qt.SortOrder.DescendingOrder)
        assert [proxy.index(r, lr).data() for r in range(3)] == ["1e-2", "3e-3", "1e-3"]

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

