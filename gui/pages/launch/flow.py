"""The Launch page's launch itself: why the run cannot start (or be queued) now, the Launch and Queue buttons and the
line beside them, the memory question before a run that does not fit, and starting or queueing the run on ctx.tasks
through the same backend calls as `traindeck run` (launch_unattended.launch_on_gpus / queue_sweep).

A part of LaunchPage (launch_page.py inherits LaunchFlow), split out along the seam between gathering the choices
(the page) and acting on them (here); the attributes it reads are the page's, declared below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QLabel, QMessageBox, QPushButton, QWidget

from traindeck.gui.pages.launch.unattended import launch_on_gpus, queue_sweep
from traindeck.gui.widgets.message_list import rich_line

if TYPE_CHECKING:
    from traindeck.backend.estimate import LaunchMemoryCheck
    from traindeck.backend.launch import LaunchPlan, LaunchRequest, TrainingEnvironment
    from traindeck.backend.runs import LaunchOutcome, RunRecord
    from traindeck.gui.context import AppContext
    from traindeck.gui.widgets.gpu_picker import GpuPicker
    from traindeck.gui.widgets.hostfile_editor import HostfileEditor
    from traindeck.gui.widgets.path_field import PathField
    from traindeck.gui.widgets.sweep_editor import SweepEditor


class LaunchFlow:
    # The page's state and widgets this part reads (LaunchPage sets them up).
    ctx: AppContext
    plan: LaunchPlan | None
    launching: bool
    _said: tuple[str, str] | None
    _blocked_line: str
    _said_was_blocked: bool
    _queue_it: bool
    _field_problems: list[str]
    _preview_timer: QTimer
    result: QLabel
    launch_button: QPushButton
    queue_button: QPushButton
    model_size: PathField
    sweep: SweepEditor
    hosts: HostfileEditor
    gpu_picker: GpuPicker

    if TYPE_CHECKING:
        @property
        def memory(self) -> LaunchMemoryCheck | None: ...
        def request(self) -> LaunchRequest: ...
        def run_name(self) -> str: ...
        def _environment(self) -> TrainingEnvironment | None: ...
        def isVisible(self) -> bool: ...  # noqa: N802 (QWidget's)

    def _update_launch_button(self) -> None:
        blocked = self.why_not_launchable()
        self.launch_button.setEnabled(not blocked)
        count = len(self.sweep.points)
        self.launch_button.setText("Starting…" if self.launching else f"Queue {count} runs" if count > 1
                                   else "Queue 1 run" if count else "Launch")
        self.launch_button.setToolTip("Start the run (Ctrl+Enter); it keeps running when the window closes"
                                      if not blocked else "Cannot launch yet: " + "; ".join(blocked))
        self.queue_button.setVisible(not self.sweep.active)
        queue_blocked = self.why_not_launchable(queue=True)
        self.queue_button.setEnabled(not queue_blocked)
        self.queue_button.setToolTip("Put this run in the queue (Ctrl+Shift+Enter): it starts when the runs before "
                                     "it are done and its GPUs are free, whether or not this window is open"
                                     if not queue_blocked else "Cannot queue it: " + "; ".join(queue_blocked))
        # Beside a disabled button, say why it is disabled (a "Run ... started" line alone read as if the button
        # were broken); the last launch's line stays above it.
        self._blocked_line = "" if self.launching or not blocked else "To launch: " + "; ".join(blocked)
        if not blocked and self._said_was_blocked:
            self._said = None  # "Not launched: <reasons>" once the reasons are gone would read as still true
        self._show_result()

    def _show_result(self) -> None:
        lines = [rich_line(*self._said, cast(QWidget, self))] if self._said else []
        same = (self._said is not None and self._said_was_blocked
                and self._said[1].removeprefix("Not launched: ") == self._blocked_line.removeprefix("To launch: "))
        if self._blocked_line and not same:  # the reasons of a refused try, said once
            lines.append(rich_line("warning", self._blocked_line, cast(QWidget, self)))
        self.result.setText("<br>".join(lines))
        self.result.setToolTip("\n".join(t for t in ((self._said or ("", ""))[1], self._blocked_line) if t))

    def _shortcut_launch(self) -> None:
        if self.isVisible():
            self.launch()

    def why_not_launchable(self, queue: bool = False) -> list[str]:
        """Why the run cannot start now (or, with `queue`, be queued); [] when it can."""
        queue = queue or self.sweep.active
        reasons: list[str] = []
        if self.launching:
            reasons.append("a launch is starting")
        if self.ctx.draft.errors():
            reasons.append("the preset has errors (see the Configure page)")
        reasons += self._field_problems
        draft = self.ctx.draft
        if queue and draft.preset is not None and (draft.dirty or not draft.saved_as):
            reasons.append("save the preset first: queued runs read it by name when they start")
        if queue and not self.sweep.active and self.hosts.active:
            reasons.append("Several machines: queued runs start on this machine only; launch it now instead")
        if self.plan is not None:
            reasons += self.plan.errors
        return reasons

    # ============================================================================================ launch
    def launch(self, queue: bool = False) -> None:
        """Launch with the current choices (Ctrl+Enter), or put them in the queue (Ctrl+Shift+Enter); asks first
        when the memory check says it does not fit."""
        self._queue_it = queue or self.sweep.active
        blocked = self.why_not_launchable(queue=queue)
        if blocked:
            self._say("error", "Not launched: " + "; ".join(blocked), blocked=True)  # cleared with its reasons
            return
        if self.memory is not None and self.memory.does_not_fit:
            self._confirm_memory()
            return
        self._start()

    def _confirm_memory(self) -> None:
        box = QMessageBox(cast(QWidget, self))
        box.setObjectName("memoryConfirm")
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.setIcon(QMessageBox.Icon.Warning)
        box.setWindowTitle("The run may not fit in memory")
        box.setText("The memory check says this run does not fit in what is free now.")
        box.setInformativeText("\n\n".join(self.memory.warnings) if self.memory else "")
        anyway = box.addButton("Launch anyway", QMessageBox.ButtonRole.AcceptRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        # Not exec(): the UI keeps running while the question is open.
        box.finished.connect(lambda _r: self._start() if box.clickedButton() is anyway else
                             self._say("note", "Not launched."))
        box.open()

    def _start(self) -> None:
        self.launching = True
        self._update_launch_button()
        self._say("note", "Starting the run…")
        draft = self.ctx.draft
        preset_name = (draft.saved_as or draft.preset.name) if draft.preset is not None else None
        if preset_name and draft.dirty:
            preset_name += " (edited)"
        # The latest memory check goes with the run (estimate.json), to be set beside its measured peaks.
        memory = self.memory if self.model_size.text().strip() else None
        gpus_text = self.gpu_picker.gpus_text()
        if self._queue_it:  # a sweep's runs, or this one run for later
            self.ctx.tasks.run(queue_sweep, self.request(), preset_name=draft.saved_as if draft.preset else None,
                               name=self.run_name(), sweep=self.sweep.axes() if self.sweep.active else [],
                               gpus_text=gpus_text, done=self._queued, failed=self._launch_failed)
            return
        library = self.gpu_picker.gpu_library_factory() if self.gpu_picker.gpu_library_factory else None
        self.ctx.tasks.run(launch_on_gpus, self.request(), gpus_text, library, name=self.run_name(),
                           preset_name=preset_name, environment=self._environment(), memory_check=memory,
                           done=self._launched, failed=self._launch_failed)

    def _queued(self, records: list[RunRecord]) -> None:
        self.launching = False
        self._say("ok", f"Queued {len(records)} run{'s' if len(records) != 1 else ''}: "
                  + ", ".join(r.name for r in records) + " (see the Queue page).")
        self._update_launch_button()
        self.ctx.status.emit(f"Queued {len(records)} run(s)")

    def _launched(self, outcome: LaunchOutcome) -> None:
        self.launching = False
        if outcome.record is None:
            errors = [e.removeprefix("not launched: ") for e in outcome.plan.errors]
            self._say("error", "Not launched: " + "; ".join(errors))
            if self.hosts.active and any("check-hosts" in e for e in errors):
                self.hosts.check()  # a host failed the launch's checks: show them all, host by host
            self._preview_timer.start()  # the preview shows the same problems, for what is chosen now
            self._update_launch_button()
            return
        run_id = outcome.record.id
        self._say("ok", f"Run {run_id} started ({outcome.plan.launcher}, {processes_text(outcome.plan.nproc)}).")
        self._update_launch_button()
        self.ctx.status.emit(f"Run {run_id} started")
        self.ctx.run_started.emit(run_id)

    def _launch_failed(self, error: str) -> None:
        self.launching = False
        self._update_launch_button()
        self._say("error", f"The run could not be started: {error.splitlines()[0] if error else 'unknown error'}")

    def _say(self, severity: str, text: str, blocked: bool = False) -> None:
        self._said, self._said_was_blocked = (severity, text), blocked
        self._show_result()
        if severity == "error":
            self.ctx.status.emit(text)


def processes_text(count: int) -> str:
    return f"{count} process" + ("" if count == 1 else "es")
