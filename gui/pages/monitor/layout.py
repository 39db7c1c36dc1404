"""The Monitor page's widgets: its toolbar and its three chart tabs (GPUs, Host, Run), built once, plus the GPU
note the sample display uses (the chart and table makers are in shared.py). `MonitorLayout` is a part of `MonitorPage` (monitor_page.py): it sets the
widgets as the page's attributes, which the page's other parts (monitor_samples.py, monitor_runs.py) fill.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence, QPalette, QShortcut
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.monitor import MAX_INTERVAL_S, MIN_INTERVAL_S, ResourceSample
from traindeck.gui.pages.base import Page
from traindeck.gui.pages.monitor.shared import NO_RUN, WINDOWS, new_chart, new_table
from traindeck.gui.widgets.core_bars import CoreBars

if TYPE_CHECKING:  # a part of MonitorPage: typed as the page it is part of
    _Base = Page
else:
    _Base = object

# The run's totals, a line each beside its ranks' lines: (chart, line, the recording's column for what came before
# the page watched, the live snapshot's property for each sample since). Both feed every line: fed only from the
# recording, "largest rank" and the CPU and locked totals stood still at their last recorded value while the ranks'
# own lines went on (the tour's Run tab said "all ranks 93.9 %" beside two ranks at 5 %).
RUN_TOTAL_LINES = (("rank_rss_chart", "all ranks", "ranks_rss", "ranks_rss_bytes"),
                   ("rank_rss_chart", "largest rank", "rank_rss_max", "max_rank_rss_bytes"),
                   ("rank_cpu_chart", "all ranks", "ranks_cpu_pct", "ranks_cpu_percent"),
                   ("rank_gpu_chart", "all ranks", "ranks_gpu_mem", "ranks_gpu_memory_bytes"),
                   ("rank_locked_chart", "all ranks", "ranks_locked", "ranks_locked_bytes"))


def gpu_note(sample: ResourceSample) -> str:
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



class MonitorLayout(_Base):
    """Builds the toolbar and the GPU, Host and Run tabs (see MonitorPage)."""

    if TYPE_CHECKING:  # the page's other parts
        def _saved_interval(self) -> float: ...
        def refresh_runs(self) -> None: ...
        def _interval_changed(self, value: float) -> None: ...
        def _apply_window(self, index: int) -> None: ...
        def _run_picked(self, index: int) -> None: ...
        def _run_chosen(self, index: int) -> None: ...

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
        self.gpu_table = new_table(["GPU", "Name", "Util", "Memory", "Power", "Temp", "SM clock", "PCIe in",
                                 "PCIe out", "Processes"])
        self.gpu_util_chart = new_chart("GPU utilisation", "%")
        self.gpu_mem_chart = new_chart("GPU memory used", "B")
        self.gpu_power_chart = new_chart("Power draw", "W")
        self.gpu_temp_chart = new_chart("Temperature", "°C")
        self.pcie_h2d_chart = new_chart("PCIe host -> GPU (RX)", "B/s")
        self.pcie_d2h_chart = new_chart("PCIe GPU -> host (TX)", "B/s")
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
        self.cpu_chart = new_chart("CPU (all cores)", "%")
        self.ram_chart = new_chart("RAM and swap", "B")
        self.disk_chart = new_chart("Disk I/O (whole disks)", "B/s")
        self.net_chart = new_chart("Network (all but loopback)", "B/s")
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
        self.rank_rss_chart = new_chart("Ranks' host memory (RSS)", "B")
        self.rank_cpu_chart = new_chart("Ranks' CPU (100 % = one core)", "%")
        self.rank_gpu_chart = new_chart("Ranks' GPU memory", "B")
        self.rank_locked_chart = new_chart("Ranks' locked (pinned) host memory", "B")
        self.run_charts = (self.rank_rss_chart, self.rank_cpu_chart, self.rank_gpu_chart, self.rank_locked_chart)
        self.process_table = new_table(["PID", "Role", "Rank", "CPU %", "RSS", "Locked", "GPU memory", "Read",
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
