"""What the Monitor page's panels share: the chart and table makers, the chart windows, and the picker's "no run"
entry."""

from __future__ import annotations

from collections.abc import Iterable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableWidget, QTableWidgetItem

from traindeck.gui.widgets.chart_axis import whole_seconds
from traindeck.gui.widgets.charts import TimeSeriesChart

# Each chart series: the last hour whole (at the default 1 s sampling; the 1 min-1 hour windows), older samples
# folded into min/max buckets (the 6 and 24 hour windows, ~2 a pixel column): about 0.2 MB a series whatever
# the run's length, where a day whole at 1 Hz takes 2.8 MB a series (~40 MB for the page's ~15 series).
RECENT_AT_1HZ = 3_600
OLDER_BUCKETS = 2_000
WINDOWS = (("1 min", 60.0), ("10 min", 600.0), ("1 hour", 3600.0), ("6 hours", 21600.0), ("24 hours", 86400.0))
NO_RUN = "None: host and GPUs only"


def new_chart(title: str, unit: str) -> TimeSeriesChart:
    """A chart of clock time labelled in whole seconds at the finest (12:04:05, never "05.500")."""
    chart = TimeSeriesChart(title, unit, max_points=RECENT_AT_1HZ, older_buckets=OLDER_BUCKETS)
    whole_seconds(chart.plot_item.getAxis("bottom"))
    return chart


def new_table(headers: list[str]) -> QTableWidget:
    table = QTableWidget(0, len(headers))
    table.setHorizontalHeaderLabels(headers)
    table.verticalHeader().setVisible(False)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    table.horizontalHeader().setStretchLastSection(True)
    table.setAlternatingRowColors(True)
    table.setWordWrap(False)
    table.verticalHeader().setDefaultSectionSize(table.fontMetrics().height() + 6)
    return table


def set_row(table: QTableWidget, row: int, cells: Iterable[str], right_from: int = 1) -> None:
    for column, text in enumerate(cells):
        item = table.item(row, column)
        if item is None:
            item = QTableWidgetItem()
            if column >= right_from:
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            table.setItem(row, column, item)
        if item.text() != text:
            item.setText(text)


def fitted_window(chosen_s: float, sampled_s: float, floor_s: float) -> float:
    """The chart window to show: `chosen_s`, or while less was sampled, what was (`floor_s` at least), so that a first
    open fills the chart instead of drawing a sliver at the right end of an empty window."""
    return min(chosen_s, max(sampled_s, floor_s))


def fit_window(charts: Iterable[TimeSeriesChart], seconds: float) -> None:
    """`seconds` as the window of each chart that follows the newest data (one the person zoomed keeps its view)."""
    for chart in charts:
        if chart.following and chart.x_window != seconds:
            chart.x_window = seconds


def clear_series(chart: TimeSeriesChart) -> None:
    """Remove the data but keep reference lines (the estimate, totals)."""
    for name in chart.series_names():
        chart.remove_series(name)


def break_lines(charts: Iterable[TimeSeriesChart], at: float) -> None:
    """End each line that has points with a NaN at `at`: the charts draw it as a gap, where a line drawn straight
    across a time without samples would claim values nobody measured."""
    for chart in charts:
        for name in chart.series_names():
            if chart.point_count(name):
                chart.append(name, [at], [float("nan")])


def read_failed_text(error: str) -> str:
    """The status line for a run's recording that could not be read."""
    return f"Monitor: could not read the run's recording: {error.splitlines()[0]}"
