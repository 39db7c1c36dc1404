"""Launch: the script, its arguments, where and with what it runs, the command it becomes, a memory check, and the
Launch button (Ctrl+Enter).

The page only gathers choices: the plan comes from backend.runs.launch (build_plan with the same LaunchRequest
`traindeck run` builds), the memory check from backend.estimate.prelaunch, the interpreter's packages from
backend.launch.probe, all on ctx.tasks. Secrets typed here reach the run through the supervisor's pipe only.

The memory-check panel is launch_memory.py, the command box launch_command.py, acting on the choices (Launch, Queue,
the line beside them) launch_flow.py; the plan is backend/launch.
"""

from __future__ import annotations

import copy
import html
import json
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, cast

from PySide6.QtCore import QEvent, Qt, QTimer
from PySide6.QtGui import QFont, QKeySequence, QPalette, QShortcut
from PySide6.QtWidgets import (
    QApplication,
    QComboBox,
    QFormLayout,
    QFrame,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.core import resources_dir
from traindeck.backend.launch import DS_CONFIG_PLACEHOLDER, LAUNCHERS, LaunchPlan, LaunchRequest
from traindeck.backend.runs import STOP_ON_NAN_ENV
from traindeck.gui.context import DEFAULT_PRESET, AppContext, LaunchChoice
from traindeck.gui.pages.base import Page
from traindeck.gui.pages.launch.command_panel import CommandBox, argv_html
from traindeck.gui.pages.launch.flow import LaunchFlow, processes_text
from traindeck.gui.pages.launch.memory_panel import MemoryCheckBox
from traindeck.gui.widgets.alert_settings import AlertSettings
from traindeck.gui.widgets.env_table import EnvTable
from traindeck.gui.widgets.gpu_picker import GpuPicker
from traindeck.gui.widgets.hostfile_editor import HostfileEditor
from traindeck.gui.widgets.interpreter_picker import InterpreterPicker
from traindeck.gui.widgets.message_list import MessageList
from traindeck.gui.widgets.path_field import PathField
from traindeck.gui.widgets.sweep_editor import SweepEditor

if TYPE_CHECKING:  # the estimator is imported when a check runs, not with the page
    from traindeck.backend.estimate import LaunchMemoryCheck
    from traindeck.backend.launch import Launcher, TrainingEnvironment
    from traindeck.backend.presets import Preset

DEMO_SCRIPT = "demo/train_tiny.py"  # under resources_dir()
# The cpu-demo preset's DeepSpeed config is handed to the script; 4 samples per rank match its micro batch, and
# 0.2 s per step makes the run last long enough to watch (about half a minute after DeepSpeed starts).
DEMO_ARGS = "--steps 100 --batch-size 4 --step-time 0.2 --log-every 5"
DEMO_DS_ARGS = f"--deepspeed_config {DS_CONFIG_PLACEHOLDER} "  # first, when the preset has a DeepSpeed config
# The CPU accelerator even on a GPU machine: the demo preset is the no-GPU path.
DEMO_ENV = {"DS_ACCELERATOR": "cpu"}
DEMO_MODEL_SIZE = "1.5B"
_S = "launch/"  # QSettings group


def demo_script() -> str:
    return str(resources_dir() / DEMO_SCRIPT)


class LaunchPage(LaunchFlow, Page):
    key = "launch"
    title = "Launch"
    order = 20

    def __init__(self, ctx: AppContext):
        super().__init__(ctx)
        self.plan: LaunchPlan | None = None  # the preview for the current choices, once built
        self.launching = False
        self._said: tuple[str, str] | None = None  # the last launch message (re-coloured when the theme changes)
        self._blocked_line = ""  # why the Launch button is disabled now ("" when it is not)
        self._said_was_blocked = False  # whether _said is a refused try's reasons (Ctrl+Enter while blocked)
        self._queue_it = False  # the launch asked for goes to the queue (Queue, or a sweep)
        self._previews = ctx.tasks.lane()
        self._field_problems: list[str] = []
        self._loading = True
        self._build()
        self._preview_timer = self._timer(150, self._refresh_preview)
        self._check_timer = self.memory_box.check_timer
        self._save_timer = self._timer(400, self._save_settings)
        ctx.draft.changed.connect(self._draft_changed)
        ctx.draft.validated.connect(self._show_draft_state)
        self._restore()
        self._loading = False
        self._draft_changed()
        self._fields_changed()  # publishes the restored choice as ctx.launch_choice
        self.interpreter.probe()

    # ============================================================================================ building
    def _timer(self, ms: int, slot: Callable[[], None]) -> QTimer:
        timer = QTimer(self, singleShot=True, interval=ms)
        timer.timeout.connect(slot)
        return timer

    def _build(self) -> None:
        content = QWidget()
        outer = QVBoxLayout(content)

        # --- the preset (edited on Configure)
        self.preset_label = QLabel()
        self.preset_label.setTextFormat(Qt.TextFormat.RichText)
        self.preset_label.linkActivated.connect(lambda _link: self.ctx.navigate.emit("configure"))
        self.draft_errors = MessageList()
        outer.addWidget(self.preset_label)
        outer.addWidget(self.draft_errors)

        columns = QGridLayout()
        columns.setColumnStretch(0, 1)
        columns.setColumnStretch(1, 1)
        outer.addLayout(columns)

        # --- what to run
        what = QGroupBox("Training script")
        what_column = QVBoxLayout(what)
        form = QFormLayout()
        what_column.addLayout(form)
        what_column.addStretch(1)  # the box is as tall as the environment beside it: rows stay together at the top
        self.script = PathField("file", caption="Choose the training script", name_filter="Python (*.py);;All (*)",
                                placeholder="train.py")
        self.script.setToolTip("The Python file the launcher runs in every process")
        self.script.start_dir = lambda: str(self.ctx.settings.value(_S + "last_dir", "") or "")
        self.args = QLineEdit()
        self.args.setPlaceholderText("--epochs 3 --deepspeed_config {ds_config}")
        self.args.setToolTip("One line, split like a shell would (quotes keep spaces). "
                             f"{DS_CONFIG_PLACEHOLDER} becomes the path of this run's ds_config.json.")
        self.argv_label = QLabel()
        self.argv_label.setTextFormat(Qt.TextFormat.RichText)
        self.argv_label.setWordWrap(True)
        self.argv_label.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        self.args_note = MessageList()
        self.cwd = PathField("dir", caption="Working directory of the run", placeholder="the script's folder")
        self.cwd.setToolTip("Where the processes start (relative paths in the script and its arguments start here)")
        self.name = QLineEdit()
        self.name.setPlaceholderText("the script's name")
        self.name.setToolTip("A name for the run in Runs and History")
        form.addRow("Script", self.script)
        form.addRow("Working directory", self.cwd)
        form.addRow("Run name", self.name)
        form.addRow("Arguments", self.args)
        below_args = QWidget()  # one row: a hidden note must not leave an empty form row behind
        below = QVBoxLayout(below_args)
        below.setContentsMargins(0, 0, 0, 0)
        below.setSpacing(2)
        below.addWidget(self.argv_label)
        below.addWidget(self.args_note)
        # Last: a wrapped label's height is worked out for a narrower width than it gets, and the spare lines
        # opened a gap between the arguments and the fields below them.
        form.addRow("", below_args)
        columns.addWidget(what, 0, 0)

        # --- how to run it
        how = QGroupBox("Launcher and interpreter")
        form = QFormLayout(how)
        self.launcher = QComboBox()
        self.launcher.setToolTip("accelerate launch, the deepspeed runner, or plain python (torchrun for several "
                                 "processes). The preset chooses one; a different one here applies to this launch.")
        self.nproc = QSpinBox()
        self.nproc.setRange(0, 4096)
        self.nproc.setToolTip("Processes (ranks) on this machine: usually one per GPU")
        self.interpreter = InterpreterPicker(self.ctx.tasks)
        form.addRow("Launcher", self.launcher)
        form.addRow("Processes", self.nproc)
        form.addRow("Interpreter", self.interpreter)
        columns.addWidget(how, 1, 0)

        # --- environment
        env_box = QGroupBox("Environment variables")
        env_layout = QVBoxLayout(env_box)
        self.env = EnvTable()
        self.env.setMinimumHeight(110)
        self.env_note = QLabel("Added to the environment the run inherits. Values of names like *_TOKEN, *_KEY or "
                               "*PASSWORD* are hidden and never saved.")
        self.env_note.setWordWrap(True)
        self.env_problems = MessageList()
        env_layout.addWidget(self.env, 1)
        env_layout.addWidget(self.env_note)
        env_layout.addWidget(self.env_problems)
        columns.addWidget(env_box, 0, 1)

        # --- memory check
        self.memory_box = MemoryCheckBox(self.ctx.tasks, self._check_inputs, lambda: self._save_timer.start())
        self.model_size = self.memory_box.model_size
        self.memory_result = self.memory_box.memory_result
        columns.addWidget(self.memory_box, 1, 1)

        # --- unattended runs (issue 13): which GPUs, a sweep, what to watch and whom to tell
        self.gpu_picker = GpuPicker(self.ctx.tasks)
        self.sweep = SweepEditor()
        self.alert_settings = AlertSettings(self.ctx.tasks)
        self.stop_on_nan = self.alert_settings.stop_on_nan
        # --- several machines (issue 15): a hostfile, shown for the deepspeed launcher only
        self.hosts = HostfileEditor(self.ctx.tasks, self.ctx.settings, lambda: (self.request(), self._environment()),
                                    self.choice)
        columns.addWidget(self.hosts, 2, 0, 1, 2)
        columns.addWidget(self.gpu_picker, 3, 0)
        columns.addWidget(self.sweep, 3, 1)
        columns.addWidget(self.alert_settings, 4, 0, 1, 2)

        # --- the command
        self.command_box = CommandBox()
        self.command_box.copied.connect(lambda: self.ctx.status.emit("Command copied"))
        self.command = self.command_box.command
        self.command_env = self.command_box.command_env
        self.plan_messages = self.command_box.plan_messages
        outer.addWidget(self.command_box)

        # --- launch
        bar = QHBoxLayout()
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
        bar.addWidget(self.result, 1)
        bar.addWidget(self.queue_button)
        bar.addWidget(self.launch_button)
        outer.addStretch(1)

        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(content)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(scroll, 1)
        # The Launch button and its result stay in view below the scrolled form, whatever the window's height:
        # at 1280x800 the form (GPUs, sweep, alerts) is taller than the page.
        bar.setContentsMargins(9, 4, 9, 6)
        layout.addLayout(bar)

        for sequence in ("Ctrl+Return", "Ctrl+Enter"):
            shortcut = QShortcut(QKeySequence(sequence), self)
            # The whole window, not only where a field has focus: right after Ctrl+2 the focus is still on the
            # navigation list, and the key did nothing. _shortcut_launch checks that this page is the one shown.
            shortcut.setContext(Qt.ShortcutContext.WindowShortcut)
            shortcut.activated.connect(self._shortcut_launch)
        for sequence in ("Ctrl+Shift+Return", "Ctrl+Shift+Enter"):
            shortcut = QShortcut(QKeySequence(sequence), self)
            shortcut.setContext(Qt.ShortcutContext.WindowShortcut)
            shortcut.activated.connect(lambda: self.launch(queue=True) if self.isVisible() else None)

        self.script.textChanged.connect(self._fields_changed)
        self.script.picked.connect(lambda path: self.ctx.settings.setValue(_S + "last_dir", str(Path(path).parent)))
        self.args.textChanged.connect(self._fields_changed)
        self.cwd.textChanged.connect(self._fields_changed)
        self.name.textChanged.connect(self._fields_changed)
        self.launcher.currentIndexChanged.connect(self._fields_changed)
        self.nproc.valueChanged.connect(self._fields_changed)
        self.interpreter.changed.connect(self._fields_changed)
        self.interpreter.probed.connect(lambda _env: self._preview_timer.start())
        self.env.changed.connect(self._fields_changed)
        for signal in (self.gpu_picker.changed, self.sweep.changed, self.stop_on_nan.toggled, self.hosts.changed):
            signal.connect(self._fields_changed)

    # ============================================================================================ choices
    def _restore(self) -> None:
        s = self.ctx.settings
        self.hosts.restore()
        if self.ctx.demo or not s.value(_S + "script"):
            self.fill_demo()
            return
        self.script.setText(str(s.value(_S + "script", "")))
        self.args.setText(str(s.value(_S + "args", "")))
        self.args.setCursorPosition(0)
        self.cwd.setText(str(s.value(_S + "cwd", "")))
        self.interpreter.set_python(str(s.value(_S + "python", "")))
        self._set_launcher(str(s.value(_S + "launcher", "")))
        self.nproc.setValue(_int(s.value(_S + "nproc", 0)))
        self.model_size.setText(str(s.value(_S + "model_size", "")))
        self._restore_unattended()
        try:
            rows = json.loads(str(s.value(_S + "env", "[]")))
            self.env.set_env({str(n): str(v) for n, v in rows})
        except (ValueError, TypeError):
            self.env.set_env({})

    def fill_demo(self) -> None:
        """The CPU demo: train_tiny.py with arguments for the cpu-demo preset, so one click runs on any machine."""
        preset = self.ctx.draft.preset
        self.script.setText(demo_script())
        self.args.setText((DEMO_DS_ARGS if preset is not None and preset.uses_deepspeed() else "") + DEMO_ARGS)
        self.args.setCursorPosition(0)  # the start of a long line says more than its end
        self.cwd.setText("")
        self.name.setText("")
        self.interpreter.set_python("")
        self._set_launcher("")
        self.nproc.setValue(0)
        self.env.set_env(DEMO_ENV if preset is not None and preset.name == DEFAULT_PRESET else {})

    def _save_settings(self) -> None:
        s = self.ctx.settings
        s.setValue(_S + "script", self.script.text())
        s.setValue(_S + "args", self.args.text())
        s.setValue(_S + "cwd", self.cwd.text())
        s.setValue(_S + "python", self.interpreter.python())
        s.setValue(_S + "launcher", self._launcher_choice())
        s.setValue(_S + "nproc", self.nproc.value())
        s.setValue(_S + "model_size", self.model_size.text())
        # Secret values never reach the settings file: savable() keeps only their names.
        s.setValue(_S + "env", json.dumps(self.env.savable()))
        s.setValue(_S + "gpus", self.gpu_picker.gpus_text())
        s.setValue(_S + "sweep", json.dumps(self.sweep.axes()))
        s.setValue(_S + "stop_on_nan", self.stop_on_nan.isChecked())
        self.hosts.save_settings()

    def _restore_unattended(self) -> None:
        s = self.ctx.settings
        self.gpu_picker.set_gpus_text(str(s.value(_S + "gpus", "") or ""))
        try:
            self.sweep.set_axes([str(a) for a in json.loads(str(s.value(_S + "sweep", "[]")))])
        except (ValueError, TypeError):
            self.sweep.set_axes([])
        self.stop_on_nan.setChecked(str(s.value(_S + "stop_on_nan", "false")).lower() == "true")

    def _set_launcher(self, launcher: str) -> None:
        index = self.launcher.findData(launcher)
        self.launcher.setCurrentIndex(max(0, index))

    def _launcher_choice(self) -> str:
        return str(self.launcher.currentData() or "")

    def choice(self) -> LaunchChoice:
        """The page's fields as ctx.launch_choice (arguments as the script gets them, before {ds_config})."""
        script_args = self._split_args()[0]
        return LaunchChoice(script=self.script.text(), script_args=script_args or [], cwd=self._cwd(),
                            python=self.interpreter.python(), launcher=self._launcher_choice(),
                            nproc=self.nproc.value() or None, env=self.env.env())

    def _split_args(self) -> tuple[list[str] | None, str | None]:
        try:
            return shlex.split(self.args.text()), None
        except ValueError as exc:
            return None, f"Arguments: {exc} (close the quote, or escape it with \\)"

    def _cwd(self) -> str:
        if self.cwd.text():
            return str(Path(self.cwd.text()).expanduser())
        script = self.script.text()
        return str(Path(script).expanduser().parent) if script and Path(script).expanduser().is_absolute() else ""

    def request(self) -> LaunchRequest:
        """What `traindeck run` would be given for these choices (the preset copied: the worker reads it while
        Configure may edit the draft)."""
        choice = self.choice()
        preset = copy.deepcopy(self.ctx.draft.preset)
        return LaunchRequest(script=str(Path(choice.script).expanduser()) if choice.script else "",
                             script_args=choice.script_args, preset=preset,
                             launcher=cast("Launcher | None", choice.launcher or None),  # build_plan names a wrong one
                             nproc=choice.nproc, python=choice.python or None,
                             cwd=Path(choice.cwd) if choice.cwd else None,
                             env=dict(choice.env) | ({STOP_ON_NAN_ENV: "1"} if self.stop_on_nan.isChecked() else {}),
                             gpus=self._gpus_for_preview(), hostfile=self.hosts.hostfile(), ssh_port=self.hosts.port())

    def _gpus_for_preview(self) -> tuple[int, ...] | None:
        """The chosen GPUs; for `any:N`, the ones free now (the launch asks NVML again when it starts)."""
        from traindeck.backend.queue import parse_gpus

        text = self.gpu_picker.gpus_text()
        try:
            request = parse_gpus(text) if text else None
        except ValueError:
            return None
        if request is None:
            return None
        free = self.gpu_picker.free_now()
        return request.ids or (tuple(free[: request.count]) if len(free) >= request.count else None)

    def run_name(self) -> str:
        return self.name.text().strip() or (Path(self.script.text()).stem if self.script.text() else "")

    # ============================================================================================ reacting
    def _fields_changed(self) -> None:
        if self._loading:
            return
        self._recheck()
        self.ctx.set_launch_choice(self.choice())
        self._save_timer.start()
        if self.sender() in (self.nproc, self.env) and self.model_size.text():
            self._check_timer.start()

    def _recheck(self) -> None:
        """The field checks, the argv shown, and a new preview (after a field or the draft preset changed)."""
        args, problem = self._split_args()
        problems = ([problem] if problem else []) + self.env.problems()
        if not self.script.text():
            problems.insert(0, "Script: choose the training script")
        preset = self.ctx.draft.preset
        self.sweep.update_summary(args or [], preset is not None, self.run_name() or "run")
        problems += [p for p in (self.gpu_picker.problem(), self.sweep.error) if p]
        self.hosts.setVisible((self._launcher_choice() or (preset.launcher if preset else "python")) == "deepspeed")
        problems += self.hosts.launch_problems()
        if self.hosts.active and self.sweep.active:  # queued runs carry no hostfile (backend/queue/entries.py)
            problems.append("Several machines: a sweep queues runs on this machine only; clear the sweep or untick "
                            "Several machines")
        if self.hosts.active and self.gpu_picker.gpus_text():  # --include localhost:... is not one of the hosts
            problems.append("Several machines: each host runs on its slots; clear the GPU choice")
        # With a hostfile, DeepSpeed starts each host's slots; a number here caps the processes on every host.
        self.nproc.setSpecialValueText("each host's slots" if self.hosts.active else
                                       f"preset's ({preset.process_count() if preset else 1})")
        self._field_problems = problems
        self.args_note.set_items([("error", problem)] if problem else [])
        self.env_problems.set_items([("error", p) for p in self.env.problems()])
        if args is not None:
            note = f"   ({DS_CONFIG_PLACEHOLDER} becomes this run's ds_config.json)" if any(
                DS_CONFIG_PLACEHOLDER in a for a in args) else ""
            self.argv_label.setText(argv_html(args, self) + html.escape(note) if args
                                    else "The script gets no arguments")
        self.plan = None
        self._preview_timer.start()
        self._update_launch_button()

    def _draft_changed(self) -> None:
        preset = self.ctx.draft.preset
        launcher = self._launcher_choice()
        self.launcher.blockSignals(True)
        self.launcher.clear()
        self.launcher.addItem(f"preset's ({preset.launcher})" if preset else "python (no preset)", "")
        for name in LAUNCHERS:
            self.launcher.addItem(name, name)
        self._set_launcher(launcher)
        self.launcher.blockSignals(False)
        self._show_draft_state()
        self._recheck()  # the choice itself is unchanged: no launch_choice_changed for Configure to react to
        if self.model_size.text():
            self._check_timer.start()

    def _show_draft_state(self) -> None:
        draft, preset = self.ctx.draft, self.ctx.draft.preset
        if preset is None:
            text = "No preset: the script runs with plain python. "
        else:
            name = draft.saved_as or preset.name
            text = f"Preset: <b>{_escape(name)}</b> ({_escape(preset.launcher)}, {processes_text(preset.process_count())})"
            if draft.dirty:
                text += " <i>with unsaved changes</i>"
            text += " "
        link = self.palette().color(QPalette.ColorRole.Link).name()
        self.preset_label.setText(text + f'&nbsp;&nbsp;<a href="configure" style="color:{link}">Edit it on the '
                                  'Configure page</a>')
        errors = draft.errors()
        shown = [("error", f"{m.path}: {m.message}" if m.path else m.message) for m in errors[:12]]
        if len(errors) > 12:
            shown.append(("error", f"and {len(errors) - 12} more"))
        self.draft_errors.set_items(
            shown, heading="The preset has errors: fix these on the Configure page" if errors else "")
        self._update_launch_button()

    # ============================================================================================ preview
    def _refresh_preview(self) -> None:
        if not self.script.text() or self._split_args()[0] is None:
            self._previews.invalidate()
            self._show_plan(None)
            return
        # Only the newest preview's answer is shown, and none once the page is gone (bound methods: the lane drops
        # an answer whose page was deleted; a lambda here reached a closed page's deleted widgets).
        self._previews.run(_preview, self.request(), self._environment(), done=self._show_plan,
                           failed=self.command_box.show_failure)

    def _environment(self) -> TrainingEnvironment | None:
        return self.interpreter.environment

    def _show_plan(self, plan: LaunchPlan | None) -> None:
        self.plan = plan
        self.command_box.show_plan(plan, self.env.env())
        self._update_launch_button()

    # ============================================================================================ memory
    @property
    def memory(self) -> LaunchMemoryCheck | None:
        """The latest memory check for the current inputs."""
        return self.memory_box.memory

    def _check_inputs(self) -> tuple[Preset | None, int | None, dict[str, str]]:
        return self.ctx.draft.preset, self.nproc.value() or None, self.env.env()

    def _run_memory_check(self) -> None:
        self.memory_box.run_memory_check()

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == event.Type.PaletteChange and hasattr(self, "result"):
            # The theme changed: rich text keeps the colours it was laid out with, so lay it out again once the
            # children have the new palette too.
            QTimer.singleShot(0, self._recolour)

    def _recolour(self) -> None:
        self._show_draft_state()
        self._show_result()

    # ============================================================================================ hooks
    def page_shown(self) -> None:
        self._preview_timer.start()  # a fixed port may have been taken meanwhile
        self.gpu_picker.refresh()  # who is on which GPU changes while the page is away
        focus = QApplication.focusWidget()
        if focus is None or not self.isAncestorOf(focus):
            # Keys typed after Ctrl+2 go to this page (Enter launches, Tab walks the fields), not the page list.
            (self.launch_button if self.launch_button.isEnabled() else self.script).setFocus(
                Qt.FocusReason.ShortcutFocusReason)

    def load_demo(self) -> None:
        self.fill_demo()
        self.model_size.setText(DEMO_MODEL_SIZE)
        self._check_timer.stop()
        self._run_memory_check()
        self._preview_timer.stop()
        self._refresh_preview()

    def shutdown(self) -> None:
        for timer in (self._preview_timer, self._check_timer):
            timer.stop()
        if self._save_timer.isActive():
            self._save_timer.stop()
            self._save_settings()


# Worker-side functions: the backend modules they use (run store, psutil, the estimator) are imported on the worker
# thread the first time, so their import time never stalls the UI.
def _preview(request: LaunchRequest, environment: TrainingEnvironment | None) -> LaunchPlan:
    from traindeck.backend.launch import preview_plan

    return preview_plan(request, environment)


def _int(value: object) -> int:
    try:
        return max(0, int(str(value)))
    except ValueError:
        return 0


def _escape(text: str) -> str:
    return html.escape(text)


PAGE = LaunchPage
