"""Launch: the script, its arguments, where and with what it runs, the command it becomes, a memory check, and the
Launch button (Ctrl+Enter).

The page assembles panels and wires them: the preset line (preset_panel), the inputs (script_panel), the memory
check (memory_panel), the shared GPU, sweep, alert and hostfile widgets, the command preview (command_panel) and the
launch bar (launch_bar), which launches. It only gathers choices: the plan comes from backend.runs.launch
(build_plan with the same LaunchRequest `traindeck run` builds), the memory check from backend.estimate.prelaunch,
the interpreter's packages from backend.launch.probe, all on ctx.tasks. Secrets typed here reach the run through the
supervisor's pipe only.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, cast

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QApplication, QFrame, QGridLayout, QScrollArea, QVBoxLayout, QWidget

from traindeck.backend.core import resources_dir
from traindeck.backend.launch import DS_CONFIG_PLACEHOLDER, LaunchRequest
from traindeck.backend.runs import STEP_TIMING_ENV, STOP_ON_NAN_ENV
from traindeck.gui.context import AppContext, LaunchChoice
from traindeck.gui.pages.base import Page
from traindeck.gui.pages.launch.command_panel import CommandBox
from traindeck.gui.pages.launch.launch_bar import LaunchBar, LaunchOrder
from traindeck.gui.pages.launch.memory_panel import MemoryCheckBox
from traindeck.gui.pages.launch.preset_panel import PresetBanner
from traindeck.gui.pages.launch.script_panel import EnvBox, RunnerBox, ScriptBox
from traindeck.gui.widgets.alert_settings import AlertSettings
from traindeck.gui.widgets.gpu_picker import GpuPicker
from traindeck.gui.widgets.hostfile_editor import HostfileEditor
from traindeck.gui.widgets.sweep_editor import SweepEditor

if TYPE_CHECKING:
    from traindeck.backend.launch import Entry, Launcher, TrainingEnvironment
    from traindeck.backend.presets import Preset

DEMO_SCRIPT = "demo/train_tiny.py"  # under resources_dir()
# The cpu-demo preset's DeepSpeed config is handed to the script; 4 samples per rank match its micro batch, and
# 0.2 s per step makes the run last long enough to watch (about half a minute after DeepSpeed starts).
DEMO_ARGS = "--steps 100 --batch-size 4 --step-time 0.2 --log-every 5"
DEMO_DS_ARGS = f"--deepspeed_config {DS_CONFIG_PLACEHOLDER} "  # first, when the preset has a DeepSpeed config
DEMO_MODEL_SIZE = "1.5B"
_S = "launch/"  # QSettings group


def demo_script() -> str:
    return str(resources_dir() / DEMO_SCRIPT)


def demo_args(preset: Preset | None) -> str:
    """The demo's arguments under `preset`: its DeepSpeed config handed to the script where the preset has one (the
    run writes a ds_config.json to put in place of the placeholder), else none (accelerate's own engine, or plain
    python)."""
    return (DEMO_DS_ARGS if preset is not None and preset.uses_deepspeed() else "") + DEMO_ARGS


class LaunchPage(Page):
    key = "launch"
    title = "Launch"
    order = 20

    def __init__(self, ctx: AppContext):
        super().__init__(ctx)
        self._loading = True
        self._build()
        self._preview_timer = self._timer(150, self._refresh_preview)
        self._save_timer = self._timer(400, self._save_settings)
        ctx.draft.changed.connect(self._draft_changed)
        ctx.draft.validated.connect(self.launch_bar.refresh)
        # Estimate's "Use this": the model goes with the preset it handed over, and is cleared with it.
        ctx.model_chosen.connect(lambda text, shape: self.memory_box.use_model(text, shape, self._preset_name()))
        ctx.model_dropped.connect(lambda text: self.memory_box.drop_carried(text, self._preset_name()))
        self.memory_box.carried_cleared.connect(ctx.drop_chosen_model)
        # The last launch's line is about the preset, script and entry mode it was launched with: another ends it.
        ctx.draft.replaced.connect(self.launch_bar.choices_changed)
        self.script_box.script.textChanged.connect(self.launch_bar.choices_changed)
        self.script_box.entry.currentIndexChanged.connect(lambda _i: self.launch_bar.choices_changed())
        # The default run name is numbered as the launch numbers it: the names runs have are read again when the
        # page is shown and after each launch or queueing from here.
        ctx.run_started.connect(lambda _run_id: self.read_run_names())
        self.launch_bar.queued.connect(self.read_run_names)
        self._restore()
        self._loading = False
        self._draft_changed()
        self._fields_changed()  # publishes the restored choice as ctx.launch_choice
        if ctx.chosen_model is not None:  # Estimate's "Use this" came before this page was built
            self.memory_box.use_model(*ctx.chosen_model, self._preset_name())
        self.runner.interpreter.probe()

    # ============================================================================================ building
    def _timer(self, ms: int, slot: Callable[[], None]) -> QTimer:
        timer = QTimer(self, singleShot=True, interval=ms)
        timer.timeout.connect(slot)
        return timer

    def _build(self) -> None:
        ctx = self.ctx
        self.banner = PresetBanner(ctx)
        self.script_box = ScriptBox(ctx.settings)
        self.runner = RunnerBox(ctx.tasks, ctx.settings)
        self.env_box = EnvBox(ctx.settings)
        self.memory_box = MemoryCheckBox(ctx.tasks, ctx.settings, self._check_inputs)
        # Unattended runs: which GPUs, a sweep, what to watch and whom to tell.
        self.gpu_picker = GpuPicker(ctx.tasks)
        self.sweep = SweepEditor()
        self.alert_settings = AlertSettings(ctx.tasks)
        # Several machines: a hostfile, shown for the deepspeed launcher only.
        self.hosts = HostfileEditor(ctx.tasks, ctx.settings, lambda: (self.request(), self._environment()),
                                    self.choice)
        self.command_box = CommandBox(ctx.tasks, self.env_box.run_env)
        self.launch_bar = LaunchBar(ctx, self._order, self.command_box, self.memory_box, self.sweep, self.hosts)

        content = QWidget()
        outer = QVBoxLayout(content)
        outer.addWidget(self.banner)
        columns = QGridLayout()
        columns.setColumnStretch(0, 1)
        columns.setColumnStretch(1, 1)
        outer.addLayout(columns)
        columns.addWidget(self.script_box, 0, 0)
        columns.addWidget(self.runner, 1, 0)
        columns.addWidget(self.env_box, 0, 1)
        columns.addWidget(self.memory_box, 1, 1)
        columns.addWidget(self.hosts, 2, 0, 1, 2)
        columns.addWidget(self.gpu_picker, 3, 0)
        columns.addWidget(self.sweep, 3, 1)
        columns.addWidget(self.alert_settings, 4, 0, 1, 2)
        outer.addWidget(self.command_box)
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
        layout.addWidget(self.launch_bar)

        for sequence in ("Ctrl+Return", "Ctrl+Enter"):
            shortcut = QShortcut(QKeySequence(sequence), self)
            # The whole window, not only where a field has focus: right after Ctrl+2 the focus is still on the
            # navigation list. _shortcut_launch checks that this page is the one shown.
            shortcut.setContext(Qt.ShortcutContext.WindowShortcut)
            shortcut.activated.connect(self._shortcut_launch)
        for sequence in ("Ctrl+Shift+Return", "Ctrl+Shift+Enter"):
            shortcut = QShortcut(QKeySequence(sequence), self)
            shortcut.setContext(Qt.ShortcutContext.WindowShortcut)
            shortcut.activated.connect(lambda: self.launch_bar.launch(queue=True) if self.isVisible() else None)

        self.command_box.copied.connect(lambda: self.ctx.status.emit("Command copied"))
        self.memory_box.edited.connect(lambda: self._save_timer.start())
        self.launch_bar.replan.connect(lambda: self._preview_timer.start())
        self.runner.probed.connect(lambda _env: self._preview_timer.start())
        for signal in (self.script_box.changed, self.runner.changed, self.gpu_picker.changed, self.sweep.changed,
                       self.alert_settings.stop_on_nan.toggled, self.alert_settings.step_timing.toggled,
                       self.hosts.changed):
            signal.connect(self._fields_changed)
        for signal in (self.runner.processes_changed, self.env_box.changed):
            signal.connect(self._memory_inputs_changed)

    # ============================================================================================ choices
    def _restore(self) -> None:
        self.hosts.restore()
        if self.ctx.demo or not self.ctx.settings.value(_S + "script"):
            self.fill_demo()
            return
        self.script_box.restore()
        self.runner.restore()
        self.memory_box.restore()
        self._restore_unattended()
        self.env_box.restore()

    def fill_demo(self) -> None:
        """The CPU demo: train_tiny.py with arguments for the cpu-demo preset, so one click runs on any machine.
        The table is emptied: what the demo's run needs (DS_ACCELERATOR=cpu) is the cpu-demo preset's own env, so
        nothing demo-specific reaches the table or the saved settings."""
        self.script_box.fill(demo_script(), demo_args(self.ctx.draft.preset))
        self.runner.fill()
        self.env_box.env.set_env({})

    def _save_settings(self) -> None:
        s = self.ctx.settings
        self.script_box.save_settings()
        self.runner.save_settings()
        self.memory_box.save_settings()
        self.env_box.save_settings()
        s.setValue(_S + "gpus", self.gpu_picker.gpus_text())
        s.setValue(_S + "sweep", json.dumps(self.sweep.axes()))
        s.setValue(_S + "stop_on_nan", self.alert_settings.stop_on_nan.isChecked())
        s.setValue(_S + "step_timing", self.alert_settings.step_timing.isChecked())
        self.hosts.save_settings()

    def _restore_unattended(self) -> None:
        s = self.ctx.settings
        self.gpu_picker.set_gpus_text(str(s.value(_S + "gpus", "") or ""))
        try:
            self.sweep.set_axes([str(a) for a in json.loads(str(s.value(_S + "sweep", "[]")))])
        except (ValueError, TypeError):
            self.sweep.set_axes([])
        self.alert_settings.stop_on_nan.setChecked(str(s.value(_S + "stop_on_nan", "false")).lower() == "true")
        self.alert_settings.step_timing.setChecked(str(s.value(_S + "step_timing", "true")).lower() == "true")

    def choice(self) -> LaunchChoice:
        """The page's fields as ctx.launch_choice (arguments as the script gets them, before {ds_config})."""
        script_args = self.script_box.split_args()[0]
        return LaunchChoice(script=self.script_box.target(), script_args=script_args or [],
                            entry=self.script_box.entry_choice(),
                            cwd=self.script_box.working_dir(), python=self.runner.interpreter.python(),
                            launcher=self.runner.launcher_choice(), nproc=self.runner.processes(),
                            env=self.env_box.env.env())

    def request(self) -> LaunchRequest:
        """What `traindeck run` would be given for these choices (the preset copied: the worker reads it while
        Configure may edit the draft)."""
        choice = self.choice()
        preset = copy.deepcopy(self.ctx.draft.preset)
        switches = ({STOP_ON_NAN_ENV: "1"} if self.alert_settings.stop_on_nan.isChecked() else {}) | (
            {} if self.alert_settings.step_timing.isChecked() else {STEP_TIMING_ENV: "0"})
        script = str(Path(choice.script).expanduser()) if choice.script and choice.entry == "script" else choice.script
        return LaunchRequest(script=script, script_args=choice.script_args, preset=preset,
                             entry=cast("Entry", choice.entry),
                             launcher=cast("Launcher | None", choice.launcher or None),  # build_plan names a wrong one
                             nproc=choice.nproc, python=choice.python or None,
                             cwd=Path(choice.cwd) if choice.cwd else None,
                             env=dict(choice.env) | switches,
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
        """The run's name: the one typed, or the script's name then the preset's (`train_tiny-cpu-demo`)."""
        return self.script_box.run_name(self._preset_name())

    def _preset_name(self) -> str | None:
        draft = self.ctx.draft
        return (draft.saved_as or draft.preset.name) if draft.preset is not None else None

    def _order(self) -> LaunchOrder:
        # An empty name field: the run gets the default name where it is recorded, numbered there when a run of
        # the store has it already (the field shows it unnumbered).
        return LaunchOrder(request=self.request(), name=self.script_box.name.text().strip(),
                           trial_name=self.script_box.run_name(numbered=False),
                           environment=self._environment(),
                           gpus_text=self.gpu_picker.gpus_text(), gpu_library=self.gpu_picker.gpu_library_factory)

    def _environment(self) -> TrainingEnvironment | None:
        return self.runner.interpreter.environment

    def _check_inputs(self) -> tuple[Preset | None, int | None, dict[str, str]]:
        return self.ctx.draft.preset, self.runner.processes(), self.env_box.run_env()

    # ============================================================================================ reacting
    def _fields_changed(self) -> None:
        if self._loading:
            return
        self._recheck()
        self.ctx.set_launch_choice(self.choice())
        self._save_timer.start()

    def _memory_inputs_changed(self) -> None:
        self._fields_changed()
        if not self._loading:
            self.memory_box.inputs_changed()

    def _recheck(self) -> None:
        """The field checks, the argv shown, and a new preview (after a field or the draft preset changed)."""
        args = self.script_box.split_args()[0]
        problems = self.script_box.check() + self.env_box.check()
        preset = self.ctx.draft.preset
        self.script_box.show_default_name(self._preset_name())
        self.sweep.update_summary(args or [], preset, self.run_name() or "run")
        problems += [p for p in (self.gpu_picker.problem(), self.sweep.error) if p]
        launcher = self.runner.launcher_choice() or (preset.launcher if preset else "python")
        self.hosts.setVisible(launcher == "deepspeed")
        problems += self.hosts.launch_problems()
        if self.hosts.active and self.sweep.active:  # queued runs carry no hostfile (backend/queue/entries.py)
            problems.append("Several machines: a sweep queues runs on this machine only; clear the sweep or untick "
                            "Several machines")
        if self.hosts.active and self.gpu_picker.gpus_text():  # --include localhost:... is not one of the hosts
            problems.append("Several machines: each host runs on its slots; clear the GPU choice")
        self.runner.show_default_processes(preset, self.hosts.active)
        self.command_box.mark_stale()
        self._preview_timer.start()
        self.launch_bar.set_field_problems(problems)

    def _draft_changed(self) -> None:
        box = self.script_box
        if box.script.text() == demo_script() and box.args.text() in (DEMO_DS_ARGS + DEMO_ARGS, DEMO_ARGS):
            box.args.setText(demo_args(self.ctx.draft.preset))  # the demo's, not typed: they follow the preset
        self.env_box.set_preset(self.ctx.draft.preset)
        self.runner.offer_launchers(self.ctx.draft.preset)
        self.launch_bar.refresh()
        self._recheck()  # the choice itself is unchanged: no launch_choice_changed for Configure to react to
        self.memory_box.inputs_changed()

    # ============================================================================================ preview
    def _refresh_preview(self) -> None:
        if not self.script_box.script.text() or self.script_box.split_args()[0] is None:
            self.command_box.clear()
        else:
            self.command_box.preview(self.request(), self._environment())

    # ============================================================================================ hooks
    def launch(self, queue: bool = False) -> None:
        """What Ctrl+Enter (or, with `queue`, Ctrl+Shift+Enter) does: the launch bar's Launch (or Queue)."""
        self.launch_bar.launch(queue=queue)

    def _shortcut_launch(self) -> None:
        if self.isVisible():
            self.launch_bar.launch()

    def read_run_names(self) -> None:
        """Read the names the runs have (on the pool); the default name and the sweep's names follow."""
        def names() -> set[str]:
            from traindeck.backend.runs import RunStore

            with RunStore() as store:
                return store.run_names()

        def done(taken: set[str]) -> None:
            if taken != self.script_box.taken:
                self.script_box.taken = taken
                self._recheck()

        self.ctx.tasks.run(names, done=done, failed=lambda _error: None)  # unread: the names go unnumbered

    def page_shown(self) -> None:
        self.read_run_names()
        self._preview_timer.start()  # a fixed port may have been taken meanwhile
        self.gpu_picker.refresh()  # who is on which GPU changes while the page is away
        focus = QApplication.focusWidget()
        if focus is None or not self.isAncestorOf(focus):
            # Keys typed after Ctrl+2 go to this page (Enter launches, Tab walks the fields), not the page list.
            button = self.launch_bar.launch_button
            (button if button.isEnabled() else self.script_box.script).setFocus(Qt.FocusReason.ShortcutFocusReason)

    def load_demo(self) -> None:
        self.fill_demo()
        self.memory_box.model_size.setText(DEMO_MODEL_SIZE)
        self.memory_box.check_timer.stop()
        self.memory_box.run_memory_check()
        self._preview_timer.stop()
        self._refresh_preview()

    def shutdown(self) -> None:
        for timer in (self._preview_timer, self.memory_box.check_timer):
            timer.stop()
        if self._save_timer.isActive():
            self._save_timer.stop()
            self._save_settings()


PAGE = LaunchPage
