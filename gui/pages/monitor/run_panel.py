"""The Monitor page's run: the runs listed in the picker, the one followed (a run just launched, else the newest
running one unless the person picked another), its recorded history and its offload view, all read through
`ctx.tasks`. `MonitorRuns` is a part of `MonitorPage`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from traindeck.backend.monitor import RunChoice, run_choices, run_history, run_offload
from traindeck.gui.pages.monitor.layout import RUN_TOTAL_LINES
from traindeck.gui.pages.monitor.shared import NO_RUN, clear_series
from traindeck.gui.widgets.run_state import state_icon

if TYPE_CHECKING:
    from PySide6.QtCore import QTimer

    from traindeck.gui.pages.monitor.nodes_panel import MonitorNodes
    from traindeck.gui.pages.monitor.samples import MonitorSamples
    from traindeck.gui.widgets.offload_view import OffloadView
    from traindeck.gui.widgets.sampler_bridge import SamplerBridge

    _Base = MonitorSamples
else:
    _Base = object


class MonitorRuns(_Base):
    """Picks and reads the run watched (see MonitorPage)."""

    if TYPE_CHECKING:
        _pinned: bool
        _known_running: set[str]
        _follow_id: str | None
        _run_request: int
        _offload_timer: QTimer
        offload: OffloadView
        bridge: SamplerBridge
        nodes_view: MonitorNodes

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
        elif chosen is not None and self._run is not None and (chosen.state, chosen.live) != (self._run.state,
                                                                                            self._run.live):
            # It finished, or started, or its supervisor has just recorded the launcher's pid (a run picked in the
            # first second of its launch): switch between live and recorded
            self.choose_run(chosen)

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
            clear_series(chart)
        self.process_table.setRowCount(0)
        self.bridge.set_root_pid(choice.launcher_pid if choice is not None and choice.live else None)
        # Live while running, launcher pid or not: the nodes are read from the node watch's files, and a run
        # listed before its supervisor recorded the pid stayed "not live" (no refresh) until it ended.
        self.nodes_view.set_run(choice.id if choice is not None and not self._demo else None,
                                choice is not None and choice.state == "running")
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
        for chart_name, name, column, _live in RUN_TOTAL_LINES:
            chart = getattr(self, chart_name)
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
