"""What the pages share: the thread pool, the preset being edited, and signals to hand work to one another.

Pages never import each other: Configure edits `ctx.draft`, Launch launches it and emits `run_started`, the main
window shows the Runs page, which opens the run. That keeps each page testable alone.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QObject, QSettings, Signal

from traindeck.backend.config import Message
from traindeck.backend.presets import Preset
from traindeck.gui.tasks import Tasks

DEFAULT_PRESET = "cpu-demo"  # runs on any machine: what a newcomer's first click should start


class Draft(QObject):
    """The preset being edited: its content, the name it was loaded from or saved as, unsaved changes, and its
    latest validation messages. Configure writes it; Launch reads it and refuses to launch while it has errors."""

    changed = Signal()  # content edited or replaced (listeners re-read .preset)
    replaced = Signal()  # a different preset was loaded (forms rebuild)
    validated = Signal()  # .messages were updated

    def __init__(self, preset: Preset | None = None, parent: QObject | None = None):
        super().__init__(parent)
        self.preset: Preset | None = preset
        self.saved_as: str | None = preset.name if preset is not None else None
        self.dirty = False
        self.messages: list[Message] = []

    def replace(self, preset: Preset, saved_as: str | None) -> None:
        self.preset, self.saved_as, self.dirty, self.messages = preset, saved_as, False, []
        self.replaced.emit()
        self.changed.emit()

    def mark_edited(self) -> None:
        self.dirty = True
        self.changed.emit()

    def mark_saved(self, name: str) -> None:
        self.saved_as, self.dirty = name, False
        self.changed.emit()

    def set_messages(self, messages: list[Message]) -> None:
        self.messages = list(messages)
        self.validated.emit()

    def errors(self) -> list[Message]:
        return [m for m in self.messages if m.severity == "error"]


@dataclass
class LaunchChoice:
    """What the Launch page has chosen besides the preset: read by previews elsewhere (Configure's command tab)."""

    script: str = ""  # the script file, or with `entry` the module or the command
    script_args: list[str] = field(default_factory=list)
    entry: str = "script"  # "script" | "module" | "command" (LaunchRequest.entry)
    cwd: str = ""
    python: str = ""  # empty: the interpreter traindeck runs in
    launcher: str = ""  # empty: the preset's launcher
    nproc: int | None = None
    env: dict[str, str] = field(default_factory=dict)  # extra variables (secrets included: never written out)


class AppContext(QObject):
    navigate = Signal(str)  # a page key: show that page
    run_started = Signal(str)  # a run id, just launched from this window
    open_run = Signal(str)  # a run id to show in the run view (from History, reattach, the CLI's runs)
    status = Signal(str)  # a short message for the status bar
    launch_choice_changed = Signal()  # ctx.launch_choice was edited on the Launch page
    model_chosen = Signal(str, object)  # Estimate's "Use this": the model as text and its ModelShape, for Launch
    model_dropped = Signal(str)  # the model Estimate handed over (its text) no longer goes with the draft's preset

    def __init__(self, *, demo: bool = False, settings: QSettings | None = None, parent: QObject | None = None):
        super().__init__(parent)
        self.demo = demo
        self.tasks = Tasks(self)
        self.draft = Draft(parent=self)
        self.launch_choice = LaunchChoice()
        self.chosen_model: tuple[str, Any] | None = None  # the last model_chosen, for a Launch page built later
        self.chosen_model_preset: Preset | None = None  # the preset Estimate handed over with chosen_model
        self.settings = settings if settings is not None else QSettings()
        self.draft.replaced.connect(self._draft_replaced)

    def choose_model(self, text: str, shape: Any) -> None:
        """Estimate's "Use this": the model for Launch's memory check (kept for a Launch page not built yet). It
        goes with the preset in the draft now, the one Estimate handed over: loading another preset drops it."""
        self.chosen_model, self.chosen_model_preset = (text, shape), self.draft.preset
        self.model_chosen.emit(text, shape)

    def drop_chosen_model(self) -> None:
        """The model from Estimate no longer applies (another preset, or the user cleared it): model_dropped."""
        if self.chosen_model is not None:
            text = self.chosen_model[0]
            self.chosen_model = self.chosen_model_preset = None
            self.model_dropped.emit(text)

    def _draft_replaced(self) -> None:
        # Edits change the preset in place; a replace loads another one, which the model was not estimated for.
        if self.chosen_model is not None and self.draft.preset is not self.chosen_model_preset:
            self.drop_chosen_model()

    def set_launch_choice(self, choice: LaunchChoice | None = None, **changes: Any) -> None:
        """Publish the Launch page's choice (whole, or these fields changed) and tell the pages that read it:
        nobody has to remember to emit launch_choice_changed after assigning."""
        self.launch_choice = dataclasses.replace(choice if choice is not None else self.launch_choice, **changes)
        self.launch_choice_changed.emit()
