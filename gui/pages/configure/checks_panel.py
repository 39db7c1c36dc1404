"""The Configure page's checks, as one panel: the draft's messages (checked a moment after typing pauses), the
"Check with DeepSpeed/accelerate" button and what those tools said, and the preview of the files and the command a
launch will use. Checks and previews run on ctx.tasks, each in a lane: an answer about an older draft is dropped.

The list holds one set of findings: the draft's messages and what the launch plan refuses or notes (the same
lines the Command tab shows as "# error:" / "# warning:" / "# note:"; what this machine cannot run of a valid
preset is a warning, as `config check` says it), so the list never says "No problems found" above a command
that cannot run. What the tools said stays in view only for the preset they were asked about."""

from __future__ import annotations

import copy

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from traindeck.backend.config import Message
from traindeck.backend.launch import (
    ACCELERATE_CONFIG,
    DS_CONFIG,
    FREE_PORT,
    RUN_ID,
    LaunchPreview,
    preview_launch,
)
from traindeck.backend.presets import Preset, native_preset_verdicts, validate_preset
from traindeck.gui.context import AppContext
from traindeck.gui.pages.configure.preset_dialogs import report_error
from traindeck.gui.widgets.config_preview import ConfigPreview
from traindeck.gui.widgets.findings_list import FindingsList

CHECK_DELAY_MS = 150  # typing pauses this long before the preset is checked
PLAN_PATH = "launch"  # the path of the launch plan's findings in the list (a click shows the Command tab)


class ChecksPanel(QWidget):
    """What is wrong with ctx.draft and what a launch of it writes and runs.

    `schedule()` asks for a check after the pause; `check_due` then asks the page for the form's own input errors,
    which it passes to `check()`. Messages come back through ctx.draft (set_messages), which the page shows here
    with `show_messages` and beside the fields."""

    check_due = Signal()  # typing paused: the page answers with check(the editor's input errors)
    jump = Signal(str)  # a message's setting path, clicked in the list: show that setting

    def __init__(self, ctx: AppContext):
        super().__init__()
        self.ctx = ctx
        # Answers about an older draft are dropped by the lanes: checks and previews deliver only the newest
        # answer, and `_changes` tells whether the draft changed while a DeepSpeed/accelerate check ran.
        self._checks = ctx.tasks.lane()
        self._previews = ctx.tasks.lane()
        self._changes = ctx.tasks.lane()
        self.findings = FindingsList()
        self.findings.jump.connect(self._picked)
        self._messages: list[Message] = []  # the draft's messages, as last shown
        self._plan: list[Message] = []  # what the launch plan of the last preview refuses (error) or notes (note)
        self._awaiting = False  # a check of the draft is asked for and its messages have not come back
        self.native_button = QPushButton("Check with DeepSpeed/accelerate")
        self.native_button.setToolTip("Ask DeepSpeed's and accelerate's own parsers about this preset, in the "
                                      "training interpreter (a few seconds: they import torch)")
        self.native_button.clicked.connect(self.check_natively)
        # What the tools said, kept in view (a status-bar line vanishes after seconds), naming the tools asked.
        self.native_result = QLabel()
        self.native_result.setWordWrap(True)
        self.native_result.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.native_result.hide()
        self.preview = ConfigPreview((ACCELERATE_CONFIG, DS_CONFIG))

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        head = QHBoxLayout()
        head.addWidget(self.findings.header, 1)
        head.addWidget(self.native_button)
        layout.addLayout(head)
        layout.addWidget(self.native_result)
        layout.addWidget(self.findings)  # as tall as its messages: the preview gets the rest
        layout.addWidget(self.preview, 1)

        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(CHECK_DELAY_MS)
        self._timer.timeout.connect(self.check_due)
        ctx.launch_choice_changed.connect(self.schedule)  # nproc feeds the batch checks; the preview follows

    def stop(self) -> None:
        """No check pending any more (the page closes, or checks at once)."""
        self._timer.stop()

    # ------------------------------------------------------------------------------------------------ checks

    def schedule(self) -> None:
        """The draft changed: answers about it so far are stale, and a check follows the pause."""
        self._checks.invalidate()
        self._changes.invalidate()
        self._awaiting = True
        self.findings.set_pending(True)
        self._timer.start()

    def check(self, typed: list[Message]) -> None:
        """Check the draft now, `typed` (text the form could not take as a value) among its messages."""
        preset = self.ctx.draft.preset
        if preset is None:
            self._awaiting = False
            return
        snapshot = copy.deepcopy(preset)  # the editor goes on changing the original while this runs

        def done(messages: list[Message]) -> None:
            self.ctx.draft.set_messages(typed + list(messages))

        def failed(error: str) -> None:
            self.ctx.draft.set_messages(typed + [Message("error", "", f"the checks could not run: {error}")])

        self._checks.run(validate_preset, snapshot, world_size=self.ctx.launch_choice.nproc,
                         script=self.ctx.launch_choice.script or None, done=done, failed=failed)
        self._start_preview(snapshot)

    def show_messages(self, messages: list[Message], not_applied: list[Message] | None) -> None:
        """The draft's messages in the list (with the launch plan's); `not_applied`: typed values the preview does
        not hold (None: no form)."""
        if not_applied is not None:
            self.preview.set_not_applied([f"{m.path}: {m.message}" for m in not_applied])
        self._messages = list(messages)
        self._awaiting = False
        self._render()

    def _render(self) -> None:
        pending = self._timer.isActive() or self._awaiting
        self.findings.set_messages(list(dict.fromkeys(self._messages + self._plan)), pending=pending)

    def clear_messages(self) -> None:
        """Another preset is the draft: the list holds no message until its check comes back, and what the tools
        said about the previous one is gone."""
        self._messages, self._plan = [], []
        self.findings.set_messages([])
        self.forget_native()

    def forget_native(self) -> None:
        """The preset the tools were asked about is not the draft any more (another was loaded, or it was edited)."""
        self.native_result.clear()
        self.native_result.hide()

    def _picked(self, path: str) -> None:
        if path == PLAN_PATH:  # the launch plan's finding: the command it is about
            self.preview.show_tab(self.preview.COMMAND)
        else:
            self.jump.emit(path)

    def check_natively(self) -> None:
        preset = self.ctx.draft.preset
        if preset is None:
            return
        edit = self._changes.ticket
        self.native_button.setEnabled(False)
        self.native_button.setText("Checking…")

        def finish() -> None:
            self.native_button.setEnabled(True)
            self.native_button.setText("Check with DeepSpeed/accelerate")

        def done(messages: list[Message]) -> None:
            finish()
            if not self._changes.current(edit):
                self.ctx.status.emit("The preset changed during the DeepSpeed/accelerate check: run it again")
                return
            self.ctx.draft.set_messages(list(dict.fromkeys(self.ctx.draft.messages + messages)))
            errors = sum(1 for m in messages if m.severity == "error")
            self.show_native_result(asked, messages)
            self.ctx.status.emit(f"DeepSpeed/accelerate: {errors} problem(s)" if messages else
                                 "DeepSpeed/accelerate accept this preset")

        def failed(error: str) -> None:
            finish()
            self.native_result.hide()
            report_error(self, self.ctx, "The DeepSpeed/accelerate check could not run", error)

        asked = [tool for tool, used in (("DeepSpeed (ds_config.json)", preset.deepspeed is not None),
                                         ("accelerate (accelerate_config.yaml)",
                                          preset.accelerate is not None and preset.launcher == "accelerate"))
                 if used]

        self.ctx.tasks.run(native_preset_verdicts, copy.deepcopy(preset), self.ctx.launch_choice.python or None,
                           done=done, failed=failed)

    def show_native_result(self, asked: list[str], messages: list[Message]) -> None:
        """Which tools were asked and what each said, under the button (the messages are also in the list)."""
        if not asked:
            text = "Neither tool applies to this preset (no DeepSpeed config, not launched with accelerate)."
        elif not messages:
            text = "✔ " + " and ".join(asked) + " accept this preset as it is."
        else:
            said = "\n".join(f"• {m.severity}: {m.path}: {m.message}" for m in messages[:8])
            more = f"\n… and {len(messages) - 8} more in the list below" if len(messages) > 8 else ""
            text = f"{' and '.join(asked)} said:\n{said}{more}"
        self.native_result.setText(text)
        self.native_result.setToolTip("Asked in a subprocess of the training interpreter, with the files exactly "
                                      "as a launch writes them")
        self.native_result.show()

    # ------------------------------------------------------------------------------------------------ preview

    def _start_preview(self, snapshot: Preset) -> None:
        choice = self.ctx.launch_choice

        def failed(error: str) -> None:
            self.preview.set_text(self.preview.COMMAND, f"# the command cannot be built: {error}", "")
            self._plan = [Message("error", PLAN_PATH, f"the command cannot be built: {error}")]
            self._render()

        self._previews.run(preview_launch, snapshot, script=choice.script, script_args=list(choice.script_args),
                           cwd=choice.cwd or None, python=choice.python or None, nproc=choice.nproc,
                           launcher=getattr(choice, "launcher", "") or None, env=dict(choice.env), entry=choice.entry,
                           done=self._show_preview, failed=failed)

    def _show_preview(self, result: LaunchPreview) -> None:
        self.preview.set_text(ACCELERATE_CONFIG, result.files.get(ACCELERATE_CONFIG))
        self.preview.set_text(DS_CONFIG, result.files.get(DS_CONFIG))
        lines = [f"# working directory: {result.cwd}"]
        if not self.ctx.launch_choice.script:
            lines.append("# no script chosen on the Launch page yet: train.py stands for it")
        lines.append(f"# {RUN_ID} and {FREE_PORT} are decided when the run starts")
        if result.env:
            lines.append("# environment: " + " ".join(f"{k}={v}" for k, v in result.env.items()))
        lines += [f"# error: {e}" for e in result.errors] + [f"# warning: {m}" for m in result.machine] + \
            [f"# note: {w}" for w in result.warnings]
        self.preview.set_text(self.preview.COMMAND, "\n".join(lines) + "\n\n" + result.command, result.command)
        # What this machine cannot run of a valid preset is a warning here, as `config check` says it; the Launch
        # page refuses the launch itself.
        self._plan = [Message("error", PLAN_PATH, e) for e in result.errors] + \
            [Message("warning", PLAN_PATH, m) for m in result.machine] + \
            [Message("note", PLAN_PATH, w) for w in result.warnings]
        self._render()
