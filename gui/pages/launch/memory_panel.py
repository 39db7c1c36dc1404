"""The Launch page's memory check: a model size (or config.json) -> the preset's estimate set beside what is free.

The estimator runs on ctx.tasks (backend.estimate.prelaunch); the page asks for a check when its inputs change, and
the launch bar reads `memory` before launching: it is only ever the check shown, for the inputs as they are now.

A model size handed over by Estimate's "Use this" is said as such ("model: 1.3B from Estimate", with a link that
clears it) and is not saved as a typed one; the page drops it when another preset is loaded.
"""

from __future__ import annotations

import copy
import html
from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import QSettings, Qt, QTimer, Signal
from PySide6.QtWidgets import QGroupBox, QLabel, QVBoxLayout

from traindeck.gui.widgets.message_list import MessageList
from traindeck.gui.widgets.path_field import PathField

if TYPE_CHECKING:  # the estimator is imported when a check runs, not with the page
    from traindeck.backend.estimate import LaunchMemoryCheck, ModelShape
    from traindeck.backend.presets import Preset
    from traindeck.gui.tasks import Tasks

# What a check needs from the page, read on the UI thread: the preset, the process count, the extra environment.
CheckInputs = Callable[[], "tuple[Preset | None, int | None, dict[str, str]]"]
_S = "launch/"  # QSettings group


class MemoryCheckBox(QGroupBox):
    edited = Signal()  # the model size was edited (a choice worth saving)
    carried_cleared = Signal()  # the field no longer holds the model Estimate handed over (cleared or edited)

    def __init__(self, tasks: Tasks, settings: QSettings, inputs: CheckInputs):
        super().__init__("Memory check (optional)")
        self._tasks, self._settings, self._inputs = tasks, settings, inputs
        self.memory: LaunchMemoryCheck | None = None  # the latest check for the current inputs
        self._check_gen = 0
        self._shapes: dict[str, ModelShape] = {}  # model size text -> ModelShape (counting a config.json is slow)
        self.carried: str | None = None  # the model size in the field came from Estimate (not typed here)
        mem_layout = QVBoxLayout(self)
        self.model_size = PathField("file", caption="Choose a model's config.json", name_filter="JSON (*.json)",
                                    placeholder="model size: 1.5B, 350M, or a model's config.json")
        self.model_size.setToolTip("The parameter count of the model the script trains (or its Hugging Face "
                                   "config.json): the preset's strategy is estimated for it and compared with free "
                                   "GPU memory and available host RAM")
        self.memory_result = MessageList()
        # Where the model size came from, when not typed here, and a link that clears it.
        self.origin = QLabel()
        self.origin.setObjectName("modelOrigin")
        self.origin.setTextFormat(Qt.TextFormat.RichText)
        self.origin.setWordWrap(True)
        self.origin.linkActivated.connect(lambda _link: self.model_size.setText(""))
        self.origin.hide()
        mem_layout.addWidget(self.model_size)
        mem_layout.addWidget(self.origin)
        mem_layout.addWidget(self.memory_result)
        mem_layout.addStretch(1)
        self.check_timer = QTimer(self, singleShot=True, interval=500)
        self.check_timer.timeout.connect(self.run_memory_check)
        self.model_size.textChanged.connect(self._model_size_changed)

    def restore(self) -> None:
        self.model_size.setText(str(self._settings.value(_S + "model_size", "")))

    def save_settings(self) -> None:
        if self.carried is None:  # a size handed over by Estimate is not one the user typed for next time
            self._settings.setValue(_S + "model_size", self.model_size.text())

    def use_model(self, text: str, shape: ModelShape | None = None, preset_name: str | None = None) -> None:
        """The model chosen on Estimate ("Use this") with the preset `preset_name`: its text in the field, said as
        Estimate's, checked with `shape` (the estimate's own, with the hidden size, heads and vocabulary it was
        given) rather than one read again."""
        if shape is not None:
            self._shapes[text] = shape
        self.carried = text
        with_preset = f" with the preset {html.escape(preset_name)}" if preset_name else ""
        self._say_origin(f"model: <b>{html.escape(text)}</b> from Estimate{with_preset}. "
                         '<a href="clear">Clear it</a>')
        if self.model_size.text() == text:
            self.inputs_changed()  # the same model, perhaps under another preset: check again
        else:
            self.model_size.setText(text)

    def drop_carried(self, text: str, preset_name: str | None = None) -> None:
        """The model Estimate handed over (`text`) no longer goes with the preset (another one was loaded): the
        field is emptied, and the page says why."""
        if self.carried != text or self.model_size.text() != text:
            return
        self.carried = None
        self.model_size.setText("")
        now = f" ({html.escape(preset_name)})" if preset_name else ""
        self._say_origin(f"The model size from Estimate ({html.escape(text)}) was cleared: it was for the preset "
                         f"Estimate advised, not this one{now}. Type a size to check this preset.")

    def _say_origin(self, text: str) -> None:
        self.origin.setText(text)
        self.origin.setToolTip("Estimate's “Use this” gives the Launch page the advised preset and the model it was "
                               "estimated for; another preset clears the model")
        self.origin.show()

    def inputs_changed(self) -> None:
        """The preset, the process count or the environment changed: the check shown is no longer theirs, so it
        goes, and a new one follows shortly, when a size is given."""
        if self.model_size.text():
            self._check_gen += 1  # a check under way answers for the inputs before
            self.memory = None
            self.memory_result.set_items([("note", "estimating…")])
            self.check_timer.start()

    def check_for_run(self) -> LaunchMemoryCheck | None:
        """The check that goes with a run launched now (estimate.json): the latest one, when a size is given."""
        return self.memory if self.model_size.text().strip() else None

    def _model_size_changed(self) -> None:
        if self.carried is not None and self.model_size.text() != self.carried:
            self.carried = None  # cleared or typed over: the user's own size from now on
            self.carried_cleared.emit()
        if self.carried is None:
            self.origin.hide()  # drop_carried says why afterwards
        self.memory = None
        self._check_gen += 1
        if not self.model_size.text():
            self.memory_result.set_items([])
        else:
            self.check_timer.start()
        self.edited.emit()

    def run_memory_check(self) -> None:
        self._check_gen += 1
        preset, nproc, env = self._inputs()
        gen, text = self._check_gen, self.model_size.text()
        self.memory = None
        if not text or preset is None:
            self.memory_result.set_items([("note", "choose a preset to check its memory")] if text else [])
            return
        self.memory_result.set_items([("note", "estimating…")])
        # Everything the worker needs is read here: widgets belong to the UI thread.
        self._tasks.run(_memory_check, text, self._shapes.get(text), copy.deepcopy(preset), nproc, env,
                        done=lambda result: self._memory_done(gen, text, result),
                        failed=lambda error: self._memory_failed(gen, error))

    def _memory_done(self, gen: int, text: str, result: tuple[ModelShape, LaunchMemoryCheck]) -> None:
        if gen != self._check_gen:
            return
        shape, check = result
        self._shapes[text] = shape
        self.memory = check
        verdict = {"fits": ("ok", "fits in what is free now"), "tight": ("warning", "tight: close to what is free"),
                   "does not fit": ("error", "does not fit in what is free now"),
                   "unknown": ("warning", "could not be compared with this machine")}[check.verdict]
        from traindeck.backend.estimate import format_count

        items = [(verdict[0], f"{check.row.label} for {format_count(shape.total_params)} parameters: {verdict[1]}")]
        items += [("note", line) for line in check.lines()]
        # A warning about a resource that could not be compared repeats lines() ("no NVIDIA GPU found"): left out.
        severity = {"does not fit": "error", "tight": "warning", "fits": "note"}
        items += [(severity[v], w) for w in check.warnings if (v := check.verdict_of(w)) is not None]
        items.append(("note", "assumed: " + check.assumptions[0]))
        self.memory_result.set_items(items)
        self.memory_result.setToolTip("\n".join(check.assumptions))

    def _memory_failed(self, gen: int, error: str) -> None:
        if gen == self._check_gen:
            self.memory = None
            self.memory_result.set_items([("error", error.splitlines()[0] if error else "the estimate failed")])


# Worker-side: the estimator is imported on the worker thread the first time, so its import never stalls the UI.
def _memory_check(text: str, shape: ModelShape | None, preset: Preset, nproc: int | None, env: dict[str, str]
                  ) -> tuple[ModelShape, LaunchMemoryCheck]:
    from traindeck.backend.estimate import check_preset, read_model_size

    found = shape or read_model_size(text)
    return found, check_preset(preset, found, nproc, env=env)
