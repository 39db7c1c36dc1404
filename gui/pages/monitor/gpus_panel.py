"""The Monitor's GPUs tab: a row per GPU (utilisation, memory, power, temperature, clock, PCIe, processes, health)
over charts of each, fed each `ResourceSample`'s NVML snapshots, with a health strip per GPU under the utilisation
chart (health_strips.py: live readings, and the watched run's recorded ones with its step ends); without a
readable GPU, the reason NVML gives."""

from __future__ import annotations

import html
import time
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QGridLayout, QLabel, QStackedWidget, QVBoxLayout, QWidget

from traindeck.backend.monitor import (
    GpuHealth,
    GpuSnapshot,
    ResourceSample,
    RunChoice,
    health_row,
    run_health_strip,
)
from traindeck.gui.context import AppContext
from traindeck.gui.pages.monitor.health_strips import HealthStrips
from traindeck.gui.pages.monitor.shared import (
    break_lines,
    fit_window,
    new_chart,
    new_table,
    read_failed_text,
    set_row,
)
from traindeck.gui.widgets.chart_axis import format_value
from traindeck.gui.widgets.charts import TimeSeriesChart
from traindeck.gui.widgets.labels import ReasonLabel
from traindeck.gui.widgets.message_list import tone


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


def no_gpu_reason(sample: ResourceSample) -> str | None:
    """Why no GPU can be charted (NVML's words), or None when one can: no GPU at all, or none NVML could read."""
    if not sample.gpus:
        return sample.gpu_error or "NVML lists none"
    if all(g.error is not None for g in sample.gpus):
        return "; ".join(f"GPU {g.index}: {g.error}" for g in sample.gpus)
    return None


def no_gpu_text(reason: str) -> str:
    """One sentence with one colon where there is no GPU at all ("No NVIDIA GPU found: the NVML library … is not
    installed."); where there are GPUs NVML cannot read, each one's reason after a first sentence saying so."""
    if reason.startswith("GPU "):
        return f"NVML can read none of the GPUs. {reason}"
    return f"No NVIDIA GPU found: {reason}."


def process_lines(gpu: GpuSnapshot) -> str:
    """One line per process on the GPU, as nvitop lists them: PID, GPU memory and SM use (where NVML gives it)."""
    lines = []
    for p in gpu.processes:
        parts = [f"PID {p.pid}", format_value(p.used_memory_bytes, "B") if p.used_memory_bytes is not None else "-"]
        if p.sm_percent is not None:
            parts.append(f"SM {p.sm_percent:.0f} %")
        lines.append(" · ".join(parts))
    return "\n".join(lines)

class GpuChartSlot(QStackedWidget):
    """A GPU chart, or in its place the reason there is no GPU to chart: never an empty 0-1 axis. A chart that
    holds lines (a recording made where there were GPUs) stays shown."""

    def __init__(self, chart: TimeSeriesChart) -> None:
        super().__init__()
        self.chart = chart
        self.reason: str | None = None
        self.label = ReasonLabel()  # not height-for-width: the page keeps its layout without a GPU
        self.addWidget(chart)
        self.addWidget(self.label)

    def set_reason(self, reason: str | None) -> None:
        """None: a GPU is read (the chart); else NVML's reason, said instead of the chart while it is empty."""
        self.reason = reason
        if reason is not None:
            self.label.setText(f"<b>{self.chart.title}</b><br>{html.escape(no_gpu_text(reason))}")
        self.update_shown()

    def update_shown(self) -> None:
        """After lines were added or cleared: the chart, or the reason in its place."""
        self.setCurrentWidget(self.label if self.reason is not None and not self.chart.series_names()
                              else self.chart)


HEALTH_REFRESH_MS = 5_000  # a running run's recorded health and steps are read again this often


class GpuPanel(QStackedWidget):
    """The GPU charts, or the reason there are none (the stack's first page). With `ctx`, the run `watch`ed has its
    recorded health and step ends read into the health strips (without, the strips show live readings only).

    `state_changed(present)` says the GPUs became readable (True) or not, or that the reason changed;
    `missing_at_start()` says the first sample since the start (or `clear`) has no GPU, before `state_changed`."""

    state_changed = Signal(bool)
    missing_at_start = Signal()

    def __init__(self, ctx: AppContext | None = None) -> None:
        super().__init__()
        self.ctx = ctx
        self._run: RunChoice | None = None
        self._request = 0  # ignores a read for a run no longer watched
        self._state: str | None = None  # "gpus" or NVML's reason: the widgets switch only when it changes
        self.reason: str | None = None  # why no GPU is charted (NVML's words); None while GPUs are read
        self._refs: dict[str, float] = {}  # the reference lines drawn, by chart and label
        self.no_gpu_label = QLabel("Looking for NVIDIA GPUs...")
        self.no_gpu_label.setWordWrap(True)
        self.no_gpu_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.no_gpu_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.gpu_table = new_table(["GPU", "Name", "Util", "Memory", "Power", "Temp", "SM clock", "PCIe in",
                                    "PCIe out", "Processes", "Health"])
        self.gpu_util_chart = new_chart("GPU utilisation", "%")
        self.gpu_mem_chart = new_chart("GPU memory used", "B")
        self.gpu_power_chart = new_chart("Power draw", "W")
        self.gpu_temp_chart = new_chart("Temperature", "°C")
        self.pcie_h2d_chart = new_chart("PCIe host -> GPU (RX)", "B/s")
        self.pcie_d2h_chart = new_chart("PCIe GPU -> host (TX)", "B/s")
        self.charts: tuple[TimeSeriesChart, ...] = (self.gpu_util_chart, self.gpu_mem_chart, self.gpu_power_chart,
                                                    self.gpu_temp_chart, self.pcie_h2d_chart, self.pcie_d2h_chart)
        self.health_strips = HealthStrips(self.gpu_util_chart)
        self.health_timer = QTimer(self, interval=HEALTH_REFRESH_MS)
        self.health_timer.timeout.connect(self.reload_health)
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
        utilisation = QWidget()  # the strips under the chart whose time axis they share
        column = QVBoxLayout(utilisation)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(0)
        column.addWidget(self.gpu_util_chart, 1)
        column.addWidget(self.health_strips)
        for index, chart in enumerate(self.charts):
            grid.addWidget(utilisation if chart is self.gpu_util_chart else chart, 1 + index // 2, index % 2)
        for row in (1, 2, 3):
            grid.setRowStretch(row, 1)
        self.addWidget(self.no_gpu_label)
        self.addWidget(content)

    def show_sample(self, sample: ResourceSample, tables: bool) -> None:
        """Charts take every sample; the table only when `tables` (not while the window is minimised)."""
        reason = no_gpu_reason(sample)
        if reason is not None:
            if self._state is None:
                self.missing_at_start.emit()
            if self._state != reason:
                self._state = self.reason = reason
                self.no_gpu_label.setText(
                    f"<p style='font-size:14pt'>{html.escape(no_gpu_text(reason))}</p>"
                    "<p>Host, run and offload charts work without one. GPU charts appear here when NVML can read "
                    "a GPU (NVIDIA driver loaded, nvidia-ml-py installed).</p>")
                self.setCurrentIndex(0)
                self.state_changed.emit(False)
            return
        if self._state != "gpus":
            self._state = "gpus"
            self.reason = None
            self.setCurrentIndex(1)
            self.state_changed.emit(True)
        for gpu in sample.gpus:
            self._append(gpu)
        self._references(sample.gpus)
        note = gpu_note(sample)
        if self.gpu_note.text() != note:
            self.gpu_note.setText(note)
        if tables:
            self._fill_table(sample.gpus)

    def watch(self, choice: RunChoice | None, *, demo: bool = False) -> None:
        """The run whose recorded health and step ends the strips show (None: live readings only); a running
        run's are read again every HEALTH_REFRESH_MS until `pause` or another run."""
        self._run = None if demo else choice
        self._request += 1
        self.health_strips.set_recorded([])
        self.health_strips.set_steps([])
        if self._run is not None and self._run.live:
            self.health_timer.start()
        else:
            self.health_timer.stop()
        self.reload_health()

    def reload_health(self) -> None:
        if self.ctx is None or self._run is None:
            return
        request = self._request
        self.ctx.tasks.run(run_health_strip, self._run.id, done=lambda v: self._health_loaded(request, v),
                           failed=self._read_failed)

    def _read_failed(self, error: str) -> None:
        if self.ctx is not None:
            self.ctx.status.emit(read_failed_text(str(error)))

    def pause(self) -> None:
        """No more reads of the run's health until the next `watch`."""
        self.health_timer.stop()

    def _health_loaded(self, request: int, found: dict[str, Any]) -> None:
        if request != self._request:
            return
        self.health_strips.set_recorded(found["changes"], until=time.time() if self._run and self._run.live else None)
        self.health_strips.set_steps(found["steps"])

    def set_window(self, seconds: float) -> None:
        """Show the newest `seconds` of every chart (and follow the newest data again)."""
        for chart in self.charts:
            chart.x_window = seconds

    def fit_window(self, seconds: float) -> None:
        """A window that fits what was sampled (see shared.fitted_window); a chart the person zoomed keeps its view."""
        fit_window(self.charts, seconds)

    def set_estimate(self, gpu_bytes_per_device: float | None) -> None:
        """The estimate of memory per GPU as a reference line on the memory chart; None removes it."""
        if gpu_bytes_per_device:
            self.gpu_mem_chart.add_reference(float(gpu_bytes_per_device), "estimate")
        else:
            self.gpu_mem_chart.remove_reference("estimate")

    def break_lines(self, at: float) -> None:
        break_lines(self.charts, at)

    def clear(self) -> None:
        """Every series and reference line gone, and the GPUs unknown until the next sample."""
        for chart in self.charts:
            chart.clear()
        self.health_strips.clear()
        self._refs.clear()
        self._state = self.reason = None

    def _append(self, gpu: GpuSnapshot) -> None:
        name, t = f"GPU {gpu.index}", gpu.t
        self.gpu_util_chart.append(name, t, gpu.utilization_percent)
        self.gpu_mem_chart.append(name, t, gpu.memory_used_bytes)
        self.gpu_power_chart.append(name, t, gpu.power_w)
        self.gpu_temp_chart.append(name, t, gpu.temperature_c)
        pcie_t = gpu.pcie_t if gpu.pcie_t is not None else t  # PCIe is read on its own thread, with its own time
        self.pcie_h2d_chart.append(name, pcie_t, gpu.pcie_h2d_bytes_per_s)
        self.pcie_d2h_chart.append(name, pcie_t, gpu.pcie_d2h_bytes_per_s)
        if gpu.health is not None:
            self.health_strips.add_reading(gpu.index, t, health_row(gpu.health, gpu.utilization_percent))

    def _references(self, gpus: tuple[GpuSnapshot, ...]) -> None:
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
                if self._refs.get(key) != value:
                    self._refs[key] = value
                    chart.add_reference(float(value), label)

    def _fill_table(self, gpus: tuple[GpuSnapshot, ...]) -> None:
        table = self.gpu_table
        if table.rowCount() != len(gpus):
            table.setRowCount(len(gpus))
            header = table.horizontalHeader().height()
            table.setFixedHeight(header + sum(table.rowHeight(r) for r in range(len(gpus))) + 6)
        for row, g in enumerate(gpus):
            if g.error is not None:  # a placeholder: this GPU could not be read at all
                set_row(table, row, [str(g.index), f"{g.name or '?'}: {g.error}"] + ["-"] * 9, right_from=2)
                continue
            memory = (f"{format_value(g.memory_used_bytes, 'B')} / {format_value(g.memory_total_bytes, 'B')}"
                      if g.memory_total_bytes else format_value(g.memory_used_bytes, "B"))
            power = (f"{format_value(g.power_w)} / {format_value(g.power_limit_w, 'W')}"
                     if g.power_limit_w else format_value(g.power_w, "W"))
            estimate = " (est.)" if g.pcie_source == "sampled" else ""  # a 20 ms window, not a byte count
            set_row(table, row, [
                str(g.index), g.name or "?", format_value(g.utilization_percent, "%"), memory, power,
                format_value(g.temperature_c, "°C"), format_value(g.sm_clock_mhz, "MHz"),
                format_value(g.pcie_h2d_bytes_per_s, "B/s") + estimate,
                format_value(g.pcie_d2h_bytes_per_s, "B/s") + estimate,
                "unknown" if g.processes_unknown is not None else str(len(g.processes)),
                "-" if g.health is None else g.health.text(g.utilization_percent),
            ], right_from=2)
            processes = table.item(row, 9)
            if processes is not None:
                processes.setToolTip(g.processes_unknown or process_lines(g))
            health = table.item(row, 10)
            if health is not None and g.health is not None:
                troubled = bool(g.health.problems(g.utilization_percent))
                health.setTextAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
                health.setForeground(QColor(tone("warning", table)) if troubled else table.palette().text())
                health.setToolTip(health_tooltip(g.health))


def health_tooltip(health: GpuHealth) -> str:
    """Every health reading of a GPU, for the Health cell's tooltip."""
    link = health.pcie
    ecc = health.ecc or {}
    rows = [
        "clock-event reasons: " + (", ".join(health.throttle) or "none") if health.throttle_known
        else "clock-event reasons: not readable",
        f"PCIe link: Gen{link['gen']} x{link['width']} of Gen{link['max_gen']} x{link['max_width']} (an idle link "
        "rests at a lower generation)" if link else "PCIe link: not readable",
        f"PCIe replays: {health.pcie_replays}" if health.pcie_replays is not None else "PCIe replays: not readable",
        "ECC: " + ("not supported" if not ecc else "enabled" if ecc.get("enabled") else "disabled")
        + (f", {ecc['volatile_corrected']} corrected / {ecc['volatile_uncorrected']} uncorrected since boot"
           if ecc.get("volatile_corrected") is not None else ""),
    ]
    rows += [f"XID {int(event['xid'])} at {time.strftime('%d %b %H:%M:%S', time.localtime(event['t']))}"
             + (" (kernel log)" if event.get("source") == "kernel" else "") for event in health.xid]
    return "\n".join(rows)
