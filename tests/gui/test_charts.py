"""TimeSeriesChart: ring buffers, decimation that keeps spikes, units, references, following, theme."""

from __future__ import annotations

import collections

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6.QtGui import QColor, QPalette

from traindeck.gui.widgets.chart_axis import UnitAxisItem, format_value
from traindeck.gui.widgets.chart_series import Ring, peak_decimate
from traindeck.gui.widgets.charts import DARK_COLOURS, LIGHT_COLOURS, TimeSeriesChart


@pytest.fixture
def chart(qtbot):
    widget = TimeSeriesChart("Host RAM", "B")
    widget.resize(640, 240)
    qtbot.addWidget(widget)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


@pytest.mark.parametrize("whole", [False, True])
def test_ring_keeps_the_newest_points_in_order_across_many_appends(whole):
    ring = Ring(100, whole=whole)
    storage = ring._x
    reference: collections.deque[float] = collections.deque(maxlen=100)
    rng = np.random.default_rng(3)
    value = 0.0
    for _ in range(400):  # single points and bursts, enough to wrap and compact many times
        k = int(rng.integers(1, 40))
        chunk = np.arange(value, value + k)
        value += k
        ring.extend(chunk, chunk * 2)
        reference.extend(chunk)
        x, y = ring.view()
        assert list(x) == list(reference)
        assert np.array_equal(y, x * 2)
    assert ring.total == value
    ring.extend(np.arange(500.0), np.arange(500.0))  # more than the capacity at once: the newest 100
    assert list(ring.view()[0]) == list(range(400, 500))
    # A whole ring (the Monitor's charts, fed for days) holds its memory from the start: never reallocated.
    assert (ring._x is storage) == whole


def test_a_monitor_chart_holds_its_ring_whole_from_its_first_point(qtbot):
    from traindeck.gui.pages.monitor.shared import RECENT_AT_1HZ, new_chart

    chart = new_chart("CPU", "%")
    qtbot.addWidget(chart)
    chart.append("CPU", 1.0, 5.0)
    ring = chart._series["CPU"].ring
    assert ring._x.nbytes == ring._y.nbytes == 2 * RECENT_AT_1HZ * 8
    chart.append("CPU", np.arange(2.0, 2 + 3 * RECENT_AT_1HZ), np.ones(3 * RECENT_AT_1HZ))
    assert ring._x.nbytes == 2 * RECENT_AT_1HZ * 8 and len(ring) == RECENT_AT_1HZ


def test_append_and_set_series_accept_scalars_lists_and_arrays_with_none_as_a_gap(chart):
    chart.append("used", 1.0, 5.0)
    chart.append("used", [2.0, 3.0], [6.0, None])
    chart.append("used", np.array([4.0]), np.array([8.0]))
    x, y = chart.data("used")
    assert list(x) == [1, 2, 3, 4]
    assert y[0] == 5 and y[1] == 6 and np.isnan(y[2]) and y[3] == 8
    assert chart.last("used") == 8.0
    chart.set_series("used", [10, 11], [1, 2])
    assert list(chart.data("used")[0]) == [10, 11] and chart.point_count("used") == 2
    with pytest.raises(ValueError, match="used"):
        chart.set_series("used", [1, 2, 3], [1, 2])
    assert chart.point_count("unknown") == 0 and chart.last("unknown") is None


def test_max_points_bounds_each_series(qtbot):
    small = TimeSeriesChart("CPU", "%", max_points=50)
    qtbot.addWidget(small)
    for i in range(120):
        small.append("total", float(i), float(i % 100))
    assert small.point_count("total") == 50
    assert small.data("total")[0][0] == 70.0


def test_older_buckets_fold_what_leaves_the_ring_into_a_bounded_min_max_history(qtbot):
    """A chart fed for days (the Monitor page's): points beyond max_points are folded, not dropped, and what it holds
    stays at most max_points + older_buckets entries whatever it was fed; spikes survive the folding."""
    folded = TimeSeriesChart("CPU", "%", max_points=100, older_buckets=50)
    qtbot.addWidget(folded)
    for start in range(0, 20_000, 7):  # appends of a few points, as samples come
        xs = np.arange(start, min(start + 7, 20_000), dtype=float)
        folded.append("total", xs, np.where(xs == 1234, 99.0, 10.0))
    folded.append("total", [20_000.0, 20_001.0], [None, 5.0])  # a gap
    series = folded._series["total"]
    assert len(series.ring) == 100 and series.older is not None
    assert len(series.older) <= 50 + 2 and series.older.count == 20_002 - 100
    x, y = folded.data("total")
    assert x[0] == 0.0 and x[-1] == 20_001.0 and np.all(np.diff(x) >= 0)  # the whole time, oldest first
    assert np.nanmax(y) == 99.0 and len(x) <= 2 * 52 + 100
    # Replacing a series with a long recording folds it the same way.
    folded.set_series("total", np.arange(50_000, dtype=float), np.zeros(50_000))
    assert len(series.ring) == 100 and len(folded._series["total"].older) <= 52


def test_peak_decimation_keeps_every_spike_and_bounds_the_points():
    n = 86_400
    x = np.arange(n, dtype=float)
    y = np.full(n, 10.0)
    y[12_345], y[70_001] = 99.0, -5.0
    y[500:510] = np.nan
    xd, yd = peak_decimate(x, y, 0, n, columns=800)
    assert len(xd) <= 2 * 800 + 2 * 128  # two per bucket plus the newest, incomplete bucket
    assert np.nanmax(yd) == 99.0 and np.nanmin(yd) == -5.0
    assert np.all(np.diff(xd) >= 0)
    # A window of the data: only the visible part (plus one point each side) is kept.
    xd, yd = peak_decimate(x, y, 1000, 1100, columns=800)
    assert xd[0] == 999 and xd[-1] == 1101
    # Fewer points than columns: returned as they are.
    xd, yd = peak_decimate(x[:10], y[:10], 0, 10, columns=800)
    assert len(xd) == 10


def test_a_day_of_data_reaches_the_curve_decimated_with_its_spike(chart):
    t = 1.7e9 + np.arange(86_400.0)
    y = np.full(len(t), 4e9)
    y[40_000] = 30e9
    chart.set_series("RSS", t, y)
    chart.flush()
    shown_x, shown_y = chart.plot_item.listDataItems()[0].getData()
    assert 0 < len(shown_x) < 5000
    assert shown_y.max() == 30e9
    low, high = chart.plot_item.getViewBox().viewRange()[1]
    assert low <= 0 and 30e9 <= high < 40e9  # y fitted from 0 to the peak


def test_reference_line_is_drawn_kept_in_view_and_moved_by_label(chart):
    chart.append("RSS", [1.0, 2.0], [1e9, 2e9])
    chart.add_reference(64 * 2**30, "estimate")
    chart.flush()
    lines = [i for i in chart.plot_item.items if isinstance(i, pg.InfiniteLine)]
    assert len(lines) == 1 and lines[0].value() == 64 * 2**30
    assert "estimate: 64 GiB" in lines[0].label.format
    assert chart.plot_item.getViewBox().viewRange()[1][1] >= 64 * 2**30
    chart.add_reference(32 * 2**30, "estimate")  # the same label moves the line instead of adding one
    lines = [i for i in chart.plot_item.items if isinstance(i, pg.InfiniteLine)]
    assert len(lines) == 1 and lines[0].value() == 32 * 2**30
    assert chart.references() == {"estimate": 32 * 2**30}
    chart.clear()
    assert chart.series_names() == [] and chart.references() == {}
    assert not [i for i in chart.plot_item.items if isinstance(i, pg.InfiniteLine)]


def test_units_on_the_axis_and_in_the_legend(chart):
    axis = UnitAxisItem("B")
    levels = axis.tickSpacing(0, 40 * 2**30, 200)
    major = levels[0][0]
    assert major % 2**30 == 0  # whole GiB steps, not decimal gigabytes
    assert axis.tickStrings([0, 10 * 2**30, 20 * 2**30], 1, 10 * 2**30) == ["0 GiB", "10 GiB", "20 GiB"]
    assert UnitAxisItem("%").tickStrings([0, 50, 100], 1, 50) == ["0 %", "50 %", "100 %"]
    quarter = UnitAxisItem("B/s")
    quarter.setRange(0, 2**20)
    assert quarter.tickStrings([0.25 * 2**20, 0.75 * 2**20], 1, 0.25 * 2**20) == ["0.25 MiB/s", "0.75 MiB/s"]
    # A learning rate's axis: distinct labels, not 0.0000 five times.
    assert UnitAxisItem("").tickStrings([0, 1e-5, 2e-5, 3e-5], 1, 1e-5) == ["0", "1e-05", "2e-05", "3e-05"]
    assert UnitAxisItem("").tickStrings([2.5e-5, 3e-5], 1, 5e-6) == ["2.5e-05", "3.0e-05"]
    assert format_value(1.5 * 2**20, "B/s") == "1.5 MiB/s"
    assert format_value(61, "°C") == "61 °C" and format_value(None, "W") == "-"
    chart.append("used", 1.0, 3 * 2**30)
    chart.flush()
    labels = [label.text for _, label in chart.legend.items]
    assert labels == ["used  3 GiB"]


def test_x_axis_is_clock_time_or_steps(qtbot):
    chart = TimeSeriesChart("loss", x_is_time=False)
    qtbot.addWidget(chart)
    assert not isinstance(chart.plot_item.getAxis("bottom"), pg.DateAxisItem)
    chart.x_is_time = True
    assert isinstance(chart.plot_item.getAxis("bottom"), pg.DateAxisItem)
    chart.x_is_time = False
    assert not isinstance(chart.plot_item.getAxis("bottom"), pg.DateAxisItem)


def test_follows_newest_data_until_the_user_zooms_then_resumes(chart):
    chart.x_window = 100
    chart.append("RSS", np.arange(1000.0), np.ones(1000))
    chart.flush()
    low, high = chart.plot_item.getViewBox().viewRange()[0]
    assert 895 <= low <= 900 and 999 <= high <= 1005
    view = chart.plot_item.getViewBox()
    view.setXRange(10, 20, padding=0)
    view.sigRangeChangedManually.emit([True, False])  # what a mouse zoom emits
    chart.append("RSS", 1000.0, 1.0)
    chart.flush()
    assert view.viewRange()[0] == pytest.approx([10, 20])
    chart.follow()
    assert view.viewRange()[0][1] >= 1000


def test_hidden_chart_defers_the_redraw_until_shown(qtbot):
    from PySide6.QtWidgets import QStackedWidget, QWidget

    stack = QStackedWidget()
    qtbot.addWidget(stack)
    stack.addWidget(QWidget())
    chart = TimeSeriesChart("CPU", "%")
    stack.addWidget(chart)
    stack.show()
    qtbot.waitExposed(stack)
    chart.append("total", [1.0, 2.0], [10.0, 20.0])
    chart.flush()
    assert chart.plot_item.listDataItems()[0].getData()[0] is None  # nothing drawn while hidden
    stack.setCurrentWidget(chart)
    qtbot.waitUntil(lambda: chart.plot_item.listDataItems()[0].getData()[0] is not None)


def test_follows_a_dark_palette(chart):
    chart.append("a", 1.0, 1.0)
    chart.append("b", 1.0, 2.0)
    assert chart.plot_widget.backgroundBrush().color().lightness() > 128
    curve = chart.plot_item.listDataItems()[0]
    assert curve.opts["pen"].color() == QColor(LIGHT_COLOURS[0])
    dark = QPalette(chart.palette())
    dark.setColor(QPalette.ColorRole.Base, QColor("#171717"))
    dark.setColor(QPalette.ColorRole.Text, QColor("#e8eaed"))
    chart.setPalette(dark)
    assert chart.plot_widget.backgroundBrush().color().lightness() < 128
    assert curve.opts["pen"].color() == QColor(DARK_COLOURS[0])
    assert chart.plot_item.getAxis("left").textPen().color() == QColor("#e8eaed")


def test_a_flat_learning_rate_is_drawn_half_way_up_not_on_the_top_border(qtbot):
    """Issue 12: a constant lr's line lay on the chart's top border, under the legend."""
    widget = TimeSeriesChart("lr", "", x_is_time=False)
    widget.resize(480, 200)
    qtbot.addWidget(widget)
    widget.show()
    qtbot.waitExposed(widget)
    widget.set_series("lr", np.arange(50.0), np.full(50, 1e-4))
    widget.flush()
    low, high = widget.plot_item.getViewBox().viewRange()[1]
    position = (1e-4 - low) / (high - low)  # 0 = bottom border, 1 = top border
    assert 0.3 < position < 0.7, (low, high)
    # A varying series still uses the scale up to its top (10 % headroom for the legend).
    widget.set_series("lr", np.arange(50.0), np.linspace(0, 1e-4, 50))
    widget.flush()
    low, high = widget.plot_item.getViewBox().viewRange()[1]
    assert (1e-4 - low) / (high - low) > 0.85


def test_an_axis_writes_its_major_and_minor_ticks_in_one_notation():
    axis = UnitAxisItem("")
    axis.setRange(0.0, 0.0022)
    major = axis.tickStrings([0.001, 0.002], 1.0, 0.001)
    minor = axis.tickStrings([0.0005, 0.0015], 1.0, 0.0005)
    assert all("e-" in t for t in major + minor), (major, minor)
    axis.setRange(0.0, 3.0)
    assert axis.tickStrings([1.0, 2.0], 1.0, 1.0) == ["1", "2"]


def test_a_gap_narrower_than_a_column_still_breaks_the_line():
    """Issue 12: a hidden Monitor page's gap (one NaN among a day of points) vanished into a min/max bucket."""
    x = np.arange(10_000.0)
    y = np.full(10_000, 50.0)
    y[6001] = np.nan  # the only gap, inside a bucket of finite points
    xd, yd = peak_decimate(x, y, 0.0, 10_000.0, 200)
    assert len(xd) < 600
    gaps = np.flatnonzero(np.isnan(yd))
    assert len(gaps) == 2  # before and after the bucket holding it: no line runs through
    drawn = [(xd[p], xd[p + 1]) for p in range(len(xd) - 1) if not np.isnan(yd[p]) and not np.isnan(yd[p + 1])]
    assert not any(a < 6001 < b for a, b in drawn)  # no drawn segment crosses the gap


def test_a_series_with_one_point_is_drawn_as_a_dot_until_it_has_a_line(chart):
    """A run's first logged loss: a line needs two points, so one point alone showed an empty chart beside a legend
    with a value (seen in the walk-through)."""
    chart.append("loss", 1.0, 2.5)
    chart.flush()
    curve = chart.plot_item.listDataItems()[0]
    assert curve.opts["symbol"] == "o" and curve.opts["symbolBrush"] is not None
    chart.append("loss", 2.0, 2.1)
    chart.flush()
    assert curve.opts["symbol"] is None


def test_byte_counts_under_one_kib_are_whole_bytes() -> None:
    # The Offload table's per-step means: a fraction of a byte is no amount anyone moved.
    assert format_value(0.454, "B") == "<1 B"
    assert format_value(0, "B") == "0 B"
    assert format_value(12.6, "B") == "13 B" and format_value(512.4, "B/s") == "512 B/s"
    assert format_value(1023.7, "B") == "1 KiB"  # rounded up into the next unit, not "1024 B"
    assert format_value(1.5 * 2**10, "B") == "1.5 KiB" and format_value(2.25 * 2**30, "B") == "2.25 GiB"


def test_a_growing_window_is_drawn_with_the_next_redraw_not_at_each_change(chart, qtbot):
    """The Monitor widens its charts' window with every sample until the chosen window is filled: each change must
    not redraw the chart at once (at 5 samples/s and a dozen charts, that alone fell minutes behind on a busy machine),
    and the redraw that follows shows the newest window."""
    chart.append("RSS", np.arange(1000.0), np.ones(1000))
    chart.flush()
    view = chart.plot_item.getViewBox()
    drawn = view.viewRange()[0]
    for window in (100, 101, 102):
        chart.append("RSS", 1000.0 + window, 1.0)
        chart.x_window = window
        assert view.viewRange()[0] == pytest.approx(drawn)  # not yet: with the next redraw
    qtbot.waitUntil(lambda: view.viewRange()[0][1] >= 1102, timeout=5000)
    low, high = view.viewRange()[0]
    assert 1102 - 102 - 5 <= low <= 1102 - 102 + 5
    # A chart the person zoomed keeps its view while the window changes only where it follows; a new window asked of
    # it (the toolbar's) follows the data again, at once.
    view.setXRange(10, 20, padding=0)
    view.sigRangeChangedManually.emit([True, False])
    chart.x_window = 50
    assert view.viewRange()[0][1] >= 1102
