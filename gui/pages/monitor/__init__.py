"""Monitor: nvidia-smi and htop in one page, tied to a run.

Live charts of every GPU (utilisation, memory, power, temperature, PCIe each way), the host (per-core bars and
total CPU, RAM, swap, disk and network I/O) and the chosen run's ranks (memory, CPU, GPU memory, pinned memory,
and a process table), plus the run's offload view from its recording. Samples come from the backend's
`LiveSampler` on its own thread through `SamplerBridge`; run-store reads go through `ctx.tasks`. The UI thread
only appends numbers to charts.

Sampling stops when the page has been hidden for a while (or on shutdown) and restarts when it is shown.

In parts: monitor_widgets.py builds the toolbar and tabs, monitor_samples.py shows samples, monitor_runs.py
picks and reads the run watched, monitor_nodes.py is the Nodes tab of a multi-node run; this module ties them to
the sampler and the page's life cycle.
"""

from __future__ import annotations

import time
from typing import Any

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QTabWidget, QVBoxLayout

from traindeck.backend.monitor import MAX_INTERVAL_S, MIN_INTERVAL_S, RunChoice
from traindeck.gui.context import AppContext
from traindeck.gui.pages.base import Page
from traindeck.gui.pages.monitor.layout import MonitorLayout
from traindeck.gui.pages.monitor.nodes_panel import MonitorNodes
from traindeck.gui.pages.monitor.run_panel import MonitorRuns
from traindeck.gui.pages.monitor.samples import MonitorSamples
from traindeck.gui.pages.monitor.shared import NO_RUN, WINDOWS
from traindeck.gui.widgets.offload_view import OffloadView
from traindeck.gui.widgets.sampler_bridge import SamplerBridge

HIDDEN_STOP_MS = 60_000  # hidden this long: stop sampling (restarts on show)
RUNS_REFRESH_MS = 10_000
OFFLOAD_REFRESH_MS = 5_000


class MonitorPage(MonitorRuns, MonitorSamples, MonitorLayout, Page):
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
        # A multi-node run's nodes side by side (issue 15); the tab is there only while the run watched has nodes.
        self.nodes_view = MonitorNodes(ctx.tasks, self.bridge.interval_s)
        self._nodes_tab = self.tabs.addTab(self.nodes_view, "&Nodes")
        self.tabs.setTabVisible(self._nodes_tab, False)
        self.nodes_view.has_nodes.connect(lambda on: self.tabs.setTabVisible(self._nodes_tab, on))
        self.tabs.currentChanged.connect(lambda _i: self._refresh_offload())
        self.tabs.currentChanged.connect(lambda _i: self.nodes_view.refresh())
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
        self.nodes_view.set_interval(value)

    def _apply_window(self, index: int) -> None:
        label, seconds = WINDOWS[max(0, index)]
        self.ctx.settings.setValue("monitor/window", label)
        live = self.gpu_charts + self.host_charts + (self.run_charts if self._run is None or self._run.live else ())
        for chart in live + (self.nodes_view.ram_chart, self.nodes_view.cpu_chart):
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
        self.nodes_view.resume()

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
        self.nodes_view.pause()

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
        self.nodes_view.pause()
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

    # ------------------------------------------------------------------------------------------------- demo
    def load_demo(self) -> None:
        """Recorded-looking data in every chart, including a GPU section built from NVML-shaped snapshots."""
        from traindeck.backend.monitor import demo_offload_view, demo_samples

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
