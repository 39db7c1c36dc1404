"""The Runs page's layout and keys over a real run store: the charts' share of the height (given once the run has
metrics, the person's divider remembered, Ctrl+Shift+M), DeepSpeed's engine figures labelled wherever they are
named, each legend naming its own line's newest point, and the page's keys (listed by F1) reaching the tabs and the
charts' options."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QWidget

from traindeck.backend.logparse import ENGINE_LABEL
from traindeck.backend.runs.record.layout import create_run_dir
from traindeck.backend.runs.record.run_store import RunRecord, RunStore
from traindeck.gui.pages.runs import CHARTS_SHARE, KEYS, MAXIMISE_KEY, RunsPage
from traindeck.gui.pages.runs import charts_panel as runs_charts

T0 = float(int(time.time()) - 1000)
Metric = tuple[str, int | None, float, float, int | None]


def add_run(name: str, metrics: list[Metric], log: bytes = b"training\n") -> RunRecord:
    run_dir = create_run_dir()
    run_dir.output.write_bytes(log)
    record = RunRecord(id=run_dir.run_id, run_dir=str(run_dir.path), created_at=time.time(), name=name,
                       started_at=T0)  # created just now: a running run without a supervisor is not lost yet
    with RunStore() as store:
        store.add_run(record)
        store.add_metrics(record.id, metrics)
    return record


def deepspeed_metrics(steps: range) -> list[Metric]:
    return [(n, s, T0 + s, v, None) for s in steps
            for n, v in (("loss", 1.0 / s), ("samples_per_sec", 351.9), ("curr_samples_per_sec", 552.9),
                         ("epoch", s / 100))]


@pytest.fixture
def make_page(make_runs_page) -> Callable[[], RunsPage]:  # type: ignore[no-untyped-def]
    return lambda: make_runs_page((1360, 860))  # type: ignore[no-any-return]


def open_with_metrics(qtbot, page: RunsPage, record: RunRecord) -> None:  # type: ignore[no-untyped-def]
    page.open_run(record.id)
    qtbot.waitUntil(lambda: page.charts.loss_chart.point_count("loss") > 0, timeout=15000)


def lower_share(page: RunsPage) -> float:
    console, tabs = page.splitter.sizes()
    return tabs / (console + tabs)


# ------------------------------------------------------------------------------------------------ the height
def test_the_charts_get_more_than_half_the_height_once_the_run_has_metrics(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    # The walk at 1360x860: the tabs had 300 of 900 px, the loss chart ~150 px, the grid 3.5 of its 9 charts.
    quiet = add_run("quiet", [])
    page = make_page()
    page.open_run(quiet.id)
    qtbot.waitUntil(lambda: page.header.state_text() == "running", timeout=15000)
    assert lower_share(page) < 0.5  # no metrics yet: the console has the room
    record = add_run("busy", deepspeed_metrics(range(1, 40)))
    open_with_metrics(qtbot, page, record)
    qtbot.waitUntil(lambda: lower_share(page) >= CHARTS_SHARE - 0.01, timeout=5000)
    assert page.charts.loss_chart.height() >= 300, page.charts.loss_chart.height()


def test_the_step_tab_gets_the_charts_height_for_a_run_without_metrics(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    # A quiet script (no loss lines): at 1600x1000 the Step tab's bars were ~120 px under a console of 2/3.
    quiet = add_run("quiet", [])
    page = make_page()
    page.open_run(quiet.id)
    qtbot.waitUntil(lambda: page.header.state_text() == "running", timeout=15000)
    assert lower_share(page) < 0.5
    page.lower_tabs.setCurrentIndex(page.lower_tabs.checkpoints_tab)
    assert lower_share(page) < 0.5  # the checkpoints' table needs no more
    page.lower_tabs.setCurrentIndex(page.lower_tabs.step_tab)
    qtbot.waitUntil(lambda: lower_share(page) >= CHARTS_SHARE - 0.01, timeout=5000)


def test_a_moved_divider_is_kept_and_comes_back_in_the_next_page(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    record = add_run("busy", deepspeed_metrics(range(1, 40)))
    page = make_page()
    open_with_metrics(qtbot, page, record)
    qtbot.waitUntil(lambda: lower_share(page) >= CHARTS_SHARE - 0.01, timeout=5000)
    total = sum(page.splitter.sizes())
    handle = page.splitter.handle(1)
    # The person drags the divider down (a real drag on the handle: splitterMoved as a mouse gives it).
    start = handle.rect().center()
    QTest.mousePress(handle, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, start)
    QTest.mouseMove(handle, start + type(start)(0, 150))
    QTest.mouseRelease(handle, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, start + type(start)(0, 150))
    qtbot.waitUntil(lambda: lower_share(page) < 0.5, timeout=5000)
    chosen = page.splitter.sizes()
    page.open_run(add_run("other", deepspeed_metrics(range(1, 30))).id)  # metrics again: the choice stands
    qtbot.waitUntil(lambda: page.charts.loss_chart.point_count("loss") == 29, timeout=15000)
    assert page.splitter.sizes() == chosen
    again = make_page()  # the next start (the same settings file)
    qtbot.waitUntil(lambda: sum(again.splitter.sizes()) == total, timeout=5000)  # laid out at the same size
    assert abs(again.splitter.sizes()[1] - chosen[1]) <= 2, (again.splitter.sizes(), chosen)


def test_ctrl_shift_m_gives_the_tabs_the_whole_height_and_back(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    record = add_run("busy", deepspeed_metrics(range(1, 40)))
    page = make_page()
    open_with_metrics(qtbot, page, record)
    qtbot.waitUntil(lambda: lower_share(page) >= CHARTS_SHARE - 0.01, timeout=5000)
    before = page.splitter.sizes()
    page.run_list.setFocus()
    qtbot.waitUntil(lambda: QApplication.focusWidget() is page.run_list, timeout=5000)
    QTest.keyClick(page.run_list, Qt.Key.Key_M, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    qtbot.waitUntil(lambda: page.console.isHidden() and page.lower_tabs.height() >= sum(before) - 2, timeout=5000)
    assert page.maximised
    QTest.keyClick(page.run_list, Qt.Key.Key_M, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    qtbot.waitUntil(lambda: page.console.isVisible() and page.splitter.sizes() == before, timeout=5000)


# ------------------------------------------------------------------------------------------------ engine figures
def test_deepspeeds_engine_figures_are_labelled_in_last_metrics_and_chart_titles(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    # The walk: the header's 36.5 samples/s beside Last metrics' samples_per_sec 351.9 and curr_samples_per_sec
    # 552.9, the reason only in a tooltip.
    record = add_run("engine", deepspeed_metrics(range(1, 6)))
    page = make_page()
    open_with_metrics(qtbot, page, record)
    charts = page.charts
    qtbot.waitUntil(lambda: charts.figure_shown("samples_per_sec") is not None, timeout=15000)
    grid = charts.metrics_grid
    texts = [grid.itemAtPosition(row, 0).widget().text() for row in range(grid.rowCount())
             if grid.itemAtPosition(row, 0) is not None]
    heading = next(i for i, text in enumerate(texts) if ENGINE_LABEL in text)
    assert "not wall-clock" in texts[heading]
    assert texts[heading + 1:] == ["curr_samples_per_sec", "samples_per_sec"]  # under the heading, the rest above
    assert texts[:heading] == ["epoch", "loss"]
    charts.other_box.setCurrentIndex(charts.other_box.findText("samples_per_sec"))
    qtbot.waitUntil(lambda: ENGINE_LABEL in charts.other_chart.plot_item.titleLabel.text, timeout=5000)
    charts.grid_button.click()
    qtbot.waitUntil(lambda: len(charts.grid._cells) == 4, timeout=15000)
    titles = {cell.name: cell.title.full_text() for cell in charts.grid._cells}
    assert ENGINE_LABEL in titles["samples_per_sec"] and ENGINE_LABEL in titles["curr_samples_per_sec"]
    assert titles["loss"] == "loss" and titles["epoch"] == "epoch"
    # A title longer than its cell ends in "…", its start (the metric's name) kept and the whole in the tooltip.
    cell = next(c for c in charts.grid._cells if c.name == "curr_samples_per_sec")
    cell.title.resize(120, cell.title.height())
    shown = cell.title.text()
    assert shown.startswith("curr_samp") and shown.endswith("…") and ENGINE_LABEL in cell.title.toolTip()


# ------------------------------------------------------------------------------------------------ legends
@pytest.mark.parametrize("grid", [False, True])
def test_each_legend_names_its_own_lines_newest_point(qtbot, make_page, monkeypatch, grid) -> None:  # type: ignore[no-untyped-def]
    # The walk: the loss line ended at step 60 while its legend gave step 70's value (the legend took each read,
    # the line was redrawn at the charts' slower pace). Last metrics waits for the line too: the two say the same.
    record = add_run("live", [("loss", s, T0 + s, 2.0 / (1 + s / 20), None) for s in range(10, 190, 10)])
    page = make_page()
    open_with_metrics(qtbot, page, record)
    charts = page.charts
    if grid:
        charts.grid_button.click()
        qtbot.waitUntil(lambda: "loss" in charts.grid.charts and charts.grid.charts["loss"].point_count("loss") > 0,
                        timeout=15000)
    chart = charts.grid.charts["loss"] if grid else charts.loss_chart
    drawn = chart.point_count("loss")
    monkeypatch.setattr(runs_charts, "CHART_MS", 600_000)  # the lines wait: only a forced draw moves them
    with RunStore() as store:
        store.add_metrics(record.id, [("loss", 190, time.time(), 0.0987, None)])
    qtbot.waitUntil(lambda: page.watched.metrics.get("loss") == 0.0987, timeout=15000)  # the read arrived
    qtbot.wait(1200)  # past the page's clock tick, which showed Last metrics on its own before
    assert chart.point_count("loss") == drawn  # the line not redrawn yet
    assert charts.legend_figure("loss") == f"{chart.last('loss'):.4g}" != "0.0987"
    assert charts.figure_shown("loss") == charts.legend_figure("loss")  # Last metrics waits with the line
    charts.draw(force=True)  # the line redrawn: its legend with it, and Last metrics
    assert chart.point_count("loss") == drawn + 1
    assert charts.legend_figure("loss") == "0.0987" == charts.figure_shown("loss")


# ------------------------------------------------------------------------------------------------ keys
def test_the_pages_keys_reach_the_tabs_and_the_charts_options(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    record = add_run("keys", deepspeed_metrics(range(1, 20)))
    page = make_page()
    open_with_metrics(qtbot, page, record)
    charts, tabs = page.charts, page.lower_tabs
    focus = page.run_list  # after Ctrl+3 and a Tab: the focus in the list, nowhere near the charts
    focus.setFocus()
    qtbot.waitUntil(lambda: QApplication.focusWidget() is focus, timeout=5000)

    def press(key: Qt.Key, widget: QWidget | None = None) -> None:
        QTest.keyClick(widget or QApplication.focusWidget(), key, Qt.KeyboardModifier.AltModifier)

    press(Qt.Key.Key_S)
    assert tabs.currentWidget() is page.step_panel
    press(Qt.Key.Key_K)
    assert tabs.currentWidget() is page.leftovers
    press(Qt.Key.Key_C)
    assert tabs.currentWidget() is charts
    press(Qt.Key.Key_A)
    assert charts.grid_shown
    press(Qt.Key.Key_O)
    assert not charts.grid_shown and tabs.currentWidget() is charts
    log_y = charts.log_y
    press(Qt.Key.Key_L)
    assert charts.log_y is not log_y
    press(Qt.Key.Key_L)
    assert charts.log_y is log_y
    modes = [charts.x_mode]
    for _ in range(3):
        press(Qt.Key.Key_X)
        modes.append(charts.x_mode)
    assert modes == ["step", "time", "relative", "step"]
    press(Qt.Key.Key_M)
    assert QApplication.focusWidget() is charts.smoothing_slider
    weight = charts.smoothing
    QTest.keyClick(charts.smoothing_slider, Qt.Key.Key_Left)
    assert charts.smoothing == pytest.approx(weight - 0.01)
    view = charts.loss_chart.plot_item.getViewBox()
    view.setXRange(1, 5, padding=0)
    view.sigRangeChangedManually.emit([True, False])  # what a mouse zoom emits: no longer following
    assert not charts.loss_chart.following
    QTest.keyClick(QApplication.focusWidget(), Qt.Key.Key_End, Qt.KeyboardModifier.AltModifier)
    assert charts.loss_chart.following


def test_f1_lists_every_key_of_the_page() -> None:
    from traindeck.gui.main_window import SHORTCUTS

    listed = " / ".join(keys for keys, _what in SHORTCUTS)
    assert [key for key in KEYS if key not in listed.split(" / ")] == []
    assert MAXIMISE_KEY in KEYS


def test_tab_from_the_run_list_reaches_the_charts_in_reading_order(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    record = add_run("tabs", deepspeed_metrics(range(1, 20)))
    page = make_page()
    open_with_metrics(qtbot, page, record)
    page.run_list.setFocus()
    qtbot.waitUntil(lambda: QApplication.focusWidget() is page.run_list, timeout=5000)
    seen: list[QWidget] = []
    for _ in range(40):
        QTest.keyClick(QApplication.focusWidget(), Qt.Key.Key_Tab)
        widget = QApplication.focusWidget()
        if widget is page.run_list or widget in seen:
            break
        seen.append(widget)
    charts = page.charts
    order = [page.console.search, page.lower_tabs.tabBar(), charts.overview_button, charts.smoothing_slider,
             charts.log_box, charts.x_box]
    assert all(widget in seen for widget in order), [type(w).__name__ for w in seen]
    positions = [seen.index(widget) for widget in order]
    assert positions == sorted(positions), [type(w).__name__ for w in seen]
