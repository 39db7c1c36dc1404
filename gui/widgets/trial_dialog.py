""""Try setups…": the axes of a strategy trial (ZeRO stages, offloads, micro-batches, the checkpointing argument,
warm-up and measured steps, headroom), how many candidates they make and which the estimator skips (and why), and
Start, which starts the trial's detached driver with the launch the Launch page would start (`traindeck trial
--detach`). Enter starts (from any field, once the candidates are counted), Esc closes. The choices are remembered
in the window settings and come back the next time, except where the Estimate page passes its set-ups.

The dialog only gathers choices: the plan is backend.trials.plan_trial (run off the UI thread, as the estimator may
be asked), the start is create_trial, which forks the driver away; the trial outlives this window.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QEvent, QObject, Qt, QTimer, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.launch import LaunchRequest
from traindeck.backend.runs import STEP_TIMING_ENV
from traindeck.backend.trials import (
    TrialOptions,
    TrialSpec,
    base_preset,
    candidates_line,
    config_warning,
    create_trial,
    plan_trial,
)
from traindeck.gui.widgets.message_list import rich_line

if TYPE_CHECKING:
    from traindeck.backend.presets import Preset
    from traindeck.gui.context import AppContext

OFFLOAD_CHOICES = (("none", "none"), ("cpu", "CPU (optimizer)"), ("cpu+params", "CPU + params (ZeRO-3)"),
                   ("nvme", "NVMe (ZeRO-3):"))
PLAN_DELAY_MS = 200
SETTINGS = "trialDialog/"  # the remembered choices' keys in ctx.settings


def request_from_context(ctx: AppContext) -> LaunchRequest:
    """The launch the Launch page has chosen, as ctx shares it (for a dialog opened from another page)."""
    choice = ctx.launch_choice
    return LaunchRequest(script=str(Path(choice.script).expanduser()) if choice.script else "",
                         script_args=list(choice.script_args), preset=copy.deepcopy(ctx.draft.preset),
                         launcher=choice.launcher or None,  # type: ignore[arg-type]
                         nproc=choice.nproc, python=choice.python or None,
                         cwd=Path(choice.cwd) if choice.cwd else None, env=dict(choice.env))


def plan(options: TrialOptions, preset: Preset | None) -> TrialSpec:
    """The trial these choices make (not started). Off the UI thread: the estimator may read the machine."""
    return plan_trial(options, base_preset(preset, None), trial_id="preview")


def start(options: TrialOptions, preset: Preset | None) -> tuple[str, int | None]:
    """Plan the trial and start its detached driver; (trial id, driver pid)."""
    folder = create_trial(plan_trial(options, base_preset(preset, None)))
    return folder.id, folder.driver_pid


class TrialDialog(QDialog):
    started = Signal(str, object)  # the trial's id and its driver's pid, once it is started

    def __init__(self, ctx: AppContext, request: Callable[[], LaunchRequest], *, name: str = "",
                 stages: Sequence[int] | None = None, offloads: Sequence[str] | None = None,
                 model_size: str | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.ctx, self._request, self._name = ctx, request, name
        self.setWindowTitle("Try setups")
        self.setObjectName("trialDialog")
        self.spec: TrialSpec | None = None  # the plan for the choices as they are now (None: no trial)
        self._planned_for: TrialOptions | None = None  # the choices self.spec (or the plan under way) is for
        self.config_warning: str | None = None  # why the DeepSpeed config may not reach the script
        self.problem = ""  # why there is no plan ("" while there is one or it is being made)
        self.starting = False
        self.start_wanted = False  # Enter came while the candidates were being counted: start once they are
        self._plans = ctx.tasks.lane()
        self._plan_timer = QTimer(self, singleShot=True, interval=PLAN_DELAY_MS)
        self._plan_timer.timeout.connect(self.replan)

        self.launch_line = QLabel()
        self.launch_line.setWordWrap(True)
        self.launch_line.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.stage_boxes = {s: QCheckBox(str(s)) for s in range(4)}
        stage_row = _row(*self.stage_boxes.values())
        self.offload_boxes = {key: QCheckBox(text) for key, text in OFFLOAD_CHOICES}
        self.nvme_path = QLineEdit()
        self.nvme_path.setPlaceholderText("/mnt/nvme")
        self.nvme_path.setToolTip("Where ZeRO-Infinity swaps to (a fast local disk)")
        self.nvme_path.setMinimumWidth(28 * self.fontMetrics().averageCharWidth())  # a path's width
        offload_row = _row(*self.offload_boxes.values(), self.nvme_path)
        self.micro_batch = QLineEdit()
        self.micro_batch.setPlaceholderText("doubling from 1 while it fits")
        self.micro_batch.setToolTip("Micro-batches per GPU to try, e.g. 1,2,4; empty: 1, 2, 4 ... while a set-up "
                                    "is measured with room to spare")
        self.checkpointing = QLineEdit()
        self.checkpointing.setPlaceholderText("optional, e.g. --gradient_checkpointing")
        self.checkpointing.setToolTip("The script's argument that turns activation checkpointing on: each candidate "
                                      "is tried without and with it")
        self.warmup = _spin(0, 1000, 3, " steps")
        self.steps = _spin(1, 100000, 20, " steps")
        self.headroom = _spin(0, 99, 10, " %")
        self.headroom.setToolTip("Memory to leave free: a candidate using more is 'too tight'")
        self.model_size = QLineEdit(model_size or (ctx.chosen_model[0] if ctx.chosen_model else ""))
        self.model_size.setPlaceholderText("optional, e.g. 7B: the estimator skips what does not fit")
        form = QFormLayout()
        form.addRow("ZeRO stages", stage_row)
        form.addRow("Offload", offload_row)
        form.addRow("Micro-batches", self.micro_batch)
        form.addRow("Checkpointing argument", self.checkpointing)
        form.addRow("Warm-up", self.warmup)
        form.addRow("Measured", self.steps)
        form.addRow("Headroom", self.headroom)
        form.addRow("Model size", self.model_size)

        self.summary = QLabel()
        self.summary.setObjectName("trialSummary")
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.TextFormat.RichText)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.summary.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.summary.setContentsMargins(4, 4, 4, 4)
        # The skipped candidates' reasons can be many lines: they scroll inside a frame of their own (clear of the
        # form above), the buttons stay in view.
        summary_scroll = QScrollArea()
        summary_scroll.setObjectName("trialNotes")
        summary_scroll.setWidget(self.summary)
        summary_scroll.setWidgetResizable(True)
        summary_scroll.setFrameShape(QFrame.Shape.StyledPanel)
        summary_scroll.setMinimumHeight(10 * self.fontMetrics().lineSpacing())
        buttons = QDialogButtonBox()
        self.start_button = QPushButton("Start trial")
        self.start_button.setDefault(True)
        self.start_button.setToolTip("Start the trial (Enter); it goes on when this window closes")
        buttons.addButton(self.start_button, QDialogButtonBox.ButtonRole.AcceptRole)
        buttons.addButton(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        self.start_button.clicked.connect(self.start)

        layout = QVBoxLayout(self)
        layout.addWidget(self.launch_line)
        layout.addLayout(form)
        layout.addWidget(summary_scroll, 1)
        layout.addWidget(buttons)
        self.set_axes(stages if stages is not None else range(4), offloads if offloads is not None else ("none", "cpu"))
        self.restore(axes=stages is None and offloads is None)
        for box in (*self.stage_boxes.values(), *self.offload_boxes.values()):
            box.toggled.connect(self._changed)
        for edit in (self.nvme_path, self.micro_batch, self.checkpointing, self.model_size):
            edit.textChanged.connect(self._changed)
        for spin in (self.warmup, self.steps, self.headroom):
            spin.valueChanged.connect(self._changed)
            spin.installEventFilter(self)  # Enter in a spin box starts, as it does from a line edit
        self.resize(760, 680)
        self.replan()

    # ============================================================================================ choices
    def restore(self, axes: bool) -> None:
        """The choices made the last time (ctx.settings); `axes`: the stages and offloads too (not where the
        Estimate page passes its set-ups)."""
        settings = self.ctx.settings
        if axes:
            stages = settings.value(SETTINGS + "stages")
            offloads = settings.value(SETTINGS + "offloads")
            if isinstance(stages, str) and isinstance(offloads, str):
                self.set_axes([int(s) for s in stages.split(",") if s.isdigit()],
                              [o for o in offloads.split(",") if o])
        nvme = settings.value(SETTINGS + "nvme_path")
        if isinstance(nvme, str) and nvme and not self.nvme_path.text():
            self.nvme_path.setText(nvme)
        for key, edit in (("micro_batches", self.micro_batch), ("checkpointing_arg", self.checkpointing)):
            value = settings.value(SETTINGS + key)
            if isinstance(value, str):
                edit.setText(value)
        for key, spin in (("warmup", self.warmup), ("steps", self.steps), ("headroom", self.headroom)):
            value = settings.value(SETTINGS + key)
            if isinstance(value, (int, str)) and str(value).isdigit():
                spin.setValue(int(value))

    def remember(self) -> None:
        """Keep the choices for the next time the dialog opens."""
        settings = self.ctx.settings
        settings.setValue(SETTINGS + "stages", ",".join(str(s) for s, b in self.stage_boxes.items() if b.isChecked()))
        settings.setValue(SETTINGS + "offloads", ",".join(k for k, b in self.offload_boxes.items() if b.isChecked()))
        settings.setValue(SETTINGS + "nvme_path", self.nvme_path.text().strip())
        settings.setValue(SETTINGS + "micro_batches", self.micro_batch.text().strip())
        settings.setValue(SETTINGS + "checkpointing_arg", self.checkpointing.text().strip())
        for key, spin in (("warmup", self.warmup), ("steps", self.steps), ("headroom", self.headroom)):
            settings.setValue(SETTINGS + key, spin.value())

    def set_axes(self, stages: Sequence[int], offloads: Sequence[str]) -> None:
        """Tick these stages and offloads ("nvme:PATH" fills the path), untick the others."""
        for stage, box in self.stage_boxes.items():
            box.setChecked(stage in stages)
        kinds = {o.partition(":")[0]: o.partition(":")[2] for o in offloads}
        for key, box in self.offload_boxes.items():
            box.setChecked(key in kinds)
        if kinds.get("nvme"):
            self.nvme_path.setText(kinds["nvme"])

    def options(self) -> tuple[TrialOptions, Preset | None]:
        """The trial as `traindeck trial` would be given it, with the Launch page's launch."""
        request = self._request()
        offloads = [key if key != "nvme" else f"nvme:{self.nvme_path.text().strip()}"
                    for key, box in self.offload_boxes.items() if box.isChecked()]
        env = {k: v for k, v in request.env.items() if k != STEP_TIMING_ENV}  # a trial counts steps by step timing
        options = TrialOptions(
            script=request.script, script_args=tuple(request.script_args),
            name=self._name or (Path(request.script).stem if request.script else ""),
            launcher=request.launcher, nproc=request.nproc, python=request.python,
            cwd=str(request.cwd) if request.cwd else str(Path(request.script).parent if request.script else ""),
            env=tuple(env.items()), gpus=request.gpus,
            stages=",".join(str(s) for s, box in self.stage_boxes.items() if box.isChecked()),
            offload=",".join(offloads), micro_batch=self.micro_batch.text().strip() or None,
            checkpointing_arg=self.checkpointing.text().strip() or None, steps=self.steps.value(),
            warmup=self.warmup.value(), headroom=self.headroom.value() / 100.0,
            model_size=self.model_size.text().strip() or None)
        return options, request.preset

    def _changed(self) -> None:
        if self.spec is not None and self._planned_for is not None and self.options()[0] == self._planned_for:
            return  # the same choices (a spin box re-reads its text on Enter): the plan stands
        self._plans.invalidate()
        self.spec, self.problem = None, ""
        self._plan_timer.start()
        self._refresh()

    def replan(self) -> None:
        """Plan the trial for the choices as they are now (the count and the skipped come back on the UI thread)."""
        self._plan_timer.stop()
        options, preset = self.options()
        self._planned_for = options
        self._describe_launch(options, preset)
        if not options.script:
            self._planned_problem("choose a script on the Launch page first")
            return
        if not options.stages or not options.offload:
            self._planned_problem("tick at least one ZeRO stage and one offload")
        elif self.offload_boxes["nvme"].isChecked() and not self.nvme_path.text().strip():
            self._planned_problem("NVMe offload needs a path")
        else:
            self._plans.run(plan, options, preset, done=self._planned, failed=self._planned_problem)

    def _describe_launch(self, options: TrialOptions, preset: Preset | None) -> None:
        how = options.launcher or (preset.launcher if preset else "the preset's launcher")
        procs = f", {options.nproc} processes" if options.nproc else ""
        command = " ".join([Path(options.script).name or "(no script)", *options.script_args])
        self.launch_line.setText(f"Each candidate runs {command} with preset "
                                 f"'{preset.name if preset else '(none)'}' ({how}{procs}), as Launch would.")
        self.config_warning = config_warning(options.launcher or (preset.launcher if preset else None),
                                             options.script_args)

    def _planned(self, spec: TrialSpec) -> None:
        self.spec, self.problem = spec, ""
        self._refresh()
        if self.start_wanted:
            self.start()

    def _planned_problem(self, text: str) -> None:
        self.start_wanted = False
        self.spec, self.problem = None, str(text).splitlines()[0] if text else "no trial"
        self._refresh()

    def _refresh(self) -> None:
        self.start_button.setEnabled(self.spec is not None and not self.starting)
        if self.starting:
            self.summary.setText(rich_line("note", "Starting the trial…", self))
            return
        if self.problem:
            self.summary.setText(rich_line("error", "No trial: " + self.problem, self))
            return
        if self.spec is None:
            self.summary.setText(rich_line("note", "Counting the candidates…", self))
            return
        lines = [rich_line("ok", self.count_line(), self, bold=True)]
        if self.config_warning:
            lines.append(rich_line("warning", self.config_warning, self))
        for skipped in self.spec.skipped:
            lines.append(rich_line("warning", f"skips {_label(skipped.get('candidate') or {})}: "
                                   f"{skipped.get('reason') or ''}", self))
        lines += [rich_line("note", note, self) for note in self.spec.notes]
        self.summary.setText("<br>".join(lines))

    def count_line(self) -> str:
        """How many candidates, which (by name), how many the estimate skips, the steps each."""
        return candidates_line(self.spec) if self.spec is not None else ""

    def skipped_lines(self) -> list[str]:
        """The candidates the estimator skips, with why (tests and the summary)."""
        return [f"{_label(s.get('candidate') or {})}: {s.get('reason') or ''}"
                for s in (self.spec.skipped if self.spec else [])]

    # ============================================================================================ start
    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802
        if event.type() == QEvent.Type.KeyPress and isinstance(event, QKeyEvent) \
                and event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not event.modifiers():
            if isinstance(watched, QSpinBox):
                watched.interpretText()  # the value typed counts before the start
            self.start()
            return True
        return super().eventFilter(watched, event)

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802
        """Enter starts even while the candidates are being counted (Start is off then: the default button would
        not take it); the start waits for the count."""
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not event.modifiers():
            self.start()
            return
        super().keyPressEvent(event)

    def start(self) -> None:
        """Start the trial (Enter): its driver is forked away, so the trial outlives the window. While the
        candidates are being counted, it starts once they are."""
        if self.starting:
            return
        if self.spec is None:
            self.start_wanted = not self.problem
            return
        self.start_wanted = False
        self.remember()
        self.starting = True
        self._refresh()
        options, preset = self.options()
        self.ctx.tasks.run(start, options, preset, done=self._started, failed=self._start_failed)

    def _started(self, started: tuple[str, int | None]) -> None:
        self.starting = False
        trial_id, pid = started
        self.ctx.status.emit(f"Trial {trial_id} started")
        self.started.emit(trial_id, pid)
        self.accept()

    def _start_failed(self, error: str) -> None:
        self.starting = False
        self.spec, self.problem = None, "it could not be started: " + (str(error).splitlines()[0] if error else "")
        self._refresh()
        self._plan_timer.start()

    def done(self, result: int) -> None:
        self._plan_timer.stop()
        self._plans.invalidate()
        super().done(result)


def _label(candidate: dict[str, object]) -> str:
    from traindeck.backend.trials import Candidate

    try:
        return Candidate.from_dict(candidate).label
    except (KeyError, TypeError, ValueError):
        return "?"


def _row(*widgets: QWidget) -> QWidget:
    row = QWidget()
    layout = QHBoxLayout(row)
    layout.setContentsMargins(0, 0, 0, 0)
    for widget in widgets:
        layout.addWidget(widget)
    layout.addStretch(1)
    return row


def _spin(low: int, high: int, value: int, suffix: str) -> QSpinBox:
    spin = QSpinBox()
    spin.setRange(low, high)
    spin.setValue(value)
    spin.setSuffix(suffix)
    return spin


__all__ = ["TrialDialog", "request_from_context"]
