"""The Launch page's inputs: what runs (a script file, a module or a command, its working directory, the run's name,
its arguments), how it runs (the launcher, the process count, the interpreter) and the environment variables it
gets. Each box checks, remembers (QSettings "launch/...") and says its own fields; `changed` tells the page that a
choice changed.
"""

from __future__ import annotations

import html
import json
import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QEvent, QSettings, Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.launch import DS_CONFIG_PLACEHOLDER, LAUNCHERS, default_run_name
from traindeck.gui.pages.launch.command_panel import argv_html
from traindeck.gui.widgets.env_table import EnvTable
from traindeck.gui.widgets.interpreter_picker import InterpreterPicker
from traindeck.gui.widgets.message_list import MessageList
from traindeck.gui.widgets.path_field import PathField

if TYPE_CHECKING:
    from traindeck.backend.presets import Preset
    from traindeck.gui.tasks import Tasks

_S = "launch/"  # QSettings group
CPU_ACCELERATOR = ("DS_ACCELERATOR", "cpu")  # DeepSpeed on the CPU: what the cpu-demo preset sets
# What runs (LaunchRequest.entry): label, the field's placeholder, the field's tooltip, the field's name in problems.
ENTRY_CHOICES = {
    "script": ("Script file", "train.py", "The Python file the launcher runs in every process", "Script"),
    "module": ("Module (-m)", "axolotl.cli.train", "A module run as `python -m MODULE` in every process (under a "
               "launcher: its --module), found by the training interpreter", "Module"),
    "command": ("Command", "llamafactory-cli train config.yaml", "A command on PATH (a console script or an "
                "executable) and its first arguments, run as it is (under a launcher: its --no_python)", "Command"),
}
ENTRY_TIP = ("What runs: a script file (train.py), a module as with `python -m` (axolotl.cli.train), or a command on "
             "PATH with its arguments (llamafactory-cli train config.yaml)")


class ScriptBox(QGroupBox):
    """What runs: a script file, a module (`-m`) or a command (the choice beside the field), where it starts, the
    run's name and its arguments. A command's field may hold its first arguments too (`llamafactory-cli train x.yaml`):
    they go before the Arguments line's."""

    changed = Signal()

    def __init__(self, settings: QSettings) -> None:
        super().__init__("Training script")
        self._settings = settings
        what_column = QVBoxLayout(self)
        form = QFormLayout()
        what_column.addLayout(form)
        what_column.addStretch(1)  # the box is as tall as the environment beside it: rows stay together at the top
        self.entry = QComboBox()
        for key, (label, *_rest) in ENTRY_CHOICES.items():
            self.entry.addItem(label, key)
        self.entry.setToolTip(ENTRY_TIP)
        self.entry.setAccessibleName("What runs")
        self.script = PathField("file", caption="Choose the training script", name_filter="Python (*.py);;All (*)",
                                placeholder="train.py")
        self.script.setToolTip(ENTRY_CHOICES["script"][2])
        self.script.start_dir = lambda: str(settings.value(_S + "last_dir", "") or "")
        target_row = QWidget()  # the choice beside the field it explains, first in the Tab order
        target_layout = QHBoxLayout(target_row)
        target_layout.setContentsMargins(0, 0, 0, 0)
        target_layout.addWidget(self.entry)
        target_layout.addWidget(self.script, 1)
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
        self.taken: set[str] = set()  # the names runs have already: a default name among them gets -N, as launched
        self.name.setPlaceholderText("the script's name, then the preset's")
        self.name.setToolTip("A name for the run in Runs and History")
        form.addRow("Runs", target_row)
        form.addRow("Working directory", self.cwd)
        form.addRow("Run name", self.name)
        form.addRow("Arguments", self.args)
        below_args = QWidget()  # one row: a hidden note must not leave an empty form row behind
        below = QVBoxLayout(below_args)
        below.setContentsMargins(0, 0, 0, 0)
        below.setSpacing(2)
        below.addWidget(self.argv_label)
        below.addWidget(self.args_note)
        # Last: a wrapped label's height is worked out for a narrower width than it gets, and its spare lines would
        # open a gap between the arguments and the fields below them.
        form.addRow("", below_args)
        for signal in (self.script.textChanged, self.args.textChanged, self.cwd.textChanged, self.name.textChanged):
            signal.connect(self.changed)
        self.entry.currentIndexChanged.connect(self._entry_changed)
        self.script.picked.connect(lambda path: settings.setValue(_S + "last_dir", str(Path(path).parent)))

    def entry_choice(self) -> str:
        """What the field names: "script", "module" or "command" (LaunchRequest.entry)."""
        return str(self.entry.currentData() or "script")

    def set_entry(self, entry: str) -> None:
        self.entry.setCurrentIndex(max(0, self.entry.findData(entry)))

    def _entry_changed(self) -> None:
        """The field, its button and the placeholders say what the choice runs."""
        entry = self.entry_choice()
        _label, placeholder, tip, _name = ENTRY_CHOICES[entry]
        self.script.line.setPlaceholderText(placeholder)
        self.script.setToolTip(tip)
        self.script.button.setVisible(entry == "script")  # a module or a command is not a file to browse for
        self.cwd.line.setPlaceholderText("the script's folder" if entry == "script" else
                                         "this window's working directory")
        self._name_placeholder()
        self.changed.emit()

    def _name_placeholder(self) -> None:
        self.name.setPlaceholderText({"script": "the script's name", "module": "the module's last part"}.get(
            self.entry_choice(), "the command's name") + ", then the preset's")

    def _field_words(self) -> tuple[list[str] | None, str | None]:
        """A command's field split into the command and its first arguments; a script or module field as it is."""
        text = self.script.text()
        if self.entry_choice() != "command":
            return [text] if text else [], None
        try:
            return shlex.split(text), None
        except ValueError as exc:
            return None, f"Command: {exc} (close the quote, or escape it with \\)"

    def target(self) -> str:
        """The script file, the module, or the command (its first word)."""
        words = self._field_words()[0]
        return words[0] if words else ""

    def split_args(self) -> tuple[list[str] | None, str | None]:
        """The arguments as the script (module, command) gets them, a command's own words first, or None and why
        the line cannot be split."""
        words, problem = self._field_words()
        if words is None:
            return None, problem
        try:
            return words[1:] + shlex.split(self.args.text()), None
        except ValueError as exc:
            return None, f"Arguments: {exc} (close the quote, or escape it with \\)"

    def working_dir(self) -> str:
        """The working directory chosen, or else the script's folder (when its path is absolute); for a module or
        a command, this window's working directory, so a queued run starts where its preview said."""
        if self.cwd.text():
            return str(Path(self.cwd.text()).expanduser())
        if self.entry_choice() != "script":
            return os.getcwd()
        script = self.script.text()
        return str(Path(script).expanduser().parent) if script and Path(script).expanduser().is_absolute() else ""

    def run_name(self, preset: str | None = None, numbered: bool = True) -> str:
        """The name typed, or else the default one: the script's (module's, command's) name, then `-PRESET` when
        the run uses a preset, then `-N` when runs have that name already (`numbered`), as the launch names it."""
        target = self.target()
        taken = self.taken if numbered else set()
        return self.name.text().strip() or (default_run_name(target, self.entry_choice(), preset, taken)
                                            if target else "")

    def show_default_name(self, preset: str | None) -> None:
        """The empty name field shows the name the run will get (`train_tiny-cpu-demo`, `train_tiny-cpu-demo-2`)."""
        target = self.target()
        if target:
            self.name.setPlaceholderText(default_run_name(target, self.entry_choice(), preset, self.taken))
        else:
            self._name_placeholder()

    def check(self) -> list[str]:
        """The fields' problems (said beside them), and the arguments shown as the script gets them."""
        args, problem = self.split_args()
        missing = {"script": "Script: choose the training script", "module": "Module: name the module (pkg.train)",
                   "command": "Command: name the command (on PATH, or a path to an executable)"}
        problems = ([missing[self.entry_choice()]] if not self.script.text() else []) + (
            [problem] if problem else [])
        self.args_note.set_items([("error", problem)] if problem else [])
        if args is not None:
            note = f"   ({DS_CONFIG_PLACEHOLDER} becomes this run's ds_config.json)" if any(
                DS_CONFIG_PLACEHOLDER in a for a in args) else ""
            who = ENTRY_CHOICES[self.entry_choice()][3].lower()
            self.argv_label.setText(argv_html(args, self, who) + html.escape(note) if args
                                    else f"The {who} gets no arguments")
        return problems

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and hasattr(self, "argv_label"):
            self.check()  # the argument frames carry the theme's colour: drawn again for the new one

    def fill(self, script: str, args: str) -> None:
        """A fresh choice: this script and these arguments, started in the script's folder, named after it."""
        self.set_entry("script")
        self.script.setText(script)
        self.args.setText(args)
        self.args.setCursorPosition(0)  # the start of a long line says more than its end
        self.cwd.setText("")
        self.name.setText("")

    def restore(self) -> None:
        s = self._settings
        self.set_entry(str(s.value(_S + "entry", "script") or "script"))
        self.script.setText(str(s.value(_S + "script", "")))
        self.args.setText(str(s.value(_S + "args", "")))
        self.args.setCursorPosition(0)
        self.cwd.setText(str(s.value(_S + "cwd", "")))

    def save_settings(self) -> None:
        self._settings.setValue(_S + "entry", self.entry_choice())
        self._settings.setValue(_S + "script", self.script.text())
        self._settings.setValue(_S + "args", self.args.text())
        self._settings.setValue(_S + "cwd", self.cwd.text())


class RunnerBox(QGroupBox):
    """How it runs: the launcher (the preset's, or another for this launch), the processes and the interpreter."""

    changed = Signal()  # the launcher or the interpreter changed
    processes_changed = Signal()  # the process count changed (the memory check depends on it)
    probed = Signal(object)  # the interpreter's TrainingEnvironment arrived

    def __init__(self, tasks: Tasks, settings: QSettings) -> None:
        super().__init__("Launcher and interpreter")
        self._settings = settings
        form = QFormLayout(self)
        self.launcher = QComboBox()
        self.launcher.setToolTip("accelerate launch, the deepspeed runner, or plain python (torchrun for several "
                                 "processes). The preset chooses one; a different one here applies to this launch.")
        self.nproc = QSpinBox()
        self.nproc.setRange(0, 4096)
        self.nproc.setToolTip("Processes (ranks) on this machine: usually one per GPU")
        self.interpreter = InterpreterPicker(tasks)
        form.addRow("Launcher", self.launcher)
        form.addRow("Processes", self.nproc)
        form.addRow("Interpreter", self.interpreter)
        self.launcher.currentIndexChanged.connect(self.changed)
        self.nproc.valueChanged.connect(self.processes_changed)
        self.interpreter.changed.connect(self.changed)
        self.interpreter.probed.connect(self.probed)

    def launcher_choice(self) -> str:
        """The launcher chosen here, "" for the preset's."""
        return str(self.launcher.currentData() or "")

    def set_launcher(self, launcher: str) -> None:
        index = self.launcher.findData(launcher)
        self.launcher.setCurrentIndex(max(0, index))

    def offer_launchers(self, preset: Preset | None) -> None:
        """The launchers offered for this preset, the one chosen kept (no `changed`: the choice is the same)."""
        launcher = self.launcher_choice()
        self.launcher.blockSignals(True)
        self.launcher.clear()
        self.launcher.addItem(f"preset's ({preset.launcher})" if preset else "python (no preset)", "")
        for name in LAUNCHERS:
            self.launcher.addItem(name, name)
        self.set_launcher(launcher)
        self.launcher.blockSignals(False)

    def processes(self) -> int | None:
        """The process count chosen, None for the preset's."""
        return self.nproc.value() or None

    def show_default_processes(self, preset: Preset | None, several_hosts: bool) -> None:
        # With a hostfile, DeepSpeed starts each host's slots; a number here caps the processes on every host.
        self.nproc.setSpecialValueText("each host's slots" if several_hosts else
                                       f"preset's ({preset.process_count() if preset else 1})")

    def fill(self) -> None:
        """The defaults: the dashboard's interpreter, the preset's launcher and process count."""
        self.interpreter.set_python("")
        self.set_launcher("")
        self.nproc.setValue(0)

    def restore(self) -> None:
        s = self._settings
        self.interpreter.set_python(str(s.value(_S + "python", "")))
        self.set_launcher(str(s.value(_S + "launcher", "")))
        self.nproc.setValue(_int(s.value(_S + "nproc", 0)))

    def save_settings(self) -> None:
        self._settings.setValue(_S + "python", self.interpreter.python())
        self._settings.setValue(_S + "launcher", self.launcher_choice())
        self._settings.setValue(_S + "nproc", self.nproc.value())


class EnvBox(QGroupBox):
    """The environment variables added to the run's; secret values are masked and never saved. Below the table,
    read-only, the variables the preset sets itself (its `env`): they belong to the preset, so they are never
    written into the table or the settings, and the table's own value wins on a clash."""

    changed = Signal()

    def __init__(self, settings: QSettings) -> None:
        super().__init__("Environment variables")
        self._settings = settings
        self._preset: Preset | None = None
        env_layout = QVBoxLayout(self)
        self.env = EnvTable()
        self.env.setMinimumHeight(110)
        self.env_note = QLabel("Added to the environment the run inherits. Values of names like *_TOKEN, *_KEY or "
                               "*PASSWORD* are hidden and never saved.")
        self.env_note.setWordWrap(True)
        self.preset_env = QLabel()
        self.preset_env.setTextFormat(Qt.TextFormat.PlainText)
        self.preset_env.setWordWrap(True)
        self.preset_env.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.preset_env.hide()
        self.env_problems = MessageList()
        env_layout.addWidget(self.env, 1)
        env_layout.addWidget(self.preset_env)
        env_layout.addWidget(self.env_note)
        env_layout.addWidget(self.env_problems)
        self.env.changed.connect(self.changed)
        self.env.changed.connect(self._show_preset_env)

    def set_preset(self, preset: Preset | None) -> None:
        """The preset the run uses: its variables are shown beside the table."""
        self._preset = preset
        self._show_preset_env()

    def run_env(self) -> dict[str, str]:
        """What the run adds to the inherited environment: the preset's variables, then the table's over them."""
        return {**(self._preset.env if self._preset is not None else {}), **self.env.env()}

    def _show_preset_env(self) -> None:
        from traindeck.backend.launch import masked_env

        preset_env = dict(self._preset.env) if self._preset is not None else {}
        table = self.env.env()
        lines = []
        if preset_env:
            shown = masked_env(preset_env)
            lines.append("Also set, from the preset: " + ", ".join(
                f"{name}={shown[name]}" + (" (the table's value is used)" if name in table else "")
                for name in preset_env))
        # A CPU accelerator left in the table (the demo used to put it there) runs a GPU preset on the CPU.
        if table.get(CPU_ACCELERATOR[0]) == CPU_ACCELERATOR[1] and preset_env.get(CPU_ACCELERATOR[0]) is None \
                and self._preset is not None and self._preset.uses_deepspeed():
            lines.append(f"{'='.join(CPU_ACCELERATOR)} in the table runs DeepSpeed on the CPU, not the GPUs: "
                         "remove it for a GPU run")
        self.preset_env.setText("\n".join(lines))
        self.preset_env.setVisible(bool(lines))

    def check(self) -> list[str]:
        """The table's problems, said below it."""
        problems = self.env.problems()
        self.env_problems.set_items([("error", p) for p in problems])
        return problems

    def restore(self) -> None:
        try:
            rows = json.loads(str(self._settings.value(_S + "env", "[]")))
            self.env.set_env({str(n): str(v) for n, v in rows})
        except (ValueError, TypeError):
            self.env.set_env({})

    def save_settings(self) -> None:
        # Secret values never reach the settings file: savable() keeps only their names.
        self._settings.setValue(_S + "env", json.dumps(self.env.savable()))


def _int(value: object) -> int:
    try:
        return max(0, int(str(value)))
    except ValueError:
        return 0
