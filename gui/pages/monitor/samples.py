"""The Monitor page's sample display: each `ResourceSample` from the sampler appended to the charts (host, GPUs,
the chosen run's ranks) and written into the GPU and process tables. `MonitorSamples` is a part of `MonitorPage`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt

from traindeck.backend.monitor import GpuSnapshot, ResourceSample, RunSnapshot
from traindeck.gui.pages.monitor.layout import RUN_TOTAL_LINES, gpu_note
from traindeck.gui.pages.monitor.shared import set_row
from traindeck.gui.widgets.chart_axis import format_value

if TYPE_CHECKING:
    from traindeck.gui.pages.monitor.layout import MonitorLayout

    _Base = MonitorLayout
else:
    _Base = object


class MonitorSamples(_Base):
    """Shows samples (see MonitorPage)."""

    if TYPE_CHECKING:
        from PySide6.QtWidgets import QTabWidget

        from traindeck.backend.monitor import RunChoice

        _run: RunChoice | None
        _demo: bool
        _gpu_state: str | None
        _gpu_refs: dict[str, float]
        _tab_chosen: bool
        tabs: QTabWidget

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
        note = gpu_note(sample)
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
                set_row(table, row, [str(g.index), f"{g.name or '?'}: {g.error}"] + ["-"] * 8, right_from=2)
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
            for chart_name, name, _column, live in RUN_TOTAL_LINES:
                if chart_name != "rank_gpu_chart" or self._gpu_state == "gpus":
                    getattr(self, chart_name).append(name, t, getattr(run, live))
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
            set_row(self.process_table, row, cells, right_from=2)
            command = self.process_table.item(row, 9)
            if command is not None:  # _set_row has just filled the row
                command.setTextAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
