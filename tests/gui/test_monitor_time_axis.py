"""The Monitor's time axes over a young run (a few seconds across a wide chart), read as drawn."""

from __future__ import annotations

import time

import numpy as np
import pytest

pytest.importorskip("PySide6")

PHASES = ("forward", "backward", "communication", "optimizer", "swap", "other")


def _young_view(seconds: int, *, phases: bool) -> dict:
    """An offload view of a run recorded for `seconds` seconds, once a second, a step a second."""
    t = time.time() - seconds + np.arange(seconds + 1, dtype=float)
    flat = np.full(t.size, 2.0e9)
    view = {"t": t, "ranks_host_bytes": flat, "host_available_bytes": flat, "host_used_bytes": flat,
            "pcie_h2d_bps": flat, "pcie_d2h_bps": flat, "nvme_read_bps": flat, "nvme_write_bps": flat,
            "disk_read_bps": flat, "disk_write_bps": flat, "gpu_util_pct": np.full(t.size, 60.0),
            "step_times": [(float(x), step) for step, x in enumerate(t)], "steps": []}
    if phases:
        view["step_phases"] = {"rank": 0, "t": t, "step": np.arange(t.size),
                               **{name: np.full(t.size, 10.0) for name in PHASES}}
    return view


def _labels(axis) -> list[str]:  # type: ignore[no-untyped-def]
    low, high = axis.range
    return [label for spacing, values in axis.tickValues(low, high, axis.width())
            for label in axis.tickStrings(values, 1.0, spacing)]


def _time_labels(view) -> list[str]:  # type: ignore[no-untyped-def]
    """The labels drawn under the lowest chart that shows its time axis's values."""
    for chart in reversed(view.charts):
        axis = chart.plot_item.getAxis("bottom")
        if chart.isVisible() and axis.style["showValues"]:
            return _labels(axis)
    return []


def _assert_clock_time(labels: list[str]) -> None:
    assert len(labels) >= 2, labels
    for label in labels:
        assert "." not in label, labels
        assert time.strptime(label, "%H:%M:%S"), labels


@pytest.mark.parametrize("phases", [True, False], ids=["steps timed", "no step timed"])
def test_a_young_runs_time_axis_reads_as_clock_time_in_whole_seconds(qtbot, phases):
    from traindeck.gui.widgets.offload_view import OffloadView

    view = OffloadView()
    qtbot.addWidget(view)
    view.resize(1800, 900)  # a wide chart over a few seconds: pyqtgraph's finest level wrote "20.000"
    view.show()
    qtbot.waitExposed(view)
    view.set_view(_young_view(4, phases=phases))
    for chart in view.charts:
        chart.flush()
    view.grab()  # drawn once: the axes know their font
    _assert_clock_time(_time_labels(view))  # as the Monitor's other charts: clock time


def test_the_monitors_charts_label_a_few_seconds_in_whole_seconds(qtbot):
    from traindeck.gui.pages.monitor.shared import new_chart

    chart = new_chart("RAM", "B")
    qtbot.addWidget(chart)
    chart.resize(1800, 300)
    chart.show()
    qtbot.waitExposed(chart)
    t = time.time() - 4 + np.arange(5, dtype=float)
    chart.set_series("used", t, np.full(t.size, 2.0e9))
    chart.flush()
    chart.grab()
    _assert_clock_time(_labels(chart.plot_item.getAxis("bottom")))
