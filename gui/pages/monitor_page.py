"""Monitor: nvidia-smi and htop in one page, tied to a run.

Live charts of every GPU (utilisation, memory, power, temperature, PCIe each way), the host (per-core bars and
total CPU, RAM, swap, disk and network I/O) and the chosen run's ranks (memory, CPU, GPU memory, pinned memory,
and a process table), plus the run's offload view from its recording. Samples come from the backend's
`LiveSampler` on its own thread through `SamplerBridge`; run-store reads go through `ctx.tasks`. The UI thread
only appends numbers to charts.

Sampling stops when the page has been hidden for a while (or on shutdown) and restarts when it is shown.

Size (~700 lines): four panels (host, GPUs, processes, offload) over one sampler; split candidate: a module
per panel.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import numpy as np
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QKeySequence, QPalette, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDoubleSpinBox,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.monitor.live import RunChoice, run_choices, run_history, run_offload
from traindeck.backend.monitor.loop import MAX_INTERVAL_S, MIN_INTERVAL_S
from traindeck.backend.monitor.snapshots import GpuSnapshot, ResourceSample, RunSnapshot
from traindeck.gui.context import AppContext
from traindeck.gui.pages.base import Page
from traindeck.gui.widgets.charts import TimeSeriesChart, format_value
from traindeck.gui.widgets.core_bars import CoreBars
from traindeck.gui.widgets.offload_view import OffloadView
from traindeck.gui.widgets.run_state import state_icon
from traindeck.gui.widgets.sampler_bridge import SamplerBridge

DAY_AT_1HZ = 86_400
WINDOWS = (("1 min", 60.0), ("10 min", 600.0), ("1 hour", 3600.0), ("6 hours", 21600.0), ("24 hours", 86400.0))
HIDDEN_STOP_MS = 60_000  # hidden this long: stop sampling (restarts on show)
RUNS_REFRESH_MS = 10_000
OFFLOAD_REFRESH_MS = 5_000
NO_RUN = "None: host and GPUs only"


def _chart(title: str, unit: str) -> TimeSeriesChart:
    return TimeSeriesChart(title, unit, max_points=DAY_AT_1HZ)


def _table(headers: list[str]) -> QTableWidget:
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


def _set_row(table: QTableWidget, row: int, cells: Iterable[str], right_from: int = 1) -> None:
    for column, text in enumerate(cells):
        item = table.item(row, column)
        if item is None:
            item = QTableWidgetItem()
            if column >= right_from:
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            table.setItem(row, column, item)
        if item.text() != text:
            item.setText(text)


def _gpu_note(sample: ResourceSample) -> str:
    """One line of versions, then what could not be read, GPU by GPU."""
    v = sample.gpu_versions
    parts = [f"{label} {v[key]}" for key, label in (("driver", "NVIDIA driver"), ("cuda", "CUDA"), ("nvml", "NVML"))
             if v.get(key)]
    lines = ["  ·  ".join(parts)] if parts else []
    for g in sample.gpus:
        if g.error is not None:
            lines.append(f"GPU {g.index}: {g.error}")
        elif g.processes_unknown is not None:
            lines.append(f"GPU {g.index}: processes unknown: {g.processes_unknown}")
    return "\n".join(lines)


def _clear_series(chart: TimeSeriesChart) -> None:
    """Remove the data but keep reference lines (the estimate, totals)."""
    for name in chart.series_names():
        chart.remove_series(name)


class MonitorPage(Page):
    key = "monitor"
    title = "Monitor"
    order = 40

    def __init__(self, ctx: AppContext):
        super().__init__(ctx)
        self._run: RunChoice | None = None
        self._gpu_state: str | None = None  # "gpus" or the NVML reason, to switch the GPU tab only on change
        self._gpu_refs: dict[str, float] = {}
        self._estimate: tuple[float | None, float | None] = (None, None)
        self._demo = False
        self._stopped_by_hiding = False
        self._run_request = 0  # ignores results of reads for a run no longer chosen
        # Follow the running run unless the person chose one: a pick of theirs holds until a new run starts.
        self._pinned = False
        self._known_running: set[str] = set()
        self._follow_id: str | None = None  # a run launched from this window: watch it as soon as it is listed
        self._tab_chosen = False  # the person picked a tab: no more switching to Host on a machine without GPUs

        self.bridge = SamplerBridge(self)
        self.bridge.interval_s = self._saved_interval()
        self.bridge.sampled.connect(self._on_sample)

        self._build_toolbar()
        self.tabs = QTabWidget()
        self.tabs.addTab(self._build_gpu_tab(), "&GPUs")
        self.tabs.addTab(self._build_host_tab(), "&Host")
        self.tabs.addTab(self._build_run_tab(), "&Run")
        self.offload = OffloadView()
        self.tabs.addTab(self.offload, "&Offload")
        self.tabs.currentChanged.connect(lambda _i: self._refresh_offload())
        self.tabs.tabBarClicked.connect(lambda _i: setattr(self, "_tab_chosen", True))
        ctx.run_started.connect(self._run_started)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 8, 8)
        layout.addLayout(self.toolbar)
        layout.addWidget(self.summary)
        layout.addWidget(self.tabs, 1)

        self._hidden_timer = QTimer(self, singleShot=True, interval=HIDDEN_STOP_MS)
        self._hidden_timer.timeout.connect(self._stop_while_hidden)
        self._runs_timer = QTimer(self, interval=RUNS_REFRESH_MS)
        self._runs_timer.timeout.connect(self.refresh_runs)
        self._offload_timer = QTimer(self, interval=OFFLOAD_REFRESH_MS)
        self._offload_timer.timeout.connect(self._refresh_offload)
        self._apply_window(self.window_combo.currentIndex())

    # -------------------------------------------------------------------------------------------- building
    def _build_toolbar(self) -> None:
        self.run_combo = QComboBox()
        self.run_combo.setMinimumContentsLength(40)  # "name · state · 24 Nov 02:33 · 2835" whole
        self.run_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.run_combo.setToolTip("The run whose processes are charted on the Run tab and whose recording feeds "
                                  "the Offload tab. Running runs are sampled live; finished ones are read back.")
        self.run_combo.addItem(NO_RUN, None)
        self.run_combo.activated.connect(self._run_picked)  # the person's pick (programmatic changes block signals)
        self.run_combo.currentIndexChanged.connect(self._run_chosen)
        refresh = QPushButton("Refresh")
        refresh.setToolTip("Look for new runs (F5)")
        refresh.clicked.connect(self.refresh_runs)
        QShortcut(QKeySequence("F5"), self, self.refresh_runs)

        self.interval_spin = QDoubleSpinBox()
        self.interval_spin.setRange(MIN_INTERVAL_S, MAX_INTERVAL_S)
        self.interval_spin.setSingleStep(0.5)
        self.interval_spin.setDecimals(1)
        self.interval_spin.setSuffix(" s")
        self.interval_spin.setValue(self._saved_interval())
        self.interval_spin.setToolTip(f"Seconds between samples ({MIN_INTERVAL_S:g}-{MAX_INTERVAL_S:g}). "
                                      "Runs record at their own rate (1 s by default).")
        self.interval_spin.valueChanged.connect(self._interval_changed)

        self.window_combo = QComboBox()
        for label, _ in WINDOWS:
            self.window_combo.addItem(label)
        saved = self.ctx.settings.value("monitor/window", "10 min")
        self.window_combo.setCurrentIndex(max(0, self.window_combo.findText(str(saved))))
        self.window_combo.setToolTip("How much of the live history the charts show (zoom with the mouse wheel; "
                                     "the A button in a chart's corner returns to the newest data)")
        self.window_combo.currentIndexChanged.connect(self._apply_window)

        self.demo_label = QLabel("demo data")
        self.demo_label.setForegroundRole(QPalette.ColorRole.PlaceholderText)  # discreet, in either theme
        font = self.demo_label.font()
        font.setPointSizeF(max(6.0, font.pointSizeF() * 0.85))
        self.demo_label.setFont(font)
        self.demo_label.setToolTip("Recorded-looking sample data (traindeck gui --demo / --screenshot); "
                                   "live sampling is off")
        self.demo_label.hide()

        self.toolbar = QHBoxLayout()
        for widget in (QLabel("Watch run:"), self.run_combo, refresh):
            self.toolbar.addWidget(widget)
        self.toolbar.addSpacing(16)
        for setting in (QLabel("Sample every"), self.interval_spin, QLabel("Show"), self.window_combo):
            self.toolbar.addWidget(setting)
        self.toolbar.addStretch(1)
        self.toolbar.addWidget(self.demo_label)
        self.summary = QLabel("Starting the sampler...")
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

    def _build_gpu_tab(self) -> QWidget:
        self.no_gpu_label = QLabel("Looking for NVIDIA GPUs...")
        self.no_gpu_label.setWordWrap(True)
        self.no_gpu_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.no_gpu_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.gpu_table = _table(["GPU", "Name", "Util", "Memory", "Power", "Temp", "SM clock", "PCIe in",
                                 "PCIe out", "Processes"])
        self.gpu_util_chart = _chart("GPU utilisation", "%")
        self.gpu_mem_chart = _chart("GPU memory used", "B")
        self.gpu_power_chart = _chart("Power draw", "W")
        self.gpu_temp_chart = _chart("Temperature", "°C")
        self.pcie_h2d_chart = _chart("PCIe host -> GPU (RX)", "B/s")
        self.pcie_d2h_chart = _chart("PCIe GPU -> host (TX)", "B/s")
        self.gpu_charts = (self.gpu_util_chart, self.gpu_mem_chart, self.gpu_power_chart, self.gpu_temp_chart,
                           self.pcie_h2d_chart, self.pcie_d2h_chart)
        # Driver, CUDA and NVML versions, and what NVML could not read (a GPU it may not open, a lost GPU,
        # process lists it refused): said here rather than shown as zeros.
        self.gpu_note = QLabel("")
        self.gpu_note.setWordWrap(True)
        self.gpu_note.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        content = QWidget()
        outer = QVBoxLayout(content)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(self.gpu_note)
        charts = QWidget()
        outer.addWidget(charts, 1)
        grid = QGridLayout(charts)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.addWidget(self.gpu_table, 0, 0, 1, 2)
        for index, chart in enumerate(self.gpu_charts):
            grid.addWidget(chart, 1 + index // 2, index % 2)
        for row in (1, 2, 3):
            grid.setRowStretch(row, 1)
        self.gpu_stack = QStackedWidget()
        self.gpu_stack.addWidget(self.no_gpu_label)
        self.gpu_stack.addWidget(content)
        return self.gpu_stack

    def _build_host_tab(self) -> QWidget:
        self.core_bars = CoreBars()
        self.cores_box = QGroupBox("CPU cores")
        box_layout = QVBoxLayout(self.cores_box)
        box_layout.setContentsMargins(6, 2, 6, 2)
        box_layout.addWidget(self.core_bars)
        self.cpu_chart = _chart("CPU (all cores)", "%")
        self.ram_chart = _chart("RAM and swap", "B")
        self.disk_chart = _chart("Disk I/O (whole disks)", "B/s")
        self.net_chart = _chart("Network (all but loopback)", "B/s")
        self.host_charts = (self.cpu_chart, self.ram_chart, self.disk_chart, self.net_chart)
        tab = QWidget()
        grid = QGridLayout(tab)
        # The per-core strip takes the height its cores need (a row per core up to 8, then columns, like htop).
        grid.addWidget(self.cores_box, 0, 0, 1, 2)
        for index, chart in enumerate(self.host_charts):
            grid.addWidget(chart, 1 + index // 2, index % 2)
        grid.setRowStretch(1, 1)
        grid.setRowStretch(2, 1)
        return tab

    def _build_run_tab(self) -> QWidget:
        self.run_title = QLabel()
        self.rank_rss_chart = _chart("Ranks' host memory (RSS)", "B")
        self.rank_cpu_chart = _chart("Ranks' CPU (100 % = one core)", "%")
        self.rank_gpu_chart = _chart("Ranks' GPU memory", "B")
        self.rank_locked_chart = _chart("Ranks' locked (pinned) host memory", "B")
        self.run_charts = (self.rank_rss_chart, self.rank_cpu_chart, self.rank_gpu_chart, self.rank_locked_chart)
        self.process_table = _table(["PID", "Role", "Rank", "CPU %", "RSS", "Locked", "GPU memory", "Read",
                                     "Written", "Command"])
        self.process_table.horizontalHeader().setSectionResizeMode(9, QHeaderView.ResizeMode.Stretch)
        content = QWidget()
        grid = QGridLayout(content)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.addWidget(self.run_title, 0, 0, 1, 2)
        for index, chart in enumerate(self.run_charts):
            grid.addWidget(chart, 1 + index // 2, index % 2)
        grid.addWidget(self.process_table, 3, 0, 1, 2)
        grid.setRowStretch(1, 3)
        grid.setRowStretch(2, 3)
        grid.setRowStretch(3, 2)
        self.no_run_label = QLabel("Choose a run above (a running one is sampled live: its launcher and every "
                                   "rank; a finished one is read back from its recording).")
        self.no_run_label.setWordWrap(True)
        self.no_run_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.run_stack = QStackedWidget()
        self.run_stack.addWidget(self.no_run_label)
        self.run_stack.addWidget(content)
        return self.run_stack

    # -------------------------------------------------------------------------------------------- settings
    def _saved_interval(self) -> float:
        try:
            value = float(self.ctx.settings.value("monitor/interval", 1.0))  # type: ignore[arg-type]  # str or float
        except (TypeError, ValueError):
            value = 1.0
        return min(MAX_INTERVAL_S, max(MIN_INTERVAL_S, value))

    def _interval_changed(self, value: float) -> None:
        self.ctx.settings.setValue("monitor/interval", value)
        self.bridge.set_interval(value)  # restarts the loop without waiting for it

    def _apply_window(self, index: int) -> None:
        label, seconds = WINDOWS[max(0, index)]
        self.ctx.settings.setValue("monitor/window", label)
        live = self.gpu_charts + self.host_charts + (self.run_charts if self._run is None or self._run.live else ())
        for chart in live:
            chart.x_window = seconds

    # ------------------------------------------------------------------------------------------- lifecycle
    def start_sampling(self) -> None:
        if self._demo:
            return
        self.bridge.start()

    def stop_sampling(self) -> None:
        self.bridge.stop()

    def page_shown(self) -> None:
        self._hidden_timer.stop()
        self.start_sampling()
        self.refresh_runs()
        if not self._demo:
            self._runs_timer.start()
        self._refresh_offload()

    def hideEvent(self, event: Any) -> None:  # noqa: N802
        super().hideEvent(event)
        self._off_screen()

    def showEvent(self, event: Any) -> None:  # noqa: N802
        super().showEvent(event)
        self._back_on_screen()

    def window_minimised(self, minimised: bool) -> None:
        # A minimised window is as good as a hidden page: the same pause (sampling stops after HIDDEN_STOP_MS).
        if minimised:
            self._off_screen()
        else:
            self._back_on_screen()
            self.page_shown()

    def _off_screen(self) -> None:
        self._hidden_timer.start()
        self._runs_timer.stop()
        self._offload_timer.stop()

    def _back_on_screen(self) -> None:
        self._hidden_timer.stop()
        if self._stopped_by_hiding:
            self._stopped_by_hiding = False
            self.break_lines()
            self.start_sampling()

    def break_lines(self, t: float | None = None) -> None:
        """End every live line here: sampling stopped while the page was hidden, and a line drawn straight across
        the minutes without samples would claim values nobody measured (the charts draw NaN as a gap)."""
        at = time.time() if t is None else t
        for chart in self.gpu_charts + self.host_charts + (self.run_charts if self._run is not None and self._run.live
                                                           else ()):
            for name in chart.series_names():
                if chart.point_count(name):
                    chart.append(name, [at], [float("nan")])

    def _stop_while_hidden(self) -> None:
        if self.bridge.running:
            self._stopped_by_hiding = True
            self.bridge.stop()

    def shutdown(self) -> None:
        for timer in (self._hidden_timer, self._runs_timer, self._offload_timer):
            timer.stop()
        self.bridge.stop(wait_s=2.0)  # let the loop release NVML before the process exits

    # -------------------------------------------------------------------------------------------- estimate
    def set_estimate(self, gpu_bytes_per_device: float | None, cpu_bytes_per_node: float | None) -> None:
        """Draw the memory estimate (per GPU, and host memory per node) as reference lines; None removes one."""
        self._estimate = (gpu_bytes_per_device, cpu_bytes_per_node)
        for chart, value in ((self.gpu_mem_chart, gpu_bytes_per_device), (self.rank_gpu_chart, gpu_bytes_per_device),
                             (self.rank_rss_chart, cpu_bytes_per_node), (self.ram_chart, cpu_bytes_per_node)):
            if value:
                chart.add_reference(float(value), "estimate")
            else:
                chart.remove_reference("estimate")
        self.offload.set_estimate(cpu_bytes_per_node)

    # ---------------------------------------------------------------------------------------------- samples
    def _on_sample(self, sample: ResourceSample, *, tables: bool = True) -> None:
        tables = tables and not self.window().isMinimized()  # charts keep their points; tables wait for a restore
        self._show_host(sample)
        self._show_gpus(sample, tables)
        if sample.run is not None and self._run is not None and (self._run.live or self._demo):
            self._show_run(sample.run, tables)

    def _show_host(self, sample: ResourceSample) -> None:
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
        swap = (f"swap {format_value(host.swap_used_bytes, 'B')} of {format_value(host.swap_total_bytes, 'B')}"
                if host.swap_total_bytes else "no swap")
        gpus = (f"{len(sample.gpus)} GPU{'s' if len(sample.gpus) != 1 else ''}" if sample.gpus
                else "no NVIDIA GPU")
        self.summary.setText(
            f"CPU {format_value(host.cpu_percent, '%')} of {len(host.per_core_percent)} cores  ·  "
            f"RAM {format_value(host.ram_used_bytes, 'B')} used, {format_value(host.ram_available_bytes, 'B')} "
            f"available of {format_value(host.ram_total_bytes, 'B')}  ·  {swap}"
            f"  ·  {gpus}  ·  {time.strftime('%H:%M:%S', time.localtime(sample.t))}")

    def _show_gpus(self, sample: ResourceSample, tables: bool) -> None:
        if not sample.gpus:
            reason = sample.gpu_error or "NVML found no GPU"
            if self._gpu_state is None and not self._tab_chosen and self.tabs.currentIndex() == 0:
                self.tabs.setCurrentIndex(1)  # no GPU: open on what there is to see (the GPU tab says why)
            if self._gpu_state != reason:
                self._gpu_state = reason
                self.rank_gpu_chart.set_title("Ranks' GPU memory: no NVIDIA GPU")
                self.no_gpu_label.setText(
                    f"<p style='font-size:14pt'><b>No NVIDIA GPU:</b> {reason}</p>"
                    "<p>Host, run and offload charts work without one. GPU charts appear here when NVML can read "
                    "a GPU (NVIDIA driver loaded, nvidia-ml-py installed).</p>")
                self.gpu_stack.setCurrentIndex(0)
            return
        if self._gpu_state != "gpus":
            self._gpu_state = "gpus"
            self.rank_gpu_chart.set_title("Ranks' GPU memory")
            self.gpu_stack.setCurrentIndex(1)
        for gpu in sample.gpus:
            self._append_gpu(gpu)
        self._gpu_references(sample.gpus)
        note = _gpu_note(sample)
        if self.gpu_note.text() != note:
            self.gpu_note.setText(note)
        if tables:
            self._fill_gpu_table(sample.gpus)

    def _append_gpu(self, gpu: GpuSnapshot) -> None:
        name, t = f"GPU {gpu.index}", gpu.t
        self.gpu_util_chart.append(name, t, gpu.utilization_percent)
        self.gpu_mem_chart.append(name, t, gpu.memory_used_bytes)
        self.gpu_power_chart.append(name, t, gpu.power_w)
        self.gpu_temp_chart.append(name, t, gpu.temperature_c)
        pcie_t = gpu.pcie_t if gpu.pcie_t is not None else t  # PCIe is read on its own thread, with its own time
        self.pcie_h2d_chart.append(name, pcie_t, gpu.pcie_h2d_bytes_per_s)
        self.pcie_d2h_chart.append(name, pcie_t, gpu.pcie_d2h_bytes_per_s)

    def _gpu_references(self, gpus: tuple[GpuSnapshot, ...]) -> None:
        """Memory size and power limit as reference lines: one line when all GPUs agree, else one per GPU."""
        for chart, values, kind in (
            (self.gpu_mem_chart, [g.memory_total_bytes for g in gpus], "total"),
            (self.gpu_power_chart, [g.power_limit_w for g in gpus], "limit"),
        ):
            known = {g.index: v for g, v in zip(gpus, values, strict=True) if v is not None}
            if not known:
                continue
            wanted = ({kind: next(iter(known.values()))} if len(set(known.values())) == 1
                      else {f"GPU {i} {kind}": v for i, v in known.items()})
            for label, value in wanted.items():
                key = f"{id(chart)}:{label}"
                if self._gpu_refs.get(key) != value:
                    self._gpu_refs[key] = value
                    chart.add_reference(float(value), label)

    def _fill_gpu_table(self, gpus: tuple[GpuSnapshot, ...]) -> None:
        table = self.gpu_table
        if table.rowCount() != len(gpus):
            table.setRowCount(len(gpus))
            header = table.horizontalHeader().height()
            table.setFixedHeight(header + sum(table.rowHeight(r) for r in range(len(gpus))) + 6)
        for row, g in enumerate(gpus):
            if g.error is not None:  # a placeholder: this GPU could not be read at all
                _set_row(table, row, [str(g.index), f"{g.name or '?'}: {g.error}"] + ["-"] * 8, right_from=2)
                continue
            memory = (f"{format_value(g.memory_used_bytes, 'B')} / {format_value(g.memory_total_bytes, 'B')}"
                      if g.memory_total_bytes else format_value(g.memory_used_bytes, "B"))
            power = (f"{format_value(g.power_w)} / {format_value(g.power_limit_w, 'W')}"
                     if g.power_limit_w else format_value(g.power_w, "W"))
            estimate = " (est.)" if g.pcie_source == "sampled" else ""  # a 20 ms window, not a byte count
            _set_row(table, row, [
                str(g.index), g.name or "?", format_value(g.utilization_percent, "%"), memory, power,
                format_value(g.temperature_c, "°C"), format_value(g.sm_clock_mhz, "MHz"),
                format_value(g.pcie_h2d_bytes_per_s, "B/s") + estimate,
                format_value(g.pcie_d2h_bytes_per_s, "B/s") + estimate,
                "unknown" if g.processes_unknown is not None else str(len(g.processes)),
            ], right_from=2)
            processes = table.item(row, 9)
            if processes is not None:
                processes.setToolTip(g.processes_unknown or "")

    def _show_run(self, run: RunSnapshot, tables: bool) -> None:
        t = run.t
        ranked = any(p.role == "rank" for p in run.processes)
        for process in run.ranks:
            name = f"rank {process.rank}" if ranked and process.rank is not None else f"PID {process.pid}"
            self.rank_rss_chart.append(name, t, process.rss_bytes)
            self.rank_cpu_chart.append(name, t, process.cpu_percent)
            if self._gpu_state == "gpus":  # no GPU: no empty series whose names promise figures
                self.rank_gpu_chart.append(name, t, process.gpu_memory_bytes)
            self.rank_locked_chart.append(name, t, process.locked_bytes)
        if run.processes:
            self.rank_rss_chart.append("all ranks", t, run.ranks_rss_bytes)
        if tables:
            self._fill_process_table([self._process_cells(p) for p in run.processes])

    @staticmethod
    def _process_cells(p: Any) -> list[str]:
        get = (lambda k: p.get(k)) if isinstance(p, dict) else (lambda k: getattr(p, k))  # noqa: E731
        rank = get("rank")
        return [str(get("pid")), str(get("role") or ""), "" if rank is None else str(rank),
                format_value(get("cpu_percent")), format_value(get("rss_bytes"), "B"),
                format_value(get("locked_bytes"), "B"), format_value(get("gpu_memory_bytes"), "B"),
                format_value(get("read_bytes"), "B"), format_value(get("write_bytes"), "B"), str(get("cmdline") or "")]

    def _fill_process_table(self, rows: list[list[str]]) -> None:
        if self.process_table.rowCount() != len(rows):
            self.process_table.setRowCount(len(rows))
        for row, cells in enumerate(rows):
            _set_row(self.process_table, row, cells, right_from=2)
            command = self.process_table.item(row, 9)
            if command is not None:  # _set_row has just filled the row
                command.setTextAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)

    # ------------------------------------------------------------------------------------------------- runs
    def refresh_runs(self) -> None:
        if self._demo:
            return
        self.ctx.tasks.run(run_choices, done=self._runs_listed, failed=self._runs_failed)

    def _runs_failed(self, error: str) -> None:
        self.ctx.status.emit(f"Monitor: could not list runs: {error.splitlines()[0]}")

    def _runs_listed(self, choices: list[RunChoice]) -> None:
        if self._demo:
            return  # a listing started before the demo data replaced the live view
        current = self._run.id if self._run is not None else None
        self.run_combo.blockSignals(True)
        try:
            self.run_combo.clear()
            self.run_combo.addItem(NO_RUN, None)
            for choice in choices:
                self.run_combo.addItem(state_icon(choice.state), choice.label, choice)
            follow = self.run_to_follow(choices)
            if follow is not None:
                current = follow
            index = next((i for i in range(1, self.run_combo.count())
                          if self.run_combo.itemData(i).id == current), 0)
            self.run_combo.setCurrentIndex(index)
        finally:
            self.run_combo.blockSignals(False)
        self._known_running = {c.id for c in choices if c.state == "running"}
        chosen = self.run_combo.currentData()
        if follow is not None and (self._run is None or self._run.id != follow):
            self.choose_run(chosen)
        elif current is not None and chosen is None:
            self.choose_run(None)  # the run disappeared from the store
        elif chosen is not None and self._run is not None and chosen.state != self._run.state:
            self.choose_run(chosen)  # it finished (or started): switch between live and recorded

    def _run_chosen(self, index: int) -> None:
        self.choose_run(self.run_combo.itemData(index))

    def _run_picked(self, index: int) -> None:
        choice = self.run_combo.itemData(index)
        # Picking the running run (or nothing while one runs) is following; picking anything else holds.
        self._pinned = not (choice is not None and choice.state == "running")
        self._follow_id = None

    def _run_started(self, run_id: str) -> None:
        self._pinned = False
        self._follow_id = run_id
        self.refresh_runs()

    def run_to_follow(self, choices: list[RunChoice]) -> str | None:
        """The run to watch now instead of the current one, or None to stay: a run just launched from this window;
        else, unless the person picked a run, the newest running run while the one watched is not running; and
        a run that started since the last look even after a pick."""
        running = [c for c in choices if c.state == "running"]  # newest first
        if self._follow_id is not None and any(c.id == self._follow_id for c in choices):
            chosen, self._follow_id = self._follow_id, None
            return chosen
        if not running:
            return None
        newest = running[0]
        watched_live = self._run is not None and any(c.id == self._run.id for c in running)
        if watched_live:
            return None
        if not self._pinned or newest.id not in self._known_running:
            self._pinned = False
            return newest.id
        return None

    def choose_run(self, choice: RunChoice | None) -> None:
        """Watch `choice` (None: host and GPUs only). A running run is sampled live, a finished one read back."""
        self._run = choice
        self._run_request += 1
        for chart in self.run_charts:
            _clear_series(chart)
        self.process_table.setRowCount(0)
        self.bridge.set_root_pid(choice.launcher_pid if choice is not None and choice.live else None)
        self._apply_window(self.window_combo.currentIndex())
        if choice is None:
            self.run_stack.setCurrentIndex(0)
            self.offload.show_empty()
            self._offload_timer.stop()
            return
        self.run_stack.setCurrentIndex(1)
        if not choice.live:
            for chart in self.run_charts:
                chart.x_window = None  # a recording is shown whole
        how = "sampled live" if choice.live else "from its recording"
        self.run_title.setText(f"<b>{choice.label}</b> — {how}")
        if not self._demo:
            request = self._run_request
            self.ctx.tasks.run(run_history, choice.id, done=lambda r: self._history_loaded(request, r),
                               failed=self._read_failed)
            if choice.live:
                self._offload_timer.start()
            else:
                self._offload_timer.stop()
            self._refresh_offload()

    def _read_failed(self, error: str) -> None:
        self.ctx.status.emit(f"Monitor: could not read the run's recording: {error.splitlines()[0]}")

    def _history_loaded(self, request: int, result: dict[str, Any]) -> None:
        """The run's recorded totals: the whole chart for a finished run; for a live one, what came before the
        first live sample."""
        if request != self._run_request or self._run is None:
            return
        series = result["series"]
        t = series["t"]
        for chart, name, column in ((self.rank_rss_chart, "all ranks", "ranks_rss"),
                                    (self.rank_rss_chart, "largest rank", "rank_rss_max"),
                                    (self.rank_cpu_chart, "all ranks", "ranks_cpu_pct"),
                                    (self.rank_gpu_chart, "all ranks", "ranks_gpu_mem"),
                                    (self.rank_locked_chart, "all ranks", "ranks_locked")):
            values = series[column]
            if not len(t) or np.all(np.isnan(values)):
                continue
            live_x, live_y = chart.data(name)
            keep = t < live_x[0] if len(live_x) else np.ones(len(t), dtype=bool)
            chart.set_series(name, np.concatenate((t[keep], live_x)), np.concatenate((values[keep], live_y)))
        last = result.get("last_processes")
        if last and not self._run.live:
            self._fill_process_table([self._process_cells(p) for p in last["processes"]])
        if not len(t):
            self.run_title.setText(f"<b>{self._run.label}</b> — nothing recorded"
                                   + (" yet; sampling live" if self._run.live else ""))

    def _refresh_offload(self) -> None:
        if self._demo or self._run is None or self.tabs.currentWidget() is not self.offload:
            return
        request = self._run_request
        self.ctx.tasks.run(run_offload, self._run.id, done=lambda v: self._offload_loaded(request, v),
                           failed=self._read_failed)

    def _offload_loaded(self, request: int, view: dict[str, Any]) -> None:
        if request == self._run_request and self._run is not None:
            if len(view["t"]):
                self.offload.set_view(view)
            else:
                self.offload.show_empty(f"Nothing recorded for {self._run.label} yet.")

    # ------------------------------------------------------------------------------------------------- demo
    def load_demo(self) -> None:
        """Recorded-looking data in every chart, including a GPU section built from NVML-shaped snapshots."""
        from traindeck.backend.monitor.demo import demo_offload_view, demo_samples

        self._demo = True
        self.stop_sampling()
        for timer in (self._runs_timer, self._offload_timer):
            timer.stop()
        self.demo_label.show()
        samples = demo_samples()
        for chart in self.gpu_charts + self.host_charts + self.run_charts:
            chart.clear()
        self._gpu_refs.clear()
        self._gpu_state = None
        demo_run = RunChoice("demo", "train.py: ZeRO-2, optimizer offload to CPU + NVMe", "running", None,
                             samples[0].t)
        self.run_combo.blockSignals(True)
        self.run_combo.clear()
        self.run_combo.addItem(NO_RUN, None)
        self.run_combo.addItem(demo_run.label, demo_run)
        self.run_combo.setCurrentIndex(1)
        self.run_combo.blockSignals(False)
        self.choose_run(demo_run)
        self.run_title.setText(f"<b>{demo_run.label}</b> — demo data")
        for index, sample in enumerate(samples):
            self._on_sample(sample, tables=index == len(samples) - 1)
        self.set_estimate(21.5 * 1024**3, 44 * 1024**3)
        self.ctx.tasks.run(demo_offload_view, samples, done=self.offload.set_view, failed=self._read_failed)


PAGE = MonitorPage
