"""The History page: the run store's rows, opening a run, comparing two runs with different ZeRO stages."""

from __future__ import annotations

import psutil
import pytest

pytest.importorskip("PySide6")

from fixtures.history_runs import T0, make_run, peak_gpu_bytes  # noqa: E402
from PySide6.QtCore import Qt  # noqa: E402

from traindeck.backend.core import format_bytes  # noqa: E402
from traindeck.backend.core.paths import run_store_path  # noqa: E402
from traindeck.backend.runs.record.run_store import RunRecord, RunStore  # noqa: E402


@pytest.fixture
def store():
    with RunStore() as s:
        yield s


@pytest.fixture
def make_page(qtbot):
    made = []

    def make():
        from traindeck.gui.context import AppContext
        from traindeck.gui.pages.history import HistoryPage

        ctx = AppContext()
        page = HistoryPage(ctx)
        qtbot.addWidget(page)
        made.append(page)
        return page

    yield make
    for page in made:
        page.shutdown()
        page.ctx.tasks.wait(10000)


def _cells(page, row: int) -> list[str]:
    return [page.run_table.proxy.index(row, c).data() for c in range(page.run_table.proxy.columnCount())]


def _select(qtbot, page, run_ids: list[str]) -> None:
    page.run_table.select_runs(run_ids)
    assert sorted(page.run_table.selected_ids()) == sorted(run_ids)


def test_lists_the_stores_runs_newest_first_with_their_figures(qtbot, store, make_page):
    zero2 = make_run(store, "gpt2-zero2", stage=2, seconds_per_step=0.5)
    failed = make_run(store, "llama", preset="zero3", started=T0 + 3600, state="failed", samples=0)
    page = make_page()
    page.page_shown()
    qtbot.waitUntil(lambda: page.run_table.proxy.rowCount() == 2, timeout=10000)
    assert page.run_table.selected_ids() == []
    first, second = _cells(page, 0), _cells(page, 1)
    assert first[:2] == ["llama", "failed (1)"] and first[4] == "zero3" and first[5] == "-"
    assert second[0] == "gpt2-zero2" and second[1] == "succeeded" and second[4] == "zero2"
    assert second[3] == "1:20" and second[5] == format_bytes(peak_gpu_bytes(30)) and second[7] == "0.5 s"
    assert "2 runs" in page.count_label.text()
    tip = page.run_table.proxy.index(1, 7).data(Qt.ItemDataRole.ToolTipRole)
    assert tip == "From 'loss' logged at steps 10 to 100"

    # A run started elsewhere shows up on the next refresh; the selection stays on its run.
    _select(qtbot, page, [zero2.id])
    me = psutil.Process()  # the test stands in for the run's supervisor (a run without one is marked lost)
    store.add_run(RunRecord(id="live-run", run_dir="/nowhere", created_at=T0 + 7200, started_at=T0 + 7200,
                            name="live", progress={"current": 4, "rate": 0.25, "unit": "it"},
                            supervisor_pid=me.pid, supervisor_started=me.create_time()))
    page.refresh()
    qtbot.waitUntil(lambda: page.run_table.proxy.rowCount() == 3, timeout=10000)
    assert _cells(page, 0)[:2] == ["live", "running"] and _cells(page, 0)[7] == "4 s"
    assert "1 running" in page.count_label.text()
    assert page.run_table.selected_ids() == [zero2.id]
    assert failed.id != zero2.id


def test_open_emits_open_run_for_the_double_clicked_run(qtbot, store, make_page):
    run = make_run(store, "only", samples=0)
    page = make_page()
    page.show()
    page.page_shown()
    qtbot.waitUntil(lambda: page.run_table.proxy.rowCount() == 1, timeout=10000)
    rect = page.run_table.table.visualRect(page.run_table.proxy.index(0, 0))
    with qtbot.waitSignal(page.ctx.open_run, timeout=5000) as opened:
        qtbot.mouseClick(page.run_table.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
        qtbot.mouseDClick(page.run_table.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert opened.args == [run.id]
    assert page.open_button.isEnabled() and not page.compare_button.isEnabled()
    with qtbot.waitSignal(page.ctx.open_run, timeout=5000) as opened:
        qtbot.mouseClick(page.open_button, Qt.MouseButton.LeftButton)
    assert opened.args == [run.id]


def test_compare_two_runs_with_different_zero_stages(qtbot, store, make_page):
    a = make_run(store, "gpt2", stage=2, seconds_per_step=0.5, port=29501)
    b = make_run(store, "gpt2", stage=3, seconds_per_step=0.75, started=T0 + 3600, port=29642)
    page = make_page()
    compared = page.compare_panel
    page.page_shown()
    qtbot.waitUntil(lambda: page.run_table.proxy.rowCount() == 2, timeout=10000)
    assert not page.compare_button.isEnabled()
    _select(qtbot, page, [a.id, b.id])
    assert page.compare_button.isEnabled() and not page.open_button.isEnabled()
    qtbot.mouseClick(page.compare_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: compared.comparison is not None, timeout=10000)

    assert (compared.comparison.a.run_id, compared.comparison.b.run_id) == (a.id, b.id)  # the older run is A
    config = {compared.config_table.item(r, 0).text(): (compared.config_table.item(r, 1).text(),
                                                        compared.config_table.item(r, 2).text())
              for r in range(compared.config_table.rowCount())}
    assert config["deepspeed.zero_optimization.stage"] == ("2", "3")
    assert all(a.run_dir not in key for key in config)
    assert compared.tabs.tabText(1) == f"Config differences ({len(config)})"
    diff = compared.diff_view.toPlainText()
    assert '-    "stage": 2,' in diff and '+    "stage": 3,' in diff
    table = compared.figures_table
    figures = {table.item(r, 0).text(): [table.item(r, c).text() for c in (1, 2, 3)] for r in range(table.rowCount())}
    assert figures["Seconds per step"] == ["0.5 s", "0.75 s", "1.50x (higher)"]
    assert figures["Peak GPU memory (fullest GPU)"][:2] == [format_bytes(peak_gpu_bytes(30))] * 2
    assert "Peak host RAM (the run's processes)" in figures and "  loss" in figures
    assert a.id in compared.compare_title.text() and b.id in compared.compare_title.text()


def test_compare_names_the_one_script_argument_that_differs(qtbot, store, make_page):
    """Issue 12: both command cells and the unified diff were cut at the same start, hiding --steps 100 vs 600."""
    import json
    from pathlib import Path

    a = make_run(store, "demo", port=29501)
    b = make_run(store, "demo", started=T0 + 60, port=29502)
    for run, steps in ((a, "100"), (b, "600")):
        path = Path(run.run_dir) / "command.json"
        command = json.loads(path.read_text())
        command["argv"] = [*command["argv"], "--steps", steps]
        path.write_text(json.dumps(command))
    page = make_page()
    compared = page.compare_panel
    page.page_shown()
    qtbot.waitUntil(lambda: page.run_table.proxy.rowCount() == 2, timeout=10000)
    compared.compare(a.id, b.id)
    qtbot.waitUntil(lambda: compared.comparison is not None, timeout=10000)
    table = compared.config_table
    rows = [tuple(table.item(r, c).text() for c in range(3)) for r in range(table.rowCount())]
    assert rows == [("command: --steps", "100", "600")]
    assert "\n-100\n+600\n" in compared.diff_view.toPlainText()


def test_an_empty_history_says_so_and_creates_no_store(qtbot, make_page):
    page = make_page()
    page.page_shown()
    qtbot.waitUntil(lambda: "No runs yet" in page.count_label.text(), timeout=10000)
    assert not run_store_path().exists()
    page.compare_selected()
    assert "two to 8 runs" in page.compare_panel.compare_title.text()


def test_demo_writes_its_own_store_and_compares_two_runs(qtbot, make_page):
    page = make_page()
    runs = page.run_table
    page.load_demo()
    qtbot.waitUntil(lambda: page.compare_panel.comparison is not None, timeout=20000)
    assert runs.proxy.rowCount() == 4
    names = [r.name for r in runs.rows]
    assert len(set(names)) == 4, names  # each demo run tells itself apart by name
    assert not run_store_path().exists()  # the user's store is untouched
    assert "deepspeed.zero_optimization.stage" in {d.key for d in page.compare_panel.comparison.differences}
    # No cell is cut: each figure column holds its widest text, the state column its icon too.
    from PySide6.QtWidgets import QStyle

    metrics = runs.table.fontMetrics()
    icon = runs.table.style().pixelMetric(QStyle.PixelMetric.PM_SmallIconSize)
    for column in range(1, runs.model.columnCount()):
        widest = max(metrics.horizontalAdvance(t[column]) for t in runs.model.texts())
        widest += icon if column == 1 else 0
        assert runs.table.columnWidth(column) >= widest + 8, (column, runs.table.columnWidth(column), widest)
