"""The Launch page's launch bar: the Launch and Queue buttons, the line beside them, why the run cannot start (or be
queued) now, the memory question before a run that does not fit, the question before queueing the sweep just
queued once more, and starting or queueing the run on ctx.tasks
through the same backend calls as `traindeck run` (unattended.launch_on_gpus / queue_sweep).

The bar acts on the choices the page gathers: it reads them through the `order` callable it is given, when a launch
starts, and is told of the fields' problems by the page; the plan comes from the command box, the memory check from
the memory box.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from PySide6.QtCore import QEvent, QRect, Qt, QTimer, Signal
from PySide6.QtGui import QFont, QResizeEvent
from PySide6.QtWidgets import QHBoxLayout, QLabel, QMessageBox, QPushButton, QWidget

from traindeck.gui.pages.launch.unattended import launch_on_gpus, queue_sweep
from traindeck.gui.widgets.message_list import rich_line

if TYPE_CHECKING:
    from traindeck.backend.launch import LaunchRequest, TrainingEnvironment
    from traindeck.backend.monitor import NvmlLibrary
    from traindeck.backend.runs import LaunchOutcome, RunRecord
    from traindeck.gui.context import AppContext
    from traindeck.gui.pages.launch.command_panel import CommandBox
    from traindeck.gui.pages.launch.memory_panel import MemoryCheckBox
    from traindeck.gui.widgets.hostfile_editor import HostfileEditor
    from traindeck.gui.widgets.sweep_editor import SweepEditor
    from traindeck.gui.widgets.trial_dialog import TrialDialog


RUN_WATCH_MS = 2000  # how often the started run's state is read while its line is shown
# Each line beside the buttons wraps to at most this many lines (elided, the whole of it in the tooltip), so a
# long reason never makes the bar, and with it the page, taller.
LINE_ROWS = 2


@dataclass(frozen=True)
class LaunchOrder:
    """What a launch starts from, read from the page's fields on the UI thread as it starts."""

    request: LaunchRequest
    name: str  # the run's name as typed; "": the default name, made unique among the store's runs
    trial_name: str  # a trial's name: its candidates add their own set-up, so the preset's name is left out
    environment: TrainingEnvironment | None  # the interpreter's packages, as last probed
    gpus_text: str  # "0,2", "any:2" or "" (the launcher's default)
    gpu_library: Callable[[], NvmlLibrary] | None  # what `any:N` samples the GPUs with (None: NVML itself)


class LaunchBar(QWidget):
    replan = Signal()  # a launch was refused at start: the preview should be built again for what is chosen now
    queued = Signal()  # runs were queued from here (their names are taken now)

    def __init__(self, ctx: AppContext, order: Callable[[], LaunchOrder], command_box: CommandBox,
                 memory_box: MemoryCheckBox, sweep: SweepEditor, hosts: HostfileEditor) -> None:
        super().__init__()
        self.ctx, self._order = ctx, order
        self._command_box, self._memory_box, self._sweep, self._hosts = command_box, memory_box, sweep, hosts
        self.launching = False
        self._said: tuple[str, str] | None = None  # the last launch message (re-coloured when the theme changes)
        self._blocked_line = ""  # why the Launch button is disabled now ("" when it is not)
        self._said_was_blocked = False  # whether _said is a refused try's reasons (Ctrl+Enter while blocked)
        self._queue_it = False  # the launch asked for goes to the queue (Queue, or a sweep)
        self._field_problems: list[str] = []
        # The sweep queued last and its choices: the same sweep again (Ctrl+2, Ctrl+Enter later) is asked about.
        self._queued_sweep: tuple[object, ...] | None = None
        self._sweep_sent: tuple[object, ...] | None = None  # the one being queued now
        # The run this bar said was started: the line goes when that run ends (read from the run store off the UI
        # thread) or when another preset or script is chosen, so it never describes a run that is over.
        self.started_run: str | None = None
        self._run_watch = QTimer(self, interval=RUN_WATCH_MS)
        self._run_watch.timeout.connect(self._check_started_run)
        self._run_reads = ctx.tasks.lane()

        bar = QHBoxLayout(self)
        self.result = QLabel()
        self.result.setWordWrap(True)
        self.result.setTextFormat(Qt.TextFormat.RichText)
        self.result.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.launch_button = QPushButton("Launch")
        self.launch_button.setToolTip("Start the run (Ctrl+Enter); it keeps running when the window closes")
        font = QFont(self.launch_button.font())
        font.setBold(True)
        self.launch_button.setFont(font)
        self.launch_button.setMinimumWidth(140)
        self.launch_button.setDefault(True)
        self.launch_button.clicked.connect(lambda: self.launch())  # not clicked(bool) as `queue`
        # One run for later (tonight, after the current one): the queue starts it when what it needs is free.
        # With a sweep the Launch button queues already, so this one is hidden then.
        self.queue_button = QPushButton("Queue")
        self.queue_button.clicked.connect(lambda: self.launch(queue=True))
        # A strategy trial of this launch: short measured runs of ZeRO stage x offload x micro-batch.
        self.trial_button = QPushButton("Try setups…")
        self.trial_button.setToolTip("Measure which ZeRO stage, offload and micro-batch is fastest for this script "
                                     "and preset (short runs, one at a time; the trial goes on when the window "
                                     "closes)")
        self.trial_button.clicked.connect(self.try_setups)
        # Room for the last launch's line and the reasons the button is disabled, LINE_ROWS rows each.
        rows = 2 * LINE_ROWS
        self.result.setMaximumHeight(rows * self.result.fontMetrics().lineSpacing() + 4)
        bar.addWidget(self.result, 1)
        bar.addWidget(self.trial_button)
        bar.addWidget(self.queue_button)
        bar.addWidget(self.launch_button)
        bar.setContentsMargins(9, 4, 9, 6)
        command_box.planned.connect(self.refresh)

    # ============================================================================================ state
    def set_field_problems(self, problems: list[str]) -> None:
        """The page's field checks (script, arguments, environment, GPUs, sweep, hosts), in the order they are said."""
        self._field_problems = list(problems)
        self.refresh()

    def refresh(self) -> None:
        """The buttons and the line beside them, for the choices, the preset and the plan as they are now."""
        blocked = self.why_not_launchable()
        self.launch_button.setEnabled(not blocked)
        count = len(self._sweep.points)
        self.launch_button.setText("Starting…" if self.launching else f"Queue {count} runs" if count > 1
                                   else "Queue 1 run" if count else "Launch")
        self.launch_button.setToolTip("Start the run (Ctrl+Enter); it keeps running when the window closes"
                                      if not blocked else "Cannot launch yet: " + "; ".join(blocked))
        self.queue_button.setVisible(not self._sweep.active)
        queue_blocked = self.why_not_launchable(queue=True)
        self.queue_button.setEnabled(not queue_blocked)
        self.queue_button.setToolTip("Put this run in the queue (Ctrl+Shift+Enter): it starts when the runs before "
                                     "it are done and its GPUs are free, whether or not this window is open"
                                     if not queue_blocked else "Cannot queue it: " + "; ".join(queue_blocked))
        # Beside a disabled button, say why it is disabled (a "Run ... started" line alone reads as if the button
        # were broken); the last launch's line stays above it.
        self._blocked_line = "" if self.launching or not blocked else "To launch: " + "; ".join(blocked)
        if not blocked and self._said_was_blocked:
            self._said = None  # "Not launched: <reasons>" once the reasons are gone would read as still true
        self._show_result()

    def _show_result(self) -> None:
        lines = [rich_line(self._said[0], self._fit(self._said[1]), self)] if self._said else []
        same = (self._said is not None and self._said_was_blocked
                and self._said[1].removeprefix("Not launched: ") == self._blocked_line.removeprefix("To launch: "))
        if self._blocked_line and not same:  # the reasons of a refused try, said once
            lines.append(rich_line("warning", self._fit(self._blocked_line), self))
        self.result.setText("<br>".join(lines))
        self.result.setToolTip("\n".join(t for t in ((self._said or ("", ""))[1], self._blocked_line) if t))

    def _fit(self, text: str) -> str:
        """`text` cut to what LINE_ROWS rows of the line's width hold once wrapped at words (its marker in front),
        ending in "…" when cut."""
        metrics = self.result.fontMetrics()
        width = max(self.result.width(), 200) - 2 * metrics.averageCharWidth()  # rich text lays out a little wider
        rows = LINE_ROWS * metrics.lineSpacing()

        def fits(candidate: str) -> bool:
            box = metrics.boundingRect(QRect(0, 0, width, 100 * rows), Qt.TextFlag.TextWordWrap, "⚠ " + candidate)
            return box.height() <= rows

        if fits(text):
            return text
        low, high = 0, len(text)  # the longest cut that fits, by halving
        while low < high:
            middle = (low + high + 1) // 2
            if fits(text[:middle].rstrip() + "…"):
                low = middle
            else:
                high = middle - 1
        return text[:low].rstrip() + "…"

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._show_result()  # the lines are cut to the width they have

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == event.Type.PaletteChange and hasattr(self, "result"):
            # The theme changed: rich text keeps the colours it was laid out with, so lay it out again once the
            # children have the new palette too.
            QTimer.singleShot(0, self.refresh)

    def why_not_launchable(self, queue: bool = False) -> list[str]:
        """Why the run cannot start now (or, with `queue`, be queued); [] when it can."""
        queue = queue or self._sweep.active
        reasons: list[str] = []
        if self.launching:
            reasons.append("a launch is starting")
        if self.ctx.draft.errors():
            reasons.append("the preset has errors (see the Configure page)")
        reasons += self._field_problems
        draft = self.ctx.draft
        if queue and draft.preset is not None and (draft.dirty or not draft.saved_as):
            reasons.append("save the preset first: queued runs read it by name when they start")
        if queue and not self._sweep.active and self._hosts.active:
            reasons.append("Several machines: queued runs start on this machine only; launch it now instead")
        plan = self._command_box.plan
        if plan is not None:
            reasons += plan.errors
        return reasons

    # ============================================================================================ launch
    def launch(self, queue: bool = False) -> None:
        """Launch with the current choices (Ctrl+Enter), or put them in the queue (Ctrl+Shift+Enter); asks first
        when the memory check says it does not fit."""
        self._queue_it = queue or self._sweep.active
        blocked = self.why_not_launchable(queue=queue)
        if blocked:
            self._say("error", "Not launched: " + "; ".join(blocked), blocked=True)  # cleared with its reasons
            return
        if self._sweep.active and self._queued_sweep is not None and self._sweep_key() == self._queued_sweep:
            self._confirm_same_sweep()
            return
        self._check_memory()

    def _not_done(self) -> str:
        return "Not queued." if self._queue_it else "Not launched."

    def _sweep_key(self) -> tuple[object, ...]:
        """The sweep and the choices its runs are made from, to tell the same sweep from an edited one."""
        order = self._order()
        return (repr(dataclasses.replace(order.request, gpus=None)), tuple(self._sweep.axes()), order.name,
                order.gpus_text)

    def _confirm_same_sweep(self) -> None:
        """This sweep with these choices was queued already from here: queueing it again is asked, never silent."""
        count = len(self._sweep.points)
        runs = f"{count} run{'s' if count != 1 else ''}"
        box = self._question("sweepAgain", "Queue this sweep again?",
                             f"This sweep ({runs}) was queued already, with the same script, arguments and preset.",
                             f"Queue {runs} more, or cancel and change the sweep first.", f"Queue {runs} again")
        box.finished.connect(lambda _r: self._check_memory() if box.clickedButton() is box.property("yes") else
                             self._say("note", "Not queued again."))
        box.open()

    def _check_memory(self) -> None:
        memory = self._memory_box.memory
        if memory is not None and memory.does_not_fit:
            self._confirm_memory()
            return
        self._start()

    def _confirm_memory(self) -> None:
        queue = self._queue_it
        memory = self._memory_box.memory
        verb = "Queue" if queue else "Launch"
        box = self._question("memoryConfirm", "The run may not fit in memory",
                             f"The memory check says {'these runs do' if self._sweep.active else 'this run does'} "
                             "not fit in what is free now.",
                             "\n\n".join(memory.warnings) if memory else "", f"{verb} anyway")
        box.setIcon(QMessageBox.Icon.Warning)
        box.finished.connect(lambda _r: self._start() if box.clickedButton() is box.property("yes") else
                             self._say("note", self._not_done()))
        box.open()

    def _question(self, name: str, title: str, text: str, informative: str, yes: str) -> QMessageBox:
        """A question before the action, Cancel by default, its yes button (property "yes") naming the action.
        Opened with open(), not exec(): the UI keeps running while it is open."""
        box = QMessageBox(self)
        box.setObjectName(name)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.setIcon(QMessageBox.Icon.Question)
        box.setWindowTitle(title)
        box.setText(text)
        box.setInformativeText(informative)
        box.setProperty("yes", box.addButton(yes, QMessageBox.ButtonRole.AcceptRole))
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        return box

    def _start(self) -> None:
        self.launching = True
        self.refresh()
        self._say("note", "Starting the run…")
        draft = self.ctx.draft
        preset_name = (draft.saved_as or draft.preset.name) if draft.preset is not None else None
        if preset_name and draft.dirty:
            preset_name += " (edited)"
        # The latest memory check goes with the run (estimate.json), to be set beside its measured peaks.
        memory = self._memory_box.check_for_run()
        order = self._order()
        if self._queue_it:  # a sweep's runs, or this one run for later
            self._sweep_sent = self._sweep_key() if self._sweep.active else None
            self.ctx.tasks.run(queue_sweep, order.request, preset_name=draft.saved_as if draft.preset else None,
                               name=order.name, sweep=self._sweep.axes() if self._sweep.active else [],
                               gpus_text=order.gpus_text, done=self._queued, failed=self._launch_failed)
            return
        library = order.gpu_library() if order.gpu_library else None
        self.ctx.tasks.run(launch_on_gpus, order.request, order.gpus_text, library, name=order.name,
                           preset_name=preset_name, environment=order.environment, memory_check=memory,
                           done=self._launched, failed=self._launch_failed)

    def try_setups(self) -> TrialDialog:
        """The trial dialog for the launch the Launch button would start; its results open once it starts."""
        from traindeck.gui.widgets.trial_dialog import TrialDialog
        from traindeck.gui.widgets.trial_results import TrialResults

        dialog = TrialDialog(self.ctx, lambda: self._order().request, name=self._order().trial_name, parent=self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.started.connect(lambda trial_id, pid: TrialResults(self.ctx, trial_id, pid, parent=self).show())
        dialog.open()
        return dialog

    def _queued(self, records: list[RunRecord]) -> None:
        self.launching = False
        self._queued_sweep, self._sweep_sent = self._sweep_sent, None
        self._say("ok", f"Queued {len(records)} run{'s' if len(records) != 1 else ''}: "
                  + ", ".join(r.name for r in records) + " (see the Queue page).")
        self.refresh()
        self.ctx.status.emit(f"Queued {len(records)} run(s)")
        self.queued.emit()

    def _launched(self, outcome: LaunchOutcome) -> None:
        self.launching = False
        if outcome.record is None:
            errors = [e.removeprefix("not launched: ") for e in outcome.plan.errors]
            self._say("error", "Not launched: " + "; ".join(errors))
            if self._hosts.active and any("check-hosts" in e for e in errors):
                self._hosts.check()  # a host failed the launch's checks: show them all, host by host
            self.replan.emit()  # the preview shows the same problems, for what is chosen now
            self.refresh()
            return
        run_id = outcome.record.id
        self._say("ok", f"Run {run_id} started ({outcome.plan.launcher}, {processes_text(outcome.plan.nproc)}).")
        self.started_run = run_id
        self._run_watch.start()
        self.refresh()
        self.ctx.status.emit(f"Run {run_id} started")
        self.ctx.run_started.emit(run_id)

    def _launch_failed(self, error: str) -> None:
        self.launching = False
        self._sweep_sent = None
        self.refresh()
        self._say("error", f"The run could not be started: {error.splitlines()[0] if error else 'unknown error'}")

    def forget_started_run(self) -> None:
        """Another preset or script was chosen (or the run ended): the "Run ... started" line goes."""
        self._run_watch.stop()
        self._run_reads.invalidate()
        if self.started_run is not None and self._said is not None and self._said[0] == "ok" \
                and self._said[1].startswith(f"Run {self.started_run} started"):
            self._said = None
            self._show_result()
        self.started_run = None

    def choices_changed(self) -> None:
        """Another preset, script or entry mode was chosen: the last launch's line ("Run ... started", "Queued 1 run:
        ...", "Not launched: ...") was about the choices before, so it goes (the reasons the button is disabled now
        stay, said for what is chosen now)."""
        self.forget_started_run()
        if self._said is not None and not self.launching:
            self._said, self._said_was_blocked = None, False
            self._show_result()

    def _check_started_run(self) -> None:
        if self.started_run is not None:
            run_id = self.started_run
            self._run_reads.run(run_has_ended, run_id, done=lambda ended: self._started_run_read(run_id, ended))

    def _started_run_read(self, run_id: str, ended: bool) -> None:
        if ended and run_id == self.started_run:
            self.forget_started_run()

    def _say(self, severity: str, text: str, blocked: bool = False) -> None:
        if self.started_run is not None:  # a newer line replaces the started one: nothing left to clear
            self._run_watch.stop()
            self.started_run = None
        self._said, self._said_was_blocked = (severity, text), blocked
        self._show_result()
        if severity == "error":
            self.ctx.status.emit(text)


def run_has_ended(run_id: str) -> bool:
    """Whether the run has reached a final state (or is gone from the store). Reads SQLite: off the UI thread."""
    from traindeck.backend.runs import RunStore

    store = RunStore()
    try:
        record = store.get_run(run_id)
        return record is None or record.finished
    finally:
        store.close()


def processes_text(count: int) -> str:
    return f"{count} process" + ("" if count == 1 else "es")
