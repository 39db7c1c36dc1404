"""The Monitor's Host tab: a bar per CPU core, like htop's, over charts of total CPU, RAM and swap, disk and
network I/O, fed each `ResourceSample`'s host figures. A watched run's recording holds the same figures since the
run started: `fill_from_recording` fills the charts back with them where live samples do not reach (before the page
opened, while it was hidden), so a long window shows the run's whole stretch."""

from __future__ import annotations

from typing import Any

import numpy as np
from PySide6.QtWidgets import QGridLayout, QGroupBox, QVBoxLayout, QWidget

from traindeck.backend.monitor import ResourceSample
from traindeck.gui.pages.monitor.run_panel import with_recording
from traindeck.gui.pages.monitor.shared import break_lines, fit_window, new_chart
from traindeck.gui.widgets.charts import TimeSeriesChart
from traindeck.gui.widgets.core_bars import CoreBars

# (chart, line, the recording's column, filled) of each host line a run's recording holds
RECORDED_LINES = (("cpu_chart", "CPU", "cpu_pct", True), ("ram_chart", "used", "ram_used", True),
                  ("ram_chart", "available", "ram_available", False), ("ram_chart", "swap used", "swap_used", False),
                  ("disk_chart", "read", "disk_read_bps", False), ("disk_chart", "write", "disk_write_bps", False),
                  ("net_chart", "received", "net_rx_bps", False), ("net_chart", "sent", "net_tx_bps", False))


class HostPanel(QWidget):
    """The host's figures over time; it holds no state beyond its charts."""

    def __init__(self) -> None:
        super().__init__()
        self.core_bars = CoreBars()
        self.cores_box = QGroupBox("CPU cores")
        box_layout = QVBoxLayout(self.cores_box)
        box_layout.setContentsMargins(6, 2, 6, 2)
        box_layout.addWidget(self.core_bars)
        self.cpu_chart = new_chart("CPU (all cores)", "%")
        self.ram_chart = new_chart("RAM and swap", "B")
        self.disk_chart = new_chart("Disk I/O (whole disks)", "B/s")
        self.net_chart = new_chart("Network (all but loopback)", "B/s")
        self.charts: tuple[TimeSeriesChart, ...] = (self.cpu_chart, self.ram_chart, self.disk_chart, self.net_chart)
        grid = QGridLayout(self)
        # The per-core strip takes the height its cores need (a row per core up to 8, then columns, like htop).
        grid.addWidget(self.cores_box, 0, 0, 1, 2)
        for index, chart in enumerate(self.charts):
            grid.addWidget(chart, 1 + index // 2, index % 2)
        grid.setRowStretch(1, 1)
        grid.setRowStretch(2, 1)

    def show_sample(self, sample: ResourceSample) -> None:
        host, t = sample.host, sample.t
        self.core_bars.set_values(host.per_core_percent)
        self.cores_box.setTitle(f"CPU cores ({len(host.per_core_percent)})")
        self.cpu_chart.append("CPU", t, host.cpu_percent, fill=True)
        self.ram_chart.append("used", t, host.ram_used_bytes, fill=True)
        self.ram_chart.append("available", t, host.ram_available_bytes)
        if "total" not in self.ram_chart.references():
            self.ram_chart.add_reference(host.ram_total_bytes, "total")
        self.ram_chart.append("swap used", t, host.swap_used_bytes)  # beside RAM, like htop's Mem and Swp meters
        self.disk_chart.append("read", t, host.disk_read_bytes_per_s)
        self.disk_chart.append("write", t, host.disk_write_bytes_per_s)
        for path, device in host.watched_devices:
            rate = host.disk(device)
            self.disk_chart.append(f"{device} read ({path})", t, None if rate is None else rate.read_bytes_per_s)
            self.disk_chart.append(f"{device} write", t, None if rate is None else rate.write_bytes_per_s)
        self.net_chart.append("received", t, host.net_rx_bytes_per_s)
        self.net_chart.append("sent", t, host.net_tx_bytes_per_s)

    def fill_from_recording(self, series: dict[str, Any]) -> None:
        """A watched run's recorded host figures (read_series' dict) fill each line where live samples do not
        reach: the times before the first live sample and inside the gaps of a hidden page."""
        t = series.get("t")
        if t is None or not len(t):
            return
        for chart_name, name, column, fill in RECORDED_LINES:
            values = series.get(column)
            if values is None or np.all(np.isnan(values)):
                continue
            chart = getattr(self, chart_name)
            chart.set_series(name, *with_recording(t, values, *chart.data(name)), fill=fill)

    def set_window(self, seconds: float) -> None:
        """Show the newest `seconds` of every chart (and follow the newest data again)."""
        for chart in self.charts:
            chart.x_window = seconds

    def fit_window(self, seconds: float) -> None:
        """A window that fits what was sampled (see shared.fitted_window); a chart the person zoomed keeps its view."""
        fit_window(self.charts, seconds)

    def set_estimate(self, cpu_bytes_per_node: float | None) -> None:
        """The estimate of host memory per node as a reference line on the RAM chart; None removes it."""
        if cpu_bytes_per_node:
            self.ram_chart.add_reference(float(cpu_bytes_per_node), "estimate")
        else:
            self.ram_chart.remove_reference("estimate")

    def break_lines(self, at: float) -> None:
        break_lines(self.charts, at)

    def clear(self) -> None:
        """Every series and reference line gone (the demo's data replaces the live view)."""
        for chart in self.charts:
            chart.clear()
