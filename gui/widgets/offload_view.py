"""`OffloadView`: the ZeRO-Offload story of one run, charts stacked on one shared time axis with the training
steps marked on top, next to the per-step figures (seconds per step, bytes moved per step).

Host RAM (the ranks' RSS against what is still available), PCIe both ways, NVMe (or all-disk) I/O and GPU
utilisation line up, so a reader sees the GPUs idle while the CPU runs Adam, gradients leave over PCIe, and host
memory approach the point where the kernel kills the run. Fed with backend `offload_view` dicts.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QSplitter,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.monitor import summarize_steps
from traindeck.gui.theme import set_muted
from traindeck.gui.widgets.chart_axis import format_value, whole_seconds
from traindeck.gui.widgets.charts import TimeSeriesChart
from traindeck.gui.widgets.phase_colours import phase_colours

TABLE_ROWS = 300  # the newest steps; older ones are in the run's log
STACK_ORDER = ("forward", "backward", "communication", "optimizer", "swap", "other")  # bottom to top
BAND_ALPHA = 150  # the phases' bands: their colours told apart, the grid still seen through them


class StepAxisItem(pg.AxisItem):
    """A top axis over a time axis that labels the times at which training steps ended with their numbers."""

    def __init__(self) -> None:
        super().__init__("top")
        self.enableAutoSIPrefix(False)
        self._t = np.empty(0)
        self._steps = np.empty(0)

    def set_steps(self, step_times: list[tuple[float, int]]) -> None:
        self._t = np.array([t for t, _ in step_times], dtype=float)
        self._steps = np.array([s for _, s in step_times], dtype=float)
        self.picture = None
        self.update()

    def tickValues(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, list[float]]]:  # noqa: N802
        if len(self._t) == 0:
            return []
        inside = (self._t >= minVal) & (self._t <= maxVal)
        if not inside.any():
            return []
        steps = self._steps[inside]
        wanted = max(2, int(size / 70))  # one label per ~70 px
        span = max(1.0, steps[-1] - steps[0])
        stride = _nice_int(span / wanted)
        chosen = self._t[inside][steps % stride == 0]
        return [(float(stride), spaced(chosen, minVal, maxVal, size))]

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:  # noqa: N802
        if len(self._t) == 0:
            return ["" for _ in values]
        return [f"{int(round(float(np.interp(v, self._t, self._steps))))}" for v in values]


MIN_LABEL_GAP_PX = 56  # room for a 5-digit step number and a space either side


def spaced(times: np.ndarray, low: float, high: float, size: float, gap_px: float = MIN_LABEL_GAP_PX) -> list[float]:
    """The times to label, dropping any that would be drawn closer than gap_px to the previous label. Steps are
    not evenly spaced in time (start-up, a slow first step, a pause), so a stride alone let labels run into
    each other ("246800" for 2, 4, 6, 8, 0)."""
    if high <= low or size <= 0:
        return []
    per_px = (high - low) / size
    out: list[float] = []
    for t in times:
        if not out or (float(t) - out[-1]) / per_px >= gap_px:
            out.append(float(t))
    return out


def _nice_int(raw: float) -> int:
    if raw <= 1:
        return 1
    exponent = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if factor * exponent >= raw:
            return int(factor * exponent)
    return int(10 * exponent)


def phases_title(phases: dict[str, Any]) -> str:
    """The phases chart's title, saying whose steps it draws: "rank 1, the slowest" only where that rank is the
    straggler (the one the Runs page's Step tab marks, which the others wait for); "rank 0" and "ranks evenly
    matched" where no rank holds the others up; plain "rank 0" in a one-rank run."""
    rank = phases["rank"]
    if phases.get("straggler") is not None and phases["straggler"] == rank:
        return f"Step phases of rank {rank}, the slowest (stacked, ms per step)"
    even = "ranks evenly matched; " if (phases.get("ranks") or 0) > 1 else ""
    return f"Step phases of rank {rank} ({even}stacked, ms per step)"


class OffloadView(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.host = TimeSeriesChart("Host RAM: the ranks against what is left", "B")
        self.pcie = TimeSeriesChart("PCIe (all GPUs)", "B/s")
        self.nvme = TimeSeriesChart("NVMe I/O (offload folder)", "B/s")
        self.gpu = TimeSeriesChart("GPU utilisation (mean)", "%")
        self.phases = TimeSeriesChart("Step phases (stacked, per step)", "ms")
        self.phases.setToolTip("Each training step of one rank (the slowest, where one holds the others up), timed "
                               "inside the rank: forward, backward, communication, optimizer, NVMe swap and the "
                               "rest, stacked (traindeck steps ID)")
        self.charts = (self.host, self.pcie, self.nvme, self.gpu, self.phases)
        for chart in self.charts[1:]:
            chart.link_x(self.host)
        for chart in self.charts:
            chart.set_axis_width(76)  # equal axes: the plot areas line up in time
            whole_seconds(chart.plot_item.getAxis("bottom"))  # as the Monitor's other charts: 12:04:05
        self.step_axis = StepAxisItem()
        self.step_axis.setLabel("training step")
        self.host.plot_item.setAxisItems({"top": self.step_axis})
        self.host.plot_item.showAxis("top")
        self._label_lowest_time_axis()
        self.host.plot_widget.setMinimumHeight(150)

        charts = QWidget()
        column = QVBoxLayout(charts)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(2)
        for chart in self.charts:
            column.addWidget(chart, 1)
        # What is not drawn, and why (no GPU recorded, no step timed), in place of charts that would say only
        # "waiting for data" for a run that will never have any.
        self.note = QLabel()
        self.note.setObjectName("offloadNote")
        self.note.setWordWrap(True)
        self.note.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        set_muted(self.note)
        self.note.hide()
        column.addWidget(self.note)

        self.summary = QLabel()
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.table = QTableWidget(0, 8)
        self.table.setHorizontalHeaderLabels(["Step", "s/step", "PCIe in", "PCIe out", "NVMe read", "NVMe write",
                                              "Ranks' RSS", "GPU util"])
        tips = ["The step the row ends at", "Seconds per step", "Bytes per step host -> GPU (all GPUs)",
                "Bytes per step GPU -> host (all GPUs)", "Bytes per step read from the NVMe offload disk",
                "Bytes per step written to the NVMe offload disk", "The ranks' peak host memory (RSS) in the step",
                "Mean GPU utilisation in the step"]
        for index, tip in enumerate(tips):
            header = self.table.horizontalHeaderItem(index)
            if header is not None:  # set by setHorizontalHeaderLabels above
                header.setToolTip(tip)
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)  # no blank strip when GPU columns are hidden
        self.table.setAlternatingRowColors(True)
        self.table.setWordWrap(False)
        self.table.verticalHeader().setDefaultSectionSize(self.table.fontMetrics().height() + 6)
        side = QWidget()
        side_layout = QVBoxLayout(side)
        side_layout.setContentsMargins(4, 0, 0, 0)
        side_layout.addWidget(QLabel("<b>Per step</b>"))
        side_layout.addWidget(self.summary)
        side_layout.addWidget(self.table, 1)

        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(charts)
        splitter.addWidget(side)
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 2)
        splitter.setChildrenCollapsible(False)
        splitter.setSizes([600, 480])

        self.empty = QLabel("Choose a run above to see how its host memory, PCIe and NVMe traffic line up with its "
                            "training steps. The run's supervisor records them once a second.")
        self.empty.setWordWrap(True)
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.stack = QStackedWidget()
        self.stack.addWidget(self.empty)
        self.stack.addWidget(splitter)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.stack)
        self._estimate_cpu: float | None = None
        self._bands: dict[str, pg.FillBetweenItem] = {}  # each phase's band above the phase below it
        self._phases: dict[str, Any] | None = None  # the phases drawn (drawn again in the theme's colours)
        self._phase_theme: dict[str, str] | None = None  # the colours they were drawn in

    # ------------------------------------------------------------------------------------------------ data
    def show_empty(self, text: str | None = None) -> None:
        if text:
            self.empty.setText(text)
        self.stack.setCurrentIndex(0)

    def set_estimate(self, cpu_bytes_per_node: float | None) -> None:
        self._estimate_cpu = cpu_bytes_per_node
        if cpu_bytes_per_node:
            self.host.add_reference(cpu_bytes_per_node, "estimate")
        else:
            self.host.remove_reference("estimate")

    def set_view(self, view: dict[str, Any]) -> None:
        """Show an `offload_view` dict (with "step_times" added by `run_offload`)."""
        self.stack.setCurrentIndex(1)
        t = view.get("t", np.empty(0))
        nvme = bool(view.get("nvme_devices"))
        self.host.set_series("ranks' RSS", t, view["ranks_host_bytes"], fill=True)
        self.host.set_series("available", t, view["host_available_bytes"])
        self.host.set_series("used (all)", t, view["host_used_bytes"])
        if view.get("ram_total_bytes"):
            self.host.add_reference(view["ram_total_bytes"], "RAM")
        self.pcie.set_series("host -> GPU", t, view["pcie_h2d_bps"])
        self.pcie.set_series("GPU -> host", t, view["pcie_d2h_bps"])
        devices = ", ".join(f"{device} ({path})" for path, device in view.get("nvme_devices") or ())
        self.nvme.set_title(f"NVMe I/O: {devices}" if nvme else "Disk I/O (all disks)")
        self.nvme.setToolTip("" if nvme else "The run has no NVMe offload folder to watch, so all disks are shown")
        self.nvme.set_series("read", t, view["nvme_read_bps"] if nvme else view["disk_read_bps"])
        self.nvme.set_series("write", t, view["nvme_write_bps"] if nvme else view["disk_write_bps"])
        gpu_util = np.asarray(view["gpu_util_pct"], dtype=float)
        no_gpu = bool(view.get("gpu_error")) or not np.isfinite(gpu_util).any()
        if no_gpu:
            # Nothing to draw: no empty series (its legend mark stood alone beside the title), and the reason,
            # which can be a long NVML sentence, in the tooltip rather than a title cut at the chart's edge.
            reason = str(view.get("gpu_error") or "no GPU samples in this recording")
            for chart, title, names in ((self.gpu, "GPU utilisation: none recorded", ("GPU util",)),
                                        (self.pcie, "PCIe: none recorded", ("host -> GPU", "GPU -> host"))):
                for name in names:
                    chart.remove_series(name)
                chart.set_title(title)
                chart.setToolTip(reason)
                chart.hide()  # said in the note below the charts: their room goes to those with data
        else:
            self.gpu.show()
            self.pcie.show()
            self.gpu.set_series("GPU util", t, gpu_util, fill=True)
            self.gpu.set_title("GPU utilisation (mean over GPUs)")
            self.pcie.set_title("PCIe (all GPUs)")
            for chart in (self.gpu, self.pcie):
                chart.setToolTip("")
        # Columns of GPU figures say nothing on a machine without one: hidden, not a column of dashes.
        for column in (2, 3, 7):
            self.table.setColumnHidden(column, no_gpu)
        self.step_axis.set_steps(view.get("step_times") or [])
        self._show_phases(view.get("step_phases"))
        notes = []
        if no_gpu:
            notes.append(f"No GPU recorded, so no PCIe or GPU utilisation chart: {reason}.")
        if self.phases.isHidden():
            why = str(view.get("step_phases_why") or "no step timed (traindeck steps ID says why)")
            notes.append(f"No step phases to draw: {why}.")
        self._label_lowest_time_axis()
        self.note.setText("\n".join(notes))
        self.note.setVisible(bool(notes))
        self._fill_table(view.get("steps") or [], nvme)

    def _label_lowest_time_axis(self) -> None:
        """One time axis, at the bottom: under the lowest chart shown (the phases' or, with no step timed, the one
        above it); the charts above it show no numbers."""
        shown = [chart for chart in self.charts if not chart.isHidden()]
        for chart in self.charts:
            chart.plot_item.getAxis("bottom").setStyle(showValues=bool(shown) and chart is shown[-1])

    def _show_phases(self, phases: dict[str, Any] | None) -> None:
        """The slowest rank's phases per step (named as `phases_title` says), stacked: each line is the sum of its
        phase and those below it, and the band between a line and the one below is filled in its phase's colour. A
        phase that took no time in any step (swap without NVMe) is left out, so its line never hides the one it
        would lie on."""
        colours = phase_colours(self)
        if self._phase_theme is not None and colours != self._phase_theme:
            # The theme changed: a chart's series keeps the colour it was made with, so they are made again.
            for name in STACK_ORDER:
                self.phases.remove_series(name)
        self._phases, self._phase_theme = phases, colours
        drawn = [name for name in STACK_ORDER
                 if phases and len(phases["t"]) and np.any(np.asarray(phases[name], dtype=float) > 0)]
        for name in STACK_ORDER:
            if name not in drawn:
                self.phases.remove_series(name)
                band = self._bands.pop(name, None)
                if band is not None:
                    self.phases.plot_item.removeItem(band)
        if not phases or not drawn:
            self.phases.set_title("Step phases: none timed")
            self.phases.hide()  # the note below the charts says why
            return
        self.phases.show()
        idle = [name for name in STACK_ORDER if name not in drawn]
        self.phases.set_title(phases_title(phases) + (f"; no time in {', '.join(idle)}" if idle else ""))
        top = np.zeros(len(phases["t"]))
        below: pg.PlotDataItem | None = None
        for name in drawn:
            own = np.asarray(phases[name], dtype=float)
            top = top + own
            self.phases.set_series(name, phases["t"], top.copy(), colour=colours[name])
            self.phases.set_legend_value(name, float(own[-1]) if own.size else None)  # its own ms, not the sum
            curve = self.phase_curve(name)
            if curve is None:
                continue
            brush = QColor(colours[name])
            brush.setAlpha(BAND_ALPHA)
            band = self._bands.get(name)
            if below is None:  # the bottom phase: filled down to zero
                curve.setFillLevel(0)
                curve.setBrush(pg.mkBrush(brush))
                if band is not None:
                    self.phases.plot_item.removeItem(self._bands.pop(name))
            else:
                curve.setFillLevel(None)
                if band is None:
                    band = pg.FillBetweenItem(below, curve)
                    self.phases.plot_item.addItem(band, ignoreBounds=True)
                    self._bands[name] = band
                else:
                    band.setCurves(below, curve)
                band.setBrush(pg.mkBrush(brush))
            below = curve

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802
        super().changeEvent(event)
        if (event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange)
                and self._phases is not None):
            self._show_phases(self._phases)

    def phase_curve(self, name: str) -> pg.PlotDataItem | None:
        """The curve drawing phase `name`'s top line in the phases chart (None: not drawn)."""
        return next((item for item in self.phases.plot_item.listDataItems()
                     if isinstance(item, pg.PlotDataItem) and item.name() == name), None)

    def _fill_table(self, figures: list[dict[str, Any]], nvme: bool) -> None:
        prefix = "nvme" if nvme else "disk"
        for column, what in ((4, "read"), (5, "write")):
            header = self.table.horizontalHeaderItem(column)
            if header is not None:
                header.setText(f"{'NVMe' if nvme else 'Disk'} {what}")
        rows = list(reversed(figures[-TABLE_ROWS:]))
        self.table.setRowCount(len(rows))
        for row, entry in enumerate(rows):
            cells = [
                str(entry["step"]),
                f"{entry['seconds_per_step']:.2f}",
                format_value(entry.get("pcie_h2d_bytes_per_step"), "B"),
                format_value(entry.get("pcie_d2h_bytes_per_step"), "B"),
                format_value(entry.get(f"{prefix}_read_bytes_per_step"), "B"),
                format_value(entry.get(f"{prefix}_write_bytes_per_step"), "B"),
                format_value(entry.get("peak_ranks_host_bytes"), "B"),
                format_value(entry.get("mean_gpu_util_pct"), "%"),
            ]
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(row, column, item)
        if not figures:
            self.summary.setText("No steps yet: per-step figures appear once the ranks time a step or the run logs "
                                 "step numbers (loss lines with a step, a progress bar).")
            return
        s = summarize_steps(figures)
        moved = (f"PCIe {format_value(s['pcie_h2d_bytes_per_step'], 'B')} in, "
                 f"{format_value(s['pcie_d2h_bytes_per_step'], 'B')} out")
        disk = (f"{'NVMe' if nvme else 'disk'} {format_value(s[f'{prefix}_read_bytes_per_step'], 'B')} read, "
                f"{format_value(s[f'{prefix}_write_bytes_per_step'], 'B')} written")
        gpu = self.table.isColumnHidden(2)  # hidden: no GPU recorded, so no PCIe or utilisation to report
        self.summary.setText(f"Median of the last {int(s['steps'] or 0)} steps: "
                             f"<b>{format_value(s['seconds_per_step'])} s/step</b>; per step "
                             + (f"{disk}." if gpu else f"{moved}; {disk}; GPUs busy "
                                f"{format_value(s['mean_gpu_util_pct'], '%')} of the time."))
