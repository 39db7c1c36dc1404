"""The History page with more than two runs: three compared side by side, their curves overlaid (cut at equal
steps), and the throughput column's width and source. Real run directories, a real run store, offscreen widgets."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")

from fixtures.history_runs import T0, make_run  # noqa: E402
from PySide6.QtCore import Qt  # noqa: E402

from traindeck.backend.runs.record.run_store import RunStore  # noqa: E402


@pytest.fixture
def store():
    with RunStore() as s:
        yield s


@pytest.fixture
def page(qtbot):
    from traindeck.gui.context import AppContext
    from traindeck.gui.pages.history import HistoryPage

    made = HistoryPage(AppContext())
    qtbot.addWidget(made)
    yield made
    made.shutdown()
    made.ctx.tasks.wait(10000)


def _loss(started: float, steps: int, sps: float, offset: float = 0.0) -> list:
    return [("loss", s, started + 30 + s * sps, 3.0 - s / 300 + offset, 0) for s in range(10, steps + 1, 10)]


def _shown(qtbot, page, count: int) -> None:
    page.page_shown()
    qtbot.waitUntil(lambda: page.run_table.proxy.rowCount() == count, timeout=10000)


def test_three_runs_compared_side_by_side(qtbot, store, page):
    runs = [make_run(store, f"gpt2-{i}", stage=stage, micro_batch=batch, seconds_per_step=sps, started=T0 + i * 600,
                     port=29501 + i)
            for i, (stage, batch, sps) in enumerate(((2, 8, 0.5), (3, 8, 0.8), (3, 4, 0.4)))]
    _shown(qtbot, page, 3)
    page.run_table.select_runs([r.id for r in runs])
    assert page.compare_button.isEnabled()
    qtbot.mouseClick(page.compare_button, Qt.MouseButton.LeftButton)
    compared = page.compare_panel
    qtbot.waitUntil(lambda: compared.many is not None, timeout=10000)
    assert [r.run_id for r in compared.many.runs] == [r.id for r in runs]  # oldest first: A, B, C

    def table(widget):
        headers = [widget.horizontalHeaderItem(c).text() for c in range(widget.columnCount())]
        return headers, {widget.item(r, 0).text(): [widget.item(r, c).text() for c in range(1, widget.columnCount())]
                         for r in range(widget.rowCount())}

    headers, figures = table(compared.figures_table)
    assert headers == ["", "A", "B", "C"]
    assert figures["Seconds per step"] == ["0.5 s", "0.8 s (1.60x)", "0.4 s (0.80x)"]
    headers, config = table(compared.config_table)
    assert headers == ["Setting", "A", "B", "C"]
    assert config["deepspeed.zero_optimization.stage"] == ["2", "3", "3"]
    assert config["deepspeed.train_micro_batch_size_per_gpu"] == ["8", "8", "4"]
    headers, command = table(compared.command_table)
    assert headers == ["#", "A", "B", "C"] and command["1"] == ["accelerate"] * 3
    assert compared.provenance_table.item(0, 0).text() == "Select two runs to compare this."
    assert all(r.id in compared.compare_title.text() for r in runs)
    qtbot.waitUntil(lambda: compared.overlay.result is not None, timeout=10000)
    assert len(compared.overlay.result.curves) == 3


def test_overlay_draws_one_line_a_run_and_cuts_them_at_equal_steps(qtbot, store, page):
    long = make_run(store, "long", steps=216, metrics=_loss(T0, 216, 0.5), seconds_per_step=0.5)
    short = make_run(store, "short", steps=100, metrics=_loss(T0 + 600, 100, 0.5, 0.1), started=T0 + 600)
    _shown(qtbot, page, 2)
    page.run_table.select_runs([long.id, short.id])
    page.compare_selected()
    overlay = page.compare_panel.overlay
    qtbot.waitUntil(lambda: overlay.result is not None, timeout=10000)
    chart = overlay.chart
    assert chart.series_names() == ["A: long", "B: short"]
    assert [chart.data(n)[0][-1] for n in chart.series_names()] == [210, 100]
    pens = {item.opts["pen"].color().name() for item in chart.plot_item.listDataItems()}
    assert len(pens) == 2  # one colour a run
    assert "end at different steps" in overlay.note.text()
    assert overlay.metric_box.currentText() == "loss"
    before = overlay.result
    overlay.equal_steps.setChecked(True)
    qtbot.waitUntil(lambda: overlay.result is not before, timeout=10000)
    assert [chart.data(n)[0][-1] for n in chart.series_names()] == [100, 100]
    assert chart.last("A: long") == pytest.approx(3.0 - 100 / 300)
    assert "Cut at step 100" in overlay.note.text()
    # The table's final column says the step each final value is at.
    final = page.run_table.model.headers.index("Final loss")
    finals = sorted(page.run_table.proxy.index(r, final).data() for r in range(2))
    assert finals == ["2.3 @ 210", "2.767 @ 100"]


def test_throughput_column_is_wide_and_says_where_its_figure_comes_from(qtbot, store, page):
    run = make_run(store, "tiny", micro_batch=4, steps=216, seconds_per_step=0.218)
    store.add_metrics(run.id, [("samples_per_sec", 216, T0 + 100, 678.0534, None)])
    _shown(qtbot, page, 1)
    throughput = page.run_table.model.headers.index("Throughput")
    table = page.run_table.table
    cell = page.run_table.proxy.index(0, throughput)
    assert cell.data() == "36.7 samples/s"
    tip = cell.data(Qt.ItemDataRole.ToolTipRole)
    assert "step rate (0.218 s/step) x batch 8" in tip and "DeepSpeed's engine figure" in tip and "678" in tip
    # Wide enough for a five-digit rate, not only for today's "36.7 samples/s": it stays whole as runs come.
    assert table.columnWidth(throughput) >= table.fontMetrics().horizontalAdvance("88,888 samples/s")
