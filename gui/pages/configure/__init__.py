"""Configure: choose, edit and keep presets (launcher + accelerate config + DeepSpeed config), checked as you type,
with the files and the command a launch will use previewed.

The page edits `ctx.draft.preset` in place (PresetEditor) and marks every edit; checks, previews and writes run on
ctx.tasks (validate_preset costs ~5-15 ms a call, saving fsyncs), and a result that arrives after a newer edit is
dropped. Presets are read, written, renamed, imported and exported only through traindeck.backend.presets.

Split along its seam: the file actions (new, save, rename, delete, import, export, open, paste) and their dialogs
are in configure_files.py; this module builds the page and keeps checks and previews going.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QAction, QKeySequence, QPaintEvent
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QSplitter,
    QStyle,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.config import Message
from traindeck.backend.launch import (
    ACCELERATE_CONFIG,
    DS_CONFIG,
    FREE_PORT,
    RUN_ID,
    LaunchPreview,
    preview_launch,
)
from traindeck.backend.presets import (
    BUILTIN_NAMES,
    Preset,
    PresetError,
    list_presets,
    load_preset,
    native_preset_verdicts,
    save_preset,
    validate_preset,
)
from traindeck.gui.context import DEFAULT_PRESET, AppContext
from traindeck.gui.pages.configure.file_actions import SETTINGS_KEY, PresetFileActions, preset_content
from traindeck.gui.widgets.config_preview import ConfigPreview
from traindeck.gui.widgets.findings_list import FindingsList
from traindeck.gui.widgets.preset_list import PresetList

if TYPE_CHECKING:
    from traindeck.gui.widgets.preset_editor import PresetEditor

CHECK_DELAY_MS = 150  # typing pauses this long before the preset is checked


class ConfigurePage(PresetFileActions):
    key = "configure"
    title = "Configure"
    order = 10

    def __init__(self, ctx: AppContext):
        super().__init__(ctx)
        self._own = 0  # > 0 while this page changes the draft itself (its signals then need no refresh)
        # Answers about an older draft are dropped by the lanes: checks and previews deliver only the newest
        # answer, and `_changes` tells whether the draft changed while a DeepSpeed/accelerate check ran.
        self._checks = ctx.tasks.lane()
        self._previews = ctx.tasks.lane()
        self._changes = ctx.tasks.lane()
        self._edits = 0  # edits so far: a save tells whether the user went on typing while it was written
        self._demo_edits: int | None = None  # the demo's deliberate error is not "unsaved work"
        # The preset's content as loaded or last saved: an edit that puts every value back is no change (quitting
        # asked to save a built-in preset whose one edited value had been put back).
        self._clean = preset_content(ctx.draft.preset)
        self._user_names: list[str] = []  # the user's preset names, from the last listing

        self.presets = PresetList()
        self.presets.chosen.connect(self._choose)
        # The forms (two config schemas, ~2,500 widgets) are built right after the window's first paint, not
        # before it: see ensure_built.
        self.editor: PresetEditor | None = None
        self._building = QLabel("Preparing the config forms…")
        self._building.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.title_label = QLabel()
        self.title_label.setObjectName("presetTitle")
        self.title_label.setTextFormat(Qt.TextFormat.RichText)
        self.title_label.setWordWrap(True)
        self.findings = FindingsList()
        self.findings.jump.connect(self.jump_to)
        self.native_button = QPushButton("Check with DeepSpeed/accelerate")
        self.native_button.setToolTip("Ask DeepSpeed's and accelerate's own parsers about this preset, in the "
                                      "training interpreter (a few seconds: they import torch)")
        self.native_button.clicked.connect(self.check_natively)
        # What the tools said, kept in view (a status-bar line vanished after seconds, and "accept" said nothing
        # about which tool had been asked).
        self.native_result = QLabel()
        self.native_result.setWordWrap(True)
        self.native_result.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.native_result.hide()
        self.preview = ConfigPreview((ACCELERATE_CONFIG, DS_CONFIG))

        self._build_actions()
        self._build_layout()

        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(CHECK_DELAY_MS)
        self._timer.timeout.connect(self._check)

        draft = ctx.draft
        draft.changed.connect(self._draft_changed)
        draft.replaced.connect(self._draft_replaced)
        draft.validated.connect(self._show_messages)
        ctx.launch_choice_changed.connect(self._schedule_check)  # nproc feeds the batch checks; the preview follows
        self._update_title()
        self.refresh_presets()
        self._build_scheduled = False

    def paintEvent(self, event: QPaintEvent) -> None:
        super().paintEvent(event)
        if self.editor is None and not self._build_scheduled:
            # First paint done (the window is up): build the forms in the next turn of the event loop.
            self._build_scheduled = True
            QTimer.singleShot(0, self.ensure_built)

    def ensure_built(self) -> PresetEditor:
        """The editor, built now if it is not yet (the schemas' import and the forms take a few hundred ms)."""
        if self.editor is not None:
            return self.editor
        from traindeck.backend.presets import blank_preset
        from traindeck.gui.widgets.preset_editor import PresetEditor

        editor = PresetEditor()
        editor.edited.connect(self._edited)
        editor.input_rejected.connect(self._schedule_check)
        self._middle_layout.replaceWidget(self._building, editor)
        self._building.deleteLater()
        self.editor = editor
        if self.ctx.draft.preset is None:  # app start could not load one
            with self._owning():
                self.ctx.draft.replace(blank_preset(), None)
        else:
            self._draft_replaced()
        return editor

    # ------------------------------------------------------------------------------------------------ building

    def _build_actions(self) -> None:
        style = self.style()
        icon = style.standardIcon
        pix = QStyle.StandardPixmap

        def action(text: str, slot: Callable[[], None], shortcut: str | None = None, tip: str = "",
                   icon_name: QStyle.StandardPixmap | None = None) -> QAction:
            act = QAction(text, self)
            if icon_name is not None:
                act.setIcon(icon(icon_name))
            if shortcut:
                act.setShortcut(QKeySequence(shortcut))
            # Window-wide, but only while this page is the one shown (Qt ignores shortcuts of hidden widgets).
            act.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
            act.setToolTip(f"{tip} ({shortcut})" if shortcut else tip)
            act.triggered.connect(lambda _checked=False: slot())
            self.addAction(act)
            return act

        self.action_new = action("New", self.new_preset, "Ctrl+N", "Start a new preset", pix.SP_FileIcon)
        self.action_save = action("Save", self.save, "Ctrl+S", "Save the changes (a built-in is saved as a copy)",
                                  pix.SP_DialogSaveButton)
        self.action_save_as = action("Save As…", self.save_as, "Ctrl+Shift+S", "Save under a new name")
        self.action_rename = action("Rename…", self.rename, "F2", "Rename this preset (your presets only)")
        self.action_delete = action("Delete", self.delete, None, "Delete this preset (your presets only)",
                                    pix.SP_TrashIcon)
        self.action_import = action("Import…", self.import_files, None,
                                    "Make a preset from an accelerate YAML and/or a DeepSpeed JSON",
                                    pix.SP_DialogOpenButton)
        self.action_export = action("Export…", self.export, None,
                                    "Write accelerate_config.yaml / ds_config.json into a folder")
        self.action_open = action("Open config…", self.open_config, "Ctrl+O",
                                  "Open an accelerate YAML or DeepSpeed JSON as a new unsaved preset (repair offered)")
        self.action_paste = action("Paste config", self.paste_config, "Ctrl+Shift+V",
                                   "Load the config in the clipboard as a new unsaved preset (repair offered)")

    def _build_layout(self) -> None:
        toolbar = QToolBar()
        toolbar.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        for act in (self.action_new, self.action_save, self.action_save_as, self.action_rename, self.action_delete):
            toolbar.addAction(act)
        toolbar.addSeparator()
        for act in (self.action_import, self.action_export):
            toolbar.addAction(act)
        toolbar.addSeparator()
        for act in (self.action_open, self.action_paste):
            toolbar.addAction(act)

        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.addWidget(QLabel("<b>Presets</b>"))
        left_layout.addWidget(self.presets, 1)

        middle = QWidget()
        middle_layout = QVBoxLayout(middle)
        middle_layout.setContentsMargins(4, 0, 4, 0)
        middle_layout.addWidget(self.title_label)
        middle_layout.addWidget(self._building, 1)
        self._middle_layout = middle_layout

        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        head = QHBoxLayout()
        head.addWidget(self.findings.header, 1)
        head.addWidget(self.native_button)
        right_layout.addLayout(head)
        right_layout.addWidget(self.native_result)
        right_layout.addWidget(self.findings)  # as tall as its messages: the preview gets the rest
        right_layout.addWidget(self.preview, 1)

        split = QSplitter()
        split.addWidget(left)
        split.addWidget(middle)
        split.addWidget(right)
        split.setStretchFactor(0, 0)
        split.setStretchFactor(1, 3)
        split.setStretchFactor(2, 2)
        split.setSizes([170, 520, 440])
        split.setChildrenCollapsible(False)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 2, 6, 6)
        layout.addWidget(toolbar)
        layout.addWidget(split, 1)

    # ------------------------------------------------------------------------------------------------ Page hooks

    def page_shown(self) -> None:
        self.refresh_presets()  # presets made from the command line meanwhile

    def load_demo(self) -> None:
        """The CPU demo preset with a deliberately invalid value in a copy (never saved), so a message shows."""
        try:
            preset = load_preset(DEFAULT_PRESET)
        except PresetError:
            return
        editor = self.ensure_built()
        demo = copy.deepcopy(preset)
        if demo.deepspeed is not None:
            demo.deepspeed["train_micro_batch_size_per_gpu"] = 0  # must be > 0: an inline error
        with self._owning():
            self.ctx.draft.replace(demo, DEFAULT_PRESET)
            self._edits += 1
            self.ctx.draft.mark_edited()
        self._demo_edits = self._edits
        self._update_title()
        editor.tabs.setCurrentWidget(editor.section_tabs["deepspeed"])
        self._timer.stop()
        self._check()

    def confirm_close(self) -> bool:
        if not self._has_unsaved_work():
            return True
        answer = self._ask_unsaved()
        if answer == QMessageBox.StandardButton.Discard:
            return True
        if answer != QMessageBox.StandardButton.Save:
            return False
        name = self._save_target(save_as=False)
        if name is None:
            return False
        try:  # the window is closing: written now, not on the pool
            path = save_preset(self._copy_named(name), overwrite=True)
        except (PresetError, OSError) as exc:
            self._error("The preset was not saved", str(exc))
            return False
        self._saved(name, path, self._edits, self.ctx.draft.preset, None)
        return True

    def shutdown(self) -> None:
        self._timer.stop()

    # ------------------------------------------------------------------------------------------------ the draft

    @contextlib.contextmanager
    def _owning(self) -> Iterator[None]:
        self._own += 1
        try:
            yield
        finally:
            self._own -= 1

    def _edited(self) -> None:
        """The user changed the preset in the editor."""
        self._edits += 1
        with self._owning():
            self.ctx.draft.mark_edited()
            if preset_content(self.ctx.draft.preset) == self._clean:
                self.ctx.draft.dirty = False
                self.ctx.draft.changed.emit()
        self._update_title()
        self._schedule_check()

    def _draft_changed(self) -> None:
        if self._own or self.editor is None:  # not built yet: it shows the draft as it is when it is
            return
        # Changed by another page (or code): show its values and check them.
        self.editor.refresh()
        self._update_title()
        self._schedule_check()

    def _draft_replaced(self) -> None:
        draft = self.ctx.draft
        if draft.preset is None:
            return
        self._demo_edits = None
        self._clean = preset_content(draft.preset)
        self.presets.select(draft.saved_as)
        if draft.saved_as:
            self.ctx.settings.setValue(SETTINGS_KEY, draft.saved_as)
        self._update_title()
        if self.editor is None:  # ensure_built shows it
            return
        self.editor.set_preset(draft.preset)
        self.findings.set_messages([])
        self._schedule_check()

    def _has_unsaved_work(self) -> bool:
        draft = self.ctx.draft
        return draft.preset is not None and draft.dirty and self._demo_edits != self._edits

    def _update_title(self) -> None:
        draft = self.ctx.draft
        preset = draft.preset
        if preset is None:
            return
        name = draft.saved_as or preset.name
        parts = [f"<b>{_html(name)}</b>"]
        if self._is_builtin(draft.saved_as):
            parts.append("built-in, read-only: Save makes a copy")
        elif draft.saved_as is None:
            parts.append("not saved yet")
        if draft.dirty:
            parts.append("<i>unsaved changes</i>")
        self.title_label.setText(" · ".join(parts))
        user_preset = bool(draft.saved_as) and not self._is_builtin(draft.saved_as)
        self.action_rename.setEnabled(user_preset)
        self.action_delete.setEnabled(user_preset)
        self.action_export.setEnabled(preset.accelerate is not None or preset.deepspeed is not None)

    def _is_builtin(self, name: str | None) -> bool:
        return bool(name) and str(name).lower() in {b.lower() for b in BUILTIN_NAMES}

    # ------------------------------------------------------------------------------------------------ checks

    def _schedule_check(self) -> None:
        self._checks.invalidate()
        self._changes.invalidate()
        self.findings.set_pending(True)
        self._timer.start()

    def _check(self) -> None:
        preset = self.ctx.draft.preset
        if preset is None or self.editor is None:
            return
        snapshot = copy.deepcopy(preset)  # the editor goes on changing the original while this runs
        typed = self.editor.input_errors()

        def done(messages: list[Message]) -> None:
            self.ctx.draft.set_messages(typed + list(messages))

        def failed(error: str) -> None:
            self.ctx.draft.set_messages(typed + [Message("error", "", f"the checks could not run: {error}")])

        self._checks.run(validate_preset, snapshot, world_size=self.ctx.launch_choice.nproc,
                           script=self.ctx.launch_choice.script or None, done=done, failed=failed)
        self._start_preview(snapshot)

    def _show_messages(self) -> None:
        messages = self.ctx.draft.messages
        if self.editor is not None:
            self.editor.show_messages(messages)
            self.preview.set_not_applied([f"{m.path}: {m.message}" for m in self.editor.input_errors()])
        self.findings.set_messages(messages, pending=self._timer.isActive())

    def jump_to(self, path: str) -> None:
        """Show the setting a message is about (from the message list)."""
        if self.ensure_built().locate(path) is None and path:
            self.ctx.status.emit(f"{path}: not a setting the form shows (edit it in the file, or remove it)")

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
            self._error("The DeepSpeed/accelerate check could not run", error)

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

    def _start_preview(self, snapshot: Preset | None = None) -> None:
        preset = snapshot if snapshot is not None else self.ctx.draft.preset
        if preset is None:
            return
        if snapshot is None:
            preset = copy.deepcopy(preset)
        choice = self.ctx.launch_choice

        def failed(error: str) -> None:
            self.preview.set_text(self.preview.COMMAND, f"# the command cannot be built: {error}", "")

        self._previews.run(preview_launch, preset, script=choice.script, script_args=list(choice.script_args),
                           cwd=choice.cwd or None, python=choice.python or None, nproc=choice.nproc,
                           launcher=getattr(choice, "launcher", "") or None, env=dict(choice.env),
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
        lines += [f"# error: {e}" for e in result.errors] + [f"# note: {w}" for w in result.warnings]
        self.preview.set_text(self.preview.COMMAND, "\n".join(lines) + "\n\n" + result.command, result.command)

    # ------------------------------------------------------------------------------------------------ presets

    def refresh_presets(self, then: Callable[[], None] | None = None) -> None:
        def listing() -> tuple[list[Preset], list[str]]:
            problems: list[str] = []
            return list_presets(problems), problems

        def done(result: tuple[list[Preset], list[str]]) -> None:
            presets, problems = result
            self._user_names = [p.name for p in presets if not p.builtin]
            self.presets.set_presets(presets, problems)
            self.presets.select(self.ctx.draft.saved_as)
            if then is not None:
                then()

        self.ctx.tasks.run(listing, done=done, failed=lambda e: self.ctx.status.emit(f"Cannot list presets: {e}"))

    def _choose(self, name: str) -> None:
        """A preset picked in the list: load it (asking first about unsaved changes)."""
        self.presets.select(self.ctx.draft.saved_as)  # stays on the current one until it is really loaded

        def load() -> None:
            self.load_named(name)

        self._guard(load)


def _html(text: str) -> str:
    import html

    return html.escape(text)


PAGE = ConfigurePage
