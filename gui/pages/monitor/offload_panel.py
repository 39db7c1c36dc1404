"""The Monitor's Offload tab: the watched run's offload view (host memory, PCIe, NVMe and step times) read from its
recording through `ctx.tasks`, while the tab is the one shown, every OFFLOAD_REFRESH_MS while the run runs."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QVBoxLayout, QWidget

from traindeck.backend.monitor import ResourceSample, RunChoice, run_offload
from traindeck.gui.context import AppContext
from traindeck.gui.pages.monitor.shared import read_failed_text
from traindeck.gui.widgets.offload_view import OffloadView

OFFLOAD_REFRESH_MS = 5_000


def read_offload(run_id: str) -> dict[str, Any]:
    """The run's offload view (`run_offload`) and, where its ranks timed no step, why ("step_phases_why": the Step
    tab's words, such as step timing turned off for the run)."""
    view = run_offload(run_id)
    if view.get("step_phases") is None:
        from traindeck.backend.runs import RunStore, run_step_anatomy

        with RunStore() as store:
            record = store.get_run(run_id)
            if record is not None:
                view["step_phases_why"] = "; ".join(run_step_anatomy(record, store).notes)
    return view


class OffloadPanel(QWidget):
    """Reads the run watched (`watch`) into its `view`; the page says when the tab is the current one."""

    def __init__(self, ctx: AppContext) -> None:
        super().__init__()
        self.ctx = ctx
        self._run: RunChoice | None = None
        self._demo = False  # demo data: nothing is read
        self._current = False  # the tab shown: only then is the recording read
        self._request = 0  # ignores a read for a run no longer watched
        self.view = OffloadView()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.view)
        self.timer = QTimer(self, interval=OFFLOAD_REFRESH_MS)
        self.timer.timeout.connect(self.refresh)

    def watch(self, choice: RunChoice | None, *, demo: bool = False) -> None:
        """Show `choice`'s offload view (None: an empty view); a running run's is read again every
        OFFLOAD_REFRESH_MS until `pause` or another run. With `demo`, nothing is read."""
        self._run, self._demo = choice, demo
        self._request += 1
        if choice is None:
            self.view.show_empty()
            self.timer.stop()
            return
        if not demo:
            if choice.live:
                self.timer.start()
            else:
                self.timer.stop()
            self.refresh()

    def set_current(self, current: bool) -> None:
        """The tab became the one shown (read the run now), or another did."""
        self._current = current
        self.refresh()

    def pause(self) -> None:
        """No more reads until the next `watch`."""
        self.timer.stop()

    def refresh(self) -> None:
        if self._demo or self._run is None or not self._current:
            return
        request = self._request
        self.ctx.tasks.run(read_offload, self._run.id, done=lambda v: self._loaded(request, v),
                           failed=self._read_failed)

    def set_estimate(self, cpu_bytes_per_node: float | None) -> None:
        self.view.set_estimate(cpu_bytes_per_node)

    def show_demo(self, samples: list[ResourceSample]) -> None:
        """The offload view of the demo's samples (built on the task pool)."""
        from traindeck.backend.monitor import demo_offload_view

        self.ctx.tasks.run(demo_offload_view, samples, done=self.view.set_view, failed=self._read_failed)

    def _read_failed(self, error: str) -> None:
        self.ctx.status.emit(read_failed_text(error))

    def _loaded(self, request: int, view: dict[str, Any]) -> None:
        if request == self._request and self._run is not None:
            if len(view["t"]):
                self.view.set_view(view)
            else:
                self.view.show_empty(f"Nothing recorded for {self._run.label} yet.")
