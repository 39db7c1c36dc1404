"""The Runs page's System view: the run's recorded resource samples (written into a real run store as its supervisor
writes them) charted beside its loss, on the tab's x axis, kept up to date as samples land, and saying why where a
series is absent; and clock-time axes that never label half seconds."""

from __future__ import annotations

import csv
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QFileDialog, QScrollArea

from traindeck.backend.core.paths import run_store_path
from traindeck.backend.monitor.demo import demo_samples
from traindeck.backend.monitor.sample_store import ResourceWriter
from traindeck.backend.monitor.snapshots import ResourceSample
from traindeck.backend.runs.record.layout import create_run_dir
from traindeck.backend.runs.record.run_store import RunRecord, RunStore
from traindeck.gui.pages.runs import RunsPage
from traindeck.gui.widgets.charts import TimeSeriesChart

WAIT_MS = 20000
NO_NVML = "the NVML library (libnvidia-ml.so.1) is not installed"


@pytest.fixture
def make_page(make_runs_page) -> Callable[[], RunsPage]:  # type: ignore[no-untyped-def]
    return lambda: make_runs_page((1500, 950))  # type: ignore[no-any-return]


def add_run(started: float, steps: list[tuple[int, float]], state: str = "running") -> RunRecord:
    """A run with a loss logged at each (step, time)."""
    run_dir = create_run_dir()
    run_dir.output.write_bytes(b"")
    record = RunRecord(id=run_dir.run_id, run_dir=str(run_dir.path), created_at=time.time(), name="sys",
                       state=state, started_at=started)
    with RunStore() as store:
        store.add_run(record)
        store.add_metrics(record.id, [("loss", step, t, 3.0 - 0.01 * step, None) for step, t in steps])
    return record


def record_samples(run_id: str, samples: list[ResourceSample], writer: ResourceWriter | None = None) -> ResourceWriter:
    """The samples written as the run's supervisor records them (the writer kept open for more)."""
    writer = writer or ResourceWriter(run_store_path(), run_id, interval_s=1.0, started_at=samples[0].t)
    for sample in samples:
        writer.write(sample, commit=False)
    writer.commit()
    return writer


def open_system(qtbot, page: RunsPage, record: RunRecord) -> None:  # type: ignore[no-untyped-def]
    page.open_run(record.id)
    qtbot.waitUntil(lambda: page.record is not None, timeout=WAIT_MS)
    page.charts.system_button.click()
    assert page.charts.system_shown


def rank_rss(sample: ResourceSample, rank: int) -> float:
    assert sample.run is not None
    return float(next(p.rss_bytes for p in sample.run.ranks if p.rank == rank))


def test_the_system_view_charts_the_runs_recorded_figures_on_each_x_axis_and_live(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    samples = demo_samples(seconds=180, end=time.time() - 5)
    first, older, newer = samples[0].t, samples[:150], samples[150:]
    steps = [(step, first + 10 + 2 * step) for step in range(60)]  # a step every 2 s from 10 s in
    record = add_run(first, steps)
    writer = record_samples(record.id, older)
    page = make_page()
    page.charts.set_x_mode("time")
    open_system(qtbot, page, record)
    charts = page.charts.system.charts
    qtbot.waitUntil(lambda: charts["gpu_util"].point_count("GPU 1") == len(older), timeout=WAIT_MS)
    last = older[-1]
    # The recorded figures, each in its chart, with their units as people read them.
    assert charts["gpu_util"].last("GPU 0") == pytest.approx(last.gpus[0].utilization_percent)
    assert charts["gpu_memory"].last("GPU 1") == pytest.approx(last.gpus[1].memory_used_bytes)
    assert charts["gpu_memory"].references()["GPU size"] == pytest.approx(last.gpus[0].memory_total_bytes)
    assert charts["cpu"].last("host") == pytest.approx(last.host.cpu_percent)
    assert charts["rank_rss"].last("rank 1") == pytest.approx(rank_rss(last, 1))
    assert last.run is not None
    assert charts["rank_rss"].last("all ranks") == pytest.approx(last.run.ranks_rss_bytes)
    assert charts["disk"].point_count("written") == len(older) and charts["network"].point_count("received") > 0
    x, _ = charts["gpu_util"].data("GPU 0")
    assert x[0] == pytest.approx(first) and x[-1] == pytest.approx(last.t)  # wall time
    for chart in charts.values():
        chart.flush()
    assert charts["gpu_util"].legend_text("GPU 0").endswith(" %")
    assert "GiB" in charts["gpu_memory"].legend_text("GPU 0")
    assert all(page.charts.system_reason(key) is None for key in charts)
    # The loss beside them, sharing their zoom.
    qtbot.waitUntil(lambda: page.charts.system.loss_chart.point_count("loss") == len(steps), timeout=WAIT_MS)
    assert all(chart._leader is page.charts.system.loss_chart for chart in charts.values())

    # New samples land while the run goes on: appended on the next polls.
    record_samples(record.id, newer, writer)
    writer.close()
    qtbot.waitUntil(lambda: charts["gpu_util"].point_count("GPU 0") == len(samples), timeout=WAIT_MS)
    assert charts["gpu_util"].last("GPU 0") == pytest.approx(samples[-1].gpus[0].utilization_percent)
    assert charts["rank_rss"].last("rank 0") == pytest.approx(rank_rss(samples[-1], 0))

    # Time since the start.
    page.charts.set_x_mode("relative")
    charts = page.charts.system.charts
    qtbot.waitUntil(lambda: charts["cpu"].point_count("host") == len(samples), timeout=WAIT_MS)
    x, _ = charts["cpu"].data("host")
    assert x[0] == pytest.approx(0.0) and x[-1] == pytest.approx(samples[-1].t - first)

    # By step: each sample at the step the run was at then; none before the first logged step.
    page.charts.set_x_mode("step")
    charts = page.charts.system.charts
    qtbot.waitUntil(lambda: charts["cpu"].point_count("host") > 0, timeout=WAIT_MS)
    x, y = charts["cpu"].data("host")
    at = [s for s in samples if s.t >= steps[0][1]]
    assert len(x) == len(at)
    assert x[0] == pytest.approx((at[0].t - first - 10) / 2)
    assert y[0] == pytest.approx(at[0].host.cpu_percent)
    assert "by step" in page.charts.system.note.text()


def test_a_rank_that_exits_before_the_others_says_so_and_the_sum_counts_the_live_ones(  # type: ignore[no-untyped-def]
        qtbot, make_page) -> None:
    """A live 4-rank run whose rank 3 exits while the view watches: its legend says when (in the x axis' words)
    instead of a last figure that is no figure of now, and the sum's legend says it counts the ranks left, whose
    figures add up to it."""
    from fixtures.monitor_samples import training_sample

    from traindeck.gui.widgets.chart_axis import format_value

    t0 = float(int(time.time())) - 100

    def sample(i: int) -> ResourceSample:
        whole = training_sample(i, t0=t0, gpus=4, ranks=4)
        assert whole.run is not None
        kept = tuple(p for p in whole.run.processes if i < 43 or p.rank != 3)  # rank 3 exits after sample 42
        return dataclasses.replace(whole, run=dataclasses.replace(whole.run, processes=kept))

    samples = [sample(i) for i in range(60)]
    record = add_run(t0, [(step, t0 + 2 * step) for step in range(30)])
    writer = record_samples(record.id, samples[:30])
    page = make_page()
    page.charts.set_x_mode("time")
    open_system(qtbot, page, record)
    chart = page.charts.system.charts["rank_rss"]
    qtbot.waitUntil(lambda: chart.point_count("rank 3") == 30, timeout=WAIT_MS)
    chart.flush()
    assert chart.legend_text("rank 3") == f"rank 3  {format_value(rank_rss(samples[29], 3), 'B')}"

    record_samples(record.id, samples[30:], writer)  # rank 3 exits while the view is up
    writer.close()
    qtbot.waitUntil(lambda: chart.point_count("rank 0") == 60, timeout=WAIT_MS)
    chart.flush()
    exited = time.strftime("%H:%M:%S", time.localtime(samples[42].t))
    assert chart.legend_text("rank 3") == f"rank 3  exited at {exited}"
    assert chart.data("rank 3")[0][-1] == samples[42].t  # its line ends there
    live = sum(rank_rss(samples[-1], r) for r in range(3))
    assert chart.legend_text("all ranks") == f"all ranks  {format_value(live, 'B')}  (3 live)"

    page.charts.set_x_mode("relative")  # read again whole: said in the new axis' words
    chart = page.charts.system.charts["rank_rss"]
    qtbot.waitUntil(lambda: chart.point_count("rank 0") == 60, timeout=WAIT_MS)
    chart.flush()
    assert chart.legend_text("rank 3") == "rank 3  exited at 0:42"


def test_the_filter_and_pins_choose_the_system_charts_as_they_choose_the_grids(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    """The grid's filter box and pins, in the System view: the filter narrows the system charts (by title, key or
    what they show; the loss chart stays, the charts filtered out are still fed), a pinned chart comes first,
    beside the top of the loss chart, and is remembered apart from the grid's pins."""
    from traindeck.backend.runs import SYSTEM_CHARTS

    samples = demo_samples(seconds=60, end=time.time() - 5)
    record = add_run(samples[0].t, [(step, samples[0].t + 5 + step) for step in range(40)], state="succeeded")
    record_samples(record.id, samples).close()
    page = make_page()
    page.charts.set_x_mode("time")
    view = page.charts.system
    view.filter_box.setText("gpu")  # before the run is read: the charts it hides are read all the same
    open_system(qtbot, page, record)
    charts = view.charts
    qtbot.waitUntil(lambda: charts["gpu_util"].point_count("GPU 0") == len(samples), timeout=WAIT_MS)
    every = [spec.key for spec in SYSTEM_CHARTS]

    def visible() -> list[str]:
        return [key for key in every if view.cells[key].isVisible()]

    assert view.shown == visible() == ["gpu_util", "gpu_memory"] and view.bar.count.text() == "2 of 6"
    for query, keys in [("MEMORY", ["gpu_memory", "rank_rss"]), ("utilization", ["gpu_util", "cpu"]),
                        ("rank", ["rank_rss"]), ("net", ["network"]), ("gpu_mem", ["gpu_memory"])]:
        view.filter_box.setText(query)
        assert view.shown == visible() == keys, query
    view.filter_box.setText("eval/")
    assert view.shown == visible() == [] and view.empty.isVisible() and "eval/" in view.empty.text()
    assert view.loss_cell.isVisible()
    view.filter_box.setText("")
    assert view.shown == visible() == every and not view.empty.isVisible()
    assert charts["cpu"].point_count("host") == len(samples)  # fed while filtered out

    view.cells["rank_rss"].pin.click()
    assert view.shown == ["rank_rss", *[key for key in every if key != "rank_rss"]]
    grid = view._grid
    assert grid.getItemPosition(grid.indexOf(view.cells["rank_rss"]))[:2] == (0, 1)  # beside the loss's top
    again = make_page()  # the next start: the pin remembered, and the grid's pins its own
    assert again.charts.system.shown[0] == "rank_rss" and again.charts.system.cells["rank_rss"].pin.isChecked()
    assert again.charts.grid.pins == []
    view.cells["rank_rss"].pin.click()  # unpinned from the cell's own button
    assert view.shown == every


def test_the_loss_beside_the_system_charts_takes_the_tabs_smoothing_and_log_scale(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    """As the grid's charts: the loss smoothed and on a log scale as the tab's options say, the system figures drawn
    as recorded, from 0."""
    from traindeck.backend.runs import ema

    samples = demo_samples(seconds=60, end=time.time() - 5)
    steps = [(step, samples[0].t + 5 + step) for step in range(40)]
    record = add_run(samples[0].t, steps, state="succeeded")
    record_samples(record.id, samples).close()
    page = make_page()
    page.charts.set_smoothing(0.8)
    page.charts.set_log_y(True)
    open_system(qtbot, page, record)
    qtbot.waitUntil(lambda: page.charts.system.loss_chart.point_count("loss") == len(steps), timeout=WAIT_MS)
    loss = page.charts.system.loss_chart  # (by step: made again once the step clock is read)
    assert loss.smoothing == 0.8 and loss.log_y
    assert all(chart.smoothing == 0 and not chart.log_y for chart in page.charts.system.charts.values())
    page.charts.set_smoothing(0.5)
    page.charts.set_log_y(False)
    loss.flush()
    assert loss.smoothing == 0.5 and not loss.log_y
    curve = loss._series["loss"].curve
    drawn = curve.getData()[1]
    assert drawn == pytest.approx(ema([3.0 - 0.01 * step for step, _ in steps], 0.5))


def test_each_absent_series_says_why_instead_of_an_empty_chart(qtbot, make_runs_page) -> None:  # type: ignore[no-untyped-def]
    samples = [dataclasses.replace(s, gpus=(), gpu_error=NO_NVML, run=None)
               for s in demo_samples(seconds=30, end=time.time() - 5)]
    record = add_run(samples[0].t, [(1, samples[0].t + 1)], state="succeeded")
    record_samples(record.id, samples).close()
    page = make_runs_page((1500, 700))
    page.charts.set_x_mode("time")
    open_system(qtbot, page, record)
    charts = page.charts.system.charts
    qtbot.waitUntil(lambda: charts["cpu"].point_count("host") == len(samples), timeout=WAIT_MS)
    assert page.charts.system_reason("gpu_util") == f"No NVIDIA GPU found: {NO_NVML}."
    assert page.charts.system_reason("gpu_memory") == f"No NVIDIA GPU found: {NO_NVML}."
    assert page.charts.system_reason("rank_rss") == "No rank processes recorded."
    assert page.charts.system_reason("cpu") is None and page.charts.system_reason("disk") is None
    slot = page.charts.system.slots["gpu_util"]
    assert slot.isVisible() and slot.label.isVisible() and not slot.chart.isVisible()
    assert page.charts.system.cells["gpu_util"].title.full_text() == "GPU utilisation"  # the cell names it
    # The words take the chart's room: with the tabs given the height, the view fits without scrolling.
    page.toggle_maximised()
    scroll = page.charts.system.findChild(QScrollArea)
    qtbot.waitUntil(lambda: 0 < scroll.widget().height() <= scroll.viewport().height(), timeout=WAIT_MS)


def test_a_run_without_samples_says_so_in_every_chart(qtbot, make_page) -> None:  # type: ignore[no-untyped-def]
    record = add_run(time.time() - 100, [(1, time.time() - 90)], state="succeeded")
    page = make_page()
    page.charts.set_x_mode("time")
    page.lower_tabs.setCurrentWidget(page.leftovers)  # the charts off screen: nothing read for them
    open_system(qtbot, page, record)
    qtbot.waitUntil(lambda: not page.poll_timer.isActive(), timeout=WAIT_MS)  # ended: no more polls
    assert page.charts.system_reason("cpu") is None
    page.lower_tabs.setCurrentWidget(page.charts)  # back: read now, with no poll to ask for it
    qtbot.waitUntil(lambda: page.charts.system_reason("cpu") is not None, timeout=WAIT_MS)
    assert {page.charts.system_reason(key) for key in page.charts.system.charts} == {
        "No resource samples were recorded for this run."}


def test_export_in_the_system_view_writes_every_system_series_and_the_whole_view(qtbot, make_runs_page,  # type: ignore[no-untyped-def]
                                                                                 tmp_path, monkeypatch) -> None:
    samples = demo_samples(seconds=60, end=time.time() - 5)
    steps = [(step, samples[0].t + 5 + step) for step in range(40)]
    record = add_run(samples[0].t, steps, state="succeeded")
    record_samples(record.id, samples).close()
    page = make_runs_page((1500, 520))  # a low pane: the view scrolls its lower charts out of sight
    page.charts.set_x_mode("time")
    page.charts.set_smoothing(0.5)
    open_system(qtbot, page, record)
    charts = page.charts.system.charts
    qtbot.waitUntil(lambda: charts["gpu_util"].point_count("GPU 1") == len(samples)
                    and page.charts.system.loss_chart.point_count("loss") == len(steps), timeout=WAIT_MS)

    written: list[Path] = []
    page.charts.export_csv(tmp_path / "out" / "system.csv", done=written.append)
    qtbot.waitUntil(lambda: bool(written), timeout=WAIT_MS)
    with open(written[0], newline="") as handle:
        table = list(csv.DictReader(handle))
    series = list(dict.fromkeys(r["metric"] for r in table))
    assert series[0] == "loss" and sum(r["metric"] == "loss" for r in table) == len(steps)
    assert float(next(r for r in table if r["metric"] == "loss")["smoothed"]) == pytest.approx(3.0)
    # Every line of every system chart, one row per recorded sample, in the charts' order.
    assert series[1:] == [f"system/{key}/{line}" for key, chart in charts.items() for line in chart.series_names()]
    assert {"system/gpu_util/GPU 0", "system/gpu_memory/GPU 1", "system/cpu/host", "system/rank_rss/rank 1",
            "system/rank_rss/all ranks", "system/disk/written", "system/network/received"} <= set(series)
    util = [r for r in table if r["metric"] == "system/gpu_util/GPU 0"]
    assert len(util) == len(samples)
    assert [float(r["wall_time"]) for r in util] == pytest.approx([s.t for s in samples])
    assert [float(r["value"]) for r in util] == pytest.approx([s.gpus[0].utilization_percent for s in samples])
    assert {r["step"] for r in util} == {""} and {r["smoothed"] for r in util} == {""}  # drawn as recorded
    rss = [r for r in table if r["metric"] == "system/rank_rss/rank 1"]
    assert float(rss[-1]["value"]) == pytest.approx(rank_rss(samples[-1], 1))

    # A system chart's right-click menu saves that chart's data alone, as the other charts' menus do.
    menu = charts["gpu_memory"].context_menu()
    assert menu is not None and [a.text() for a in menu.actions()] == ["Save chart as PNG…", "Save its data as CSV…"]
    chosen = tmp_path / "out" / "memory.csv"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *args: (str(chosen), "CSV (*.csv)"))
    menu.actions()[1].trigger()
    qtbot.waitUntil(chosen.exists, timeout=WAIT_MS)  # written whole in one step
    with open(chosen, newline="") as handle:
        memory = list(csv.DictReader(handle))
    assert list(dict.fromkeys(r["metric"] for r in memory)) == ["system/gpu_memory/GPU 0", "system/gpu_memory/GPU 1"]
    assert float(memory[-1]["value"]) == pytest.approx(samples[-1].gpus[1].memory_used_bytes)

    # The PNG: the whole view, also the charts scrolled out of sight.
    scroll = page.charts.system.findChild(QScrollArea)
    assert scroll.widget().height() > scroll.viewport().height()
    png = page.charts.export_png(tmp_path / "out" / "system.png")
    image = QImage(str(png))
    assert image.height() >= scroll.widget().height() and image.width() >= scroll.widget().width()


@pytest.mark.parametrize(("width", "columns"), [(690, 2), (1100, 3), (420, 1)])
def test_a_narrow_view_puts_fewer_charts_in_a_row_and_each_shows_whole(qtbot, tmp_path, width, columns) -> None:  # type: ignore[no-untyped-def]
    """690 px: the System view in a 1280 px window (the demo's and the screenshots'). A chart squeezed below what
    its title needs draws past its right edge, its title and legend cut off."""
    from PySide6.QtCore import QSettings

    from traindeck.backend.runs import SystemSection
    from traindeck.gui.pages.runs.system_view import SystemView

    settings = QSettings(str(tmp_path / "window.ini"), QSettings.Format.IniFormat)
    view = SystemView(lambda title, unit: TimeSeriesChart(title, unit), SystemSection(), settings)
    qtbot.addWidget(view)
    view.resize(width, 600)
    view.show()
    qtbot.waitExposed(view)
    qtbot.waitUntil(lambda: view.columns == columns, timeout=WAIT_MS)
    assert view.columns_for(width) == columns
    for chart in view.all_charts():
        chart.flush()
        assert chart.plot_item.sceneBoundingRect().right() <= chart.plot_widget.width() + 1, chart.title
    cells = view.findChild(QScrollArea).widget()
    assert all(cell.geometry().right() < cells.width() for cell in view.cells.values())
    renewed = view.charts["cpu"]
    view.renew()  # fresh charts keep the row the width allows
    assert view.charts["cpu"] is not renewed and view.columns == columns


def test_a_young_runs_clock_axis_is_labelled_in_whole_seconds(qtbot) -> None:  # type: ignore[no-untyped-def]
    chart = TimeSeriesChart("loss", x_mode="step")
    qtbot.addWidget(chart)
    chart.x_mode = "time"  # the axis made again for another x option keeps whole seconds
    chart.resize(1400, 300)
    now = float(int(time.time()))
    chart.set_series("loss", np.arange(6) + now, np.arange(6.0))
    chart.show()
    qtbot.waitExposed(chart)
    chart.flush()
    chart.grab()  # painted: the axis has measured its labels' font
    axis = chart.plot_item.getAxis("bottom")
    low, high = chart.plot_item.getViewBox().viewRange()[0]
    labels = [text for spacing, values in axis.tickValues(low, high, 1400)
              for text in axis.tickStrings(values, 1, spacing)]
    assert labels and not [text for text in labels if "." in text]


def test_a_followers_new_data_moves_the_shared_x_range(qtbot) -> None:  # type: ignore[no-untyped-def]
    """The System view's loss chart leads the system charts' zoom: their samples, arriving when the loss has no
    news, still move the range they all show."""
    from PySide6.QtWidgets import QVBoxLayout, QWidget

    box = QWidget()
    qtbot.addWidget(box)
    leader, follower = TimeSeriesChart("loss", x_mode="step"), TimeSeriesChart("GPU", "%", x_mode="step")
    layout = QVBoxLayout(box)
    layout.addWidget(leader)
    layout.addWidget(follower)
    follower.link_x(leader)
    leader.set_series("loss", [0.0, 10.0], [2.0, 1.0])
    follower.set_series("GPU 0", [0.0, 10.0], [50.0, 60.0])
    box.show()
    qtbot.waitExposed(box)
    leader.flush()
    follower.flush()
    assert leader.plot_item.getViewBox().viewRange()[0][1] < 20
    follower.append("GPU 0", 100.0, 70.0)
    leader.flush()
    assert leader.plot_item.getViewBox().viewRange()[0][1] >= 100
    assert follower.plot_item.getViewBox().viewRange()[0][1] >= 100


def drawn_labels(chart: TimeSeriesChart) -> list[tuple[str, float, float, float]]:
    """The bottom axis' labels as drawn, left to right: (text, its tick's x, the text's left and right), in the
    plot's pixels; after asserting that the axis draws every label it chooses (tickValues, tickStrings)."""
    from PySide6.QtGui import QImage, QPainter

    chart.flush()
    chart.grab()  # painted: the axis knows its font
    axis = chart.plot_item.getAxis("bottom")
    low, high = axis.range
    edge = axis.mapRectToScene(axis.rect())
    chosen = {text: edge.left() + (value - low) / (high - low) * edge.width()
              for spacing, values in axis.tickValues(low, high, axis.width())
              for value, text in zip(values, axis.tickStrings(values, 1.0, spacing), strict=True) if text}
    image = QImage(chart.size(), QImage.Format.Format_ARGB32)
    painter = QPainter(image)
    texts = axis.generateDrawSpecs(painter)[2]
    painter.end()
    drawn = sorted((text, chosen.get(text, -1.0), axis.mapRectToScene(rect).left(), axis.mapRectToScene(rect).right())
                   for rect, _flags, text in texts)
    assert sorted(chosen) == sorted(text for text, *_ in drawn), (chosen, drawn)
    return sorted(drawn, key=lambda label: label[1])


SPANS = [20, 60, 300, 1800, 7200, 4 * 3600, 86400, 2 * 86400, 3 * 86400, 9 * 86400]


@pytest.mark.parametrize("mode", ["time", "relative"])
@pytest.mark.parametrize("span", SPANS, ids=[f"{s}s" for s in SPANS])
def test_a_220_px_chart_labels_its_time_axis_twice_at_least_and_cuts_none(qtbot, mode, span) -> None:  # type: ignore[no-untyped-def]
    """The System view's narrowest charts (SYSTEM_CELL_WIDTH): two readable labels at least on any span, none cut
    at the axis' ends nor crowding the next, each under its tick."""
    from traindeck.gui.pages.runs.system_view import SYSTEM_CELL_WIDTH

    chart = TimeSeriesChart("", "B", x_mode=mode)
    qtbot.addWidget(chart)
    chart.resize(SYSTEM_CELL_WIDTH, 150)
    start = float(int(time.time()) - span - 17)
    x = np.linspace(0.0, span, 400) + (start if mode == "time" else 17.0)
    chart.set_series("rank 0", x, 2e10 + 1e9 * np.sin(x / 60))
    chart.show()
    qtbot.waitExposed(chart)
    labels = drawn_labels(chart)
    assert len(labels) >= 2, labels
    axis = chart.plot_item.getAxis("bottom")
    edge = axis.mapRectToScene(axis.rect())
    assert edge.right() <= chart.plot_widget.width()
    assert all(edge.left() - 0.5 <= left and right <= edge.right() + 0.5 for _, _, left, right in labels), (labels, edge)
    assert all(left <= tick <= right for _, tick, left, right in labels), labels  # each under its tick
    assert all(b[2] - a[3] >= 6 for a, b in zip(labels, labels[1:], strict=False)), labels  # readable apart
    assert len({text for text, *_ in labels}) == len(labels), labels  # no two alike


@pytest.mark.parametrize("zone", ["Europe/Berlin", "Asia/Kolkata"])
def test_clock_ticks_fall_on_the_local_clocks_round_times(monkeypatch, zone) -> None:  # type: ignore[no-untyped-def]
    """Round local hours and midnights, also where the offset is half an hour and across a change to summer time
    (Berlin, 29 March 2026)."""
    from traindeck.gui.widgets.chart_axis import clock_label, clock_ticks

    monkeypatch.setenv("TZ", zone)
    time.tzset()
    try:
        low = time.mktime((2026, 3, 28, 12, 0, 0, 0, 0, -1))
        assert [clock_label(v, 21600) for v in clock_ticks(low, low + 86400, 21600)] == [
            "12:00", "18:00", "29 Mar", "06:00", "12:00"]
        assert [clock_label(v, 900) for v in clock_ticks(low + 1, low + 3600, 900)] == [
            "12:15", "12:30", "12:45", "13:00"]
    finally:
        monkeypatch.undo()
        time.tzset()
