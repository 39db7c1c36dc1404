"""Monitor: nvidia-smi and htop in one page, tied to a run.

Live charts of every GPU (utilisation, memory, power, temperature, PCIe each way), the host (per-core bars and
total CPU, RAM, swap, disk and network I/O) and the chosen run's ranks (memory, CPU, GPU memory, pinned memory,
and a process table), the whole machine's processes (htop's table, the run's rows highlighted), plus the run's
offload view from its recording. Samples come from the backend's `LiveSampler` on its own thread through
`SamplerBridge`; run-store reads go through `ctx.tasks`. The UI thread only appends numbers to charts.

Sampling starts when the page is first shown and goes on while it is hidden or the window minimised, at one sample
a second at most, so that the charts hold every second on return (nothing is drawn meanwhile, and tables wait for
the return). The machine's processes are snapshotted only while their tab is on screen. While less has been sampled
than the chosen window (a first open), the charts show what there is across their width instead of a sliver at the
right end. A run watched while sampling was stopped has seconds nobody sampled live: each return, and Refresh,
reads the watched run's recording again, and the Run tab fills those seconds from it.

The page assembles panels, each a widget that owns its state and is told what to show: the run picker
(run_picker.py) and the sampling settings (toolbar.py) above a summary line, and the tabs: GPUs (gpus_panel.py),
Host (host_panel.py), Run (run_panel.py), Offload (offload_panel.py), Processes (processes_panel.py) and the Nodes
of a multi-node run (nodes_panel.py). The page owns the sampler and its life cycle, hands each sample and the chosen run to the
panels and relays their signals. It opens on the tab the person chose last (TAB_KEY); never chosen, on GPUs, or
on Host once the first sample finds no GPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from PySide6.QtWidgets import QHBoxLayout, QTabWidget, QVBoxLayout

from traindeck.backend.monitor import MAX_INTERVAL_S, MIN_INTERVAL_S, ResourceSample, RunChoice
from traindeck.gui.context import AppContext
from traindeck.gui.pages.base import Page
from traindeck.gui.pages.monitor.gpus_panel import GpuPanel
from traindeck.gui.pages.monitor.host_panel import HostPanel
from traindeck.gui.pages.monitor.nodes_panel import MonitorNodes
from traindeck.gui.pages.monitor.offload_panel import OffloadPanel
from traindeck.gui.pages.monitor.processes_panel import ProcessesPanel
from traindeck.gui.pages.monitor.run_panel import RunPanel
from traindeck.gui.pages.monitor.run_picker import RunPicker
from traindeck.gui.pages.monitor.shared import fitted_window
from traindeck.gui.pages.monitor.toolbar import MonitorToolbar, SampleSummary
from traindeck.gui.widgets.sampler_bridge import SamplerBridge

TAB_KEY = "monitor/tab"  # the tab the person last chose (by TAB_NAMES): the page opens on it
TAB_NAMES = ("gpus", "host", "run", "offload", "processes", "nodes")  # the tabs, in order
FIT_FLOOR_SAMPLES = 10  # a first open's window fits what was sampled, but spans this many samples at least


class MonitorPage(Page):
    key = "monitor"
    title = "Monitor"
    order = 40

    def __init__(self, ctx: AppContext):
        super().__init__(ctx)
        self._demo = False
        self._sampled_since: float | None = None  # the first live sample's time: the window fits what came since
        self._stopped_at: float | None = None  # sampling was stopped then (lines break there when it restarts)
        self._tab_chosen = False  # the person picked a tab: no more switching to Host on a machine without GPUs
        self._switching = False  # the page changes the tab itself (not the person's choice: not remembered)

        self.bridge = SamplerBridge(self)
        self.bridge.interval_s = self._saved_interval()
        self.bridge.sampled.connect(self._live_sample)

        self.picker = RunPicker(ctx)
        self.toolbar = MonitorToolbar(self.bridge.interval_s, str(ctx.settings.value("monitor/window", "10 min")))
        self.summary = SampleSummary()
        self.gpu_panel = GpuPanel(ctx)
        self.host_panel = HostPanel()
        self.run_panel = RunPanel(ctx)
        self.offload = OffloadPanel(ctx)
        self.processes = ProcessesPanel(ctx)
        # A multi-node run's nodes side by side (issue 15); the tab is there only while the run watched has nodes.
        self.nodes_view = MonitorNodes(ctx.tasks, self.bridge.interval_s)
        self.tabs = QTabWidget()
        self.tabs.addTab(self.gpu_panel, "&GPUs")
        self.tabs.addTab(self.host_panel, "Ho&st")
        self.tabs.addTab(self.run_panel, "&Run")
        self.tabs.addTab(self.offload, "&Offload")
        self.tabs.addTab(self.processes, "&Processes")
        self._nodes_tab = self.tabs.addTab(self.nodes_view, "&Nodes")
        self.tabs.setTabVisible(self._nodes_tab, False)

        self.picker.chosen.connect(self._watch)
        self.picker.reread.connect(self._reread)
        self.picker.listed.connect(self._runs_listed)
        self.toolbar.interval_changed.connect(self._interval_changed)
        self.toolbar.window_changed.connect(self._apply_window)
        self.run_panel.recorded.connect(self.host_panel.fill_from_recording)  # the host since the run started
        self.gpu_panel.missing_at_start.connect(self._no_gpu_at_start)
        self.gpu_panel.state_changed.connect(
            lambda present: self.run_panel.set_gpus_present(present, self.gpu_panel.reason))
        self.nodes_view.has_nodes.connect(
            lambda on: self._switch(lambda: self.tabs.setTabVisible(self._nodes_tab, on)))
        self._open_remembered_tab()
        self.offload.set_current(self.tabs.currentWidget() is self.offload)  # opened on it: read when a run is chosen
        self.tabs.currentChanged.connect(self._tab_changed)
        self.tabs.tabBarClicked.connect(self._tab_chosen_by_person)
        ctx.run_started.connect(self.picker.run_started)

        top = QHBoxLayout()
        top.addWidget(self.picker)
        top.addSpacing(16)
        top.addWidget(self.toolbar, 1)  # its stretch keeps the demo tag at the right end
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 8, 8)
        layout.addLayout(top)
        layout.addWidget(self.summary)
        layout.addWidget(self.tabs, 1)

        self._apply_window(self.toolbar.window_s)

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

    def _apply_window(self, seconds: float) -> None:
        self.ctx.settings.setValue("monitor/window", self.toolbar.window_label)
        for panel in (self.gpu_panel, self.host_panel, self.run_panel, self.nodes_view):
            panel.set_window(seconds)
        if self._sampled_since is not None:
            self._fit_windows(time.time())

    def _fit_windows(self, now: float) -> None:
        """While less was sampled than the chosen window, each chart's window is what was sampled (a first open
        fills the charts rather than drawing a sliver at the right end of ten empty minutes)."""
        if self._sampled_since is None or self._demo:
            return
        chosen, floor = self.toolbar.window_s, FIT_FLOOR_SAMPLES * self.bridge.interval_s
        if now - self._sampled_since < chosen:
            self.gpu_panel.fit_window(fitted_window(chosen, now - self._sampled_since, floor))
        watched = self.picker.watched
        since = self._sampled_since
        if watched is not None and watched.live:  # the run's and host charts start at the run's start (its recording)
            since = min(watched.started_at or self._sampled_since, self._sampled_since)
            if now - since < chosen:
                self.run_panel.fit_window(fitted_window(chosen, now - since, floor))
        if now - since < chosen:
            self.host_panel.fit_window(fitted_window(chosen, now - since, floor))

    # ------------------------------------------------------------------------------------------ what is shown
    def _live_sample(self, sample: ResourceSample) -> None:
        if self._sampled_since is None:
            self._sampled_since = sample.t
        self._on_sample(sample, tables=self.on_screen())
        self._fit_windows(sample.t)

    def _on_sample(self, sample: ResourceSample, *, tables: bool = True) -> None:
        tables = tables and not self.window().isMinimized()  # charts keep their points; tables wait for a restore
        self.host_panel.show_sample(sample)
        self.summary.show_sample(sample)
        self.gpu_panel.show_sample(sample, tables)
        if sample.run is not None:
            self.run_panel.show_sample(sample.run, tables)
        if sample.machine is not None and tables:
            self.processes.show_snapshot(sample.machine)

    def _runs_listed(self, choices: list[RunChoice]) -> None:
        """The Processes tab names runs as the picker does: the name and the id's end (the id alone if unnamed)."""
        labels = {}
        for choice in choices:
            name = choice.label.split(" · ")[0]
            labels[choice.id] = name if name == choice.id else f"{name} · {choice.id[-4:]}"
        self.processes.set_run_labels(labels)

    def _open_remembered_tab(self) -> None:
        """The tab the person chose last time (GPUs otherwise, or Host once no GPU is found)."""
        remembered = str(self.ctx.settings.value(TAB_KEY, ""))
        if remembered in TAB_NAMES and self.tabs.isTabVisible(TAB_NAMES.index(remembered)):
            self._switch(lambda: self.tabs.setCurrentIndex(TAB_NAMES.index(remembered)))
            self._tab_chosen = True

    def _switch(self, change: Callable[[], object]) -> None:
        """A tab change of the page's own (a hidden tab, no GPU found): not taken as the person's choice."""
        self._switching = True
        try:
            change()
        finally:
            self._switching = False

    def _tab_chosen_by_person(self, index: int) -> None:
        if 0 <= index < len(TAB_NAMES):
            self._tab_chosen = True
            self.ctx.settings.setValue(TAB_KEY, TAB_NAMES[index])

    def _tab_changed(self, index: int) -> None:
        if not self._switching:  # a click, a mnemonic (Alt+S for Host), Ctrl+Tab: the person's choice, remembered
            self._tab_chosen_by_person(index)
        self.offload.set_current(self.tabs.currentWidget() is self.offload)
        self.nodes_view.refresh()
        self._want_processes()

    def _want_processes(self) -> None:
        """The machine's processes are snapshotted only while their table is on screen."""
        self.bridge.set_machine_processes(self.tabs.currentWidget() is self.processes and self.on_screen())

    def _no_gpu_at_start(self) -> None:
        if not self._tab_chosen and self.tabs.currentIndex() == 0:
            # No GPU: open on what there is to see (the GPU tab says why).
            self._switch(lambda: self.tabs.setCurrentIndex(TAB_NAMES.index("host")))

    def _watch(self, choice: RunChoice | None) -> None:
        """The picker's choice (None: host and GPUs only), handed to the sampler and to each panel that shows the run:
        a running run is sampled live, a finished one read back."""
        self.bridge.set_root_pid(choice.launcher_pid if choice is not None and choice.live else None)
        # Live while running, launcher pid or not: the nodes are read from the node watch's files, and a run is
        # listed before its supervisor records the pid.
        self.nodes_view.set_run(choice.id if choice is not None and not self._demo else None,
                                choice is not None and choice.state == "running")
        self.run_panel.watch(choice, demo=self._demo)
        self.gpu_panel.watch(choice, demo=self._demo)
        self.processes.watch(choice.id if choice is not None else None)
        self._apply_window(self.toolbar.window_s)
        self.offload.watch(choice, demo=self._demo)

    def _reread(self) -> None:
        """Refresh: the watched run's recording read again (the Run tab's totals, the Offload tab when shown)."""
        self.run_panel.reload()
        self.offload.refresh()

    # ------------------------------------------------------------------------------------------- lifecycle
    def start_sampling(self) -> None:
        if self._demo:
            return
        if self._stopped_at is not None and not self.bridge.running:
            self.break_lines(self._stopped_at)
            self._stopped_at = None
        self.bridge.start()

    def stop_sampling(self) -> None:
        if self.bridge.running:
            self._stopped_at = time.time()
        self.bridge.stop()

    def page_shown(self) -> None:
        self.start_sampling()
        self.picker.resume()
        watched = self.picker.watched
        if watched is not None and watched.live and not self._demo:
            self.run_panel.reload()  # what the run recorded while nobody sampled it (see the module's docstring)
            self.gpu_panel.watch(watched)  # its health and steps read again, and again while it runs
        self.offload.refresh()
        self.nodes_view.resume()

    def hideEvent(self, event: Any) -> None:  # noqa: N802
        super().hideEvent(event)
        self._off_screen()

    def showEvent(self, event: Any) -> None:  # noqa: N802
        super().showEvent(event)
        self._back_on_screen()

    def window_minimised(self, minimised: bool) -> None:
        # A minimised window is as good as a hidden page: the same pause (sampling goes on at 1 Hz at most).
        if minimised:
            self._off_screen()
        else:
            self._back_on_screen()
            self.page_shown()

    def _off_screen(self) -> None:
        # Sampling goes on (slower, nothing drawn): the charts hold every second when the page is back.
        self.bridge.set_background(True)
        self.bridge.set_machine_processes(False)
        self.picker.pause()
        self.offload.pause()
        self.gpu_panel.pause()
        self.nodes_view.pause()

    def _back_on_screen(self) -> None:
        self.bridge.set_background(False)
        self._want_processes()

    def break_lines(self, t: float | None = None) -> None:
        """End every live line here: sampling was stopped, and a line drawn straight across the time without
        samples would claim values nobody measured (the charts draw NaN as a gap)."""
        at = time.time() if t is None else t
        for panel in (self.gpu_panel, self.host_panel, self.run_panel):
            panel.break_lines(at)

    def shutdown(self) -> None:
        self.picker.pause()
        self.offload.pause()
        self.gpu_panel.pause()
        self.nodes_view.pause()
        self.bridge.stop(wait_s=2.0)  # let the loop release NVML before the process exits

    # -------------------------------------------------------------------------------------------- estimate
    def set_estimate(self, gpu_bytes_per_device: float | None, cpu_bytes_per_node: float | None) -> None:
        """Draw the memory estimate (per GPU, and host memory per node) as reference lines; None removes one."""
        self.gpu_panel.set_estimate(gpu_bytes_per_device)
        self.run_panel.set_estimate(gpu_bytes_per_device, cpu_bytes_per_node)
        self.host_panel.set_estimate(cpu_bytes_per_node)
        self.offload.set_estimate(cpu_bytes_per_node)

    # ------------------------------------------------------------------------------------------------- demo
    def load_demo(self) -> None:
        """Recorded-looking data in every chart, including a GPU section built from NVML-shaped snapshots."""
        from traindeck.backend.monitor import demo_machine, demo_samples

        self._demo = True
        self.stop_sampling()
        self.picker.pause()
        self.offload.pause()
        self.toolbar.show_demo_tag()
        samples = demo_samples()
        for panel in (self.gpu_panel, self.host_panel, self.run_panel):
            panel.clear()
        demo_run = RunChoice("demo", "train.py: ZeRO-2, optimizer offload to CPU + NVMe", "running", None,
                             samples[0].t)
        self.picker.show_demo(demo_run)
        self.run_panel.set_title(f"<b>{demo_run.label}</b> — demo data")
        for index, sample in enumerate(samples):
            self._on_sample(sample, tables=index == len(samples) - 1)
        self.processes.set_run_labels({demo_run.id: "train.py · demo"})
        self.processes.show_snapshot(demo_machine(samples[-1], demo_run.id))
        self.set_estimate(21.5 * 1024**3, 44 * 1024**3)
        self.offload.show_demo(samples)


PAGE = MonitorPage
