"""Configure: choose, edit and keep presets (launcher + accelerate config + DeepSpeed config), checked as you type,
with the files and the command a launch will use previewed.

The page edits `ctx.draft.preset` in place (PresetEditor) and marks every edit; checks, previews and writes run on
ctx.tasks (validate_preset costs ~5-15 ms a call, saving fsyncs), and a result that arrives after a newer edit is
dropped. Presets are read, written, renamed, imported and exported only through traindeck.backend.presets.

The page is an assembly: the preset list on the left, the editor in the middle (built after the window's first
paint), the checks panel on the right (checks_panel.py), and the preset files it holds (file_actions.py: new, save,
rename, delete, import, export, open, paste, with their dialogs) behind the toolbar's actions. The page and its
preset files share one DraftEdits (draft_edits.py): the edits counted and the content last loaded or saved.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QAction, QKeySequence, QPaintEvent
from PySide6.QtWidgets import QApplication, QLabel, QSplitter, QStyle, QToolBar, QVBoxLayout, QWidget

from traindeck.backend.presets import Preset, PresetError, load_preset
from traindeck.gui.context import DEFAULT_PRESET, AppContext
from traindeck.gui.pages.base import Page
from traindeck.gui.pages.configure.checks_panel import ChecksPanel
from traindeck.gui.pages.configure.draft_edits import DraftEdits, preset_content
from traindeck.gui.pages.configure.file_actions import SETTINGS_KEY, PresetFiles
from traindeck.gui.pages.configure.preset_dialogs import is_builtin
from traindeck.gui.widgets.preset_list import PresetList

if TYPE_CHECKING:
    from traindeck.gui.widgets.preset_editor import PresetEditor


class ConfigurePage(Page):
    key = "configure"
    title = "Configure"
    order = 10

    def __init__(self, ctx: AppContext):
        super().__init__(ctx)
        self.edits = DraftEdits(ctx.draft)
        self.files = PresetFiles(self, ctx, self.edits)
        self.files.listed.connect(self._listed)
        self.files.saved.connect(self._after_save)
        self.files.renamed.connect(self._update_title)
        self.files.loaded.connect(self._update_title)

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
        self.checks = ChecksPanel(ctx)
        self.checks.check_due.connect(self._check)
        self.checks.jump.connect(self.jump_to)

        self._build_actions()
        self._build_layout()

        draft = ctx.draft
        draft.changed.connect(self._draft_changed)
        draft.replaced.connect(self._draft_replaced)
        draft.validated.connect(self._show_messages)
        self._update_title()
        self.files.refresh()
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
        editor.input_rejected.connect(self.checks.schedule)
        self._middle_layout.replaceWidget(self._building, editor)
        self._building.deleteLater()
        self.editor = editor
        if self.ctx.draft.preset is None:  # app start could not load one
            with self.edits.owning():
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

        self.action_new = action("New", self.files.new_preset, "Ctrl+N", "Start a new preset", pix.SP_FileIcon)
        self.action_save = action("Save", self.files.save, "Ctrl+S", "Save the changes (a built-in is saved as a copy)",
                                  pix.SP_DialogSaveButton)
        self.action_save_as = action("Save As…", self.files.save_as, "Ctrl+Shift+S", "Save under a new name")
        self.action_rename = action("Rename…", self.files.rename, "F2", "Rename this preset (your presets only)")
        # Every action has a key: the toolbar is not in the Tab chain, so a key is the keyboard's only way to it.
        self.action_delete = action("Delete", self.files.delete, "Ctrl+Del", "Delete this preset (your presets only)",
                                    pix.SP_TrashIcon)
        self.action_import = action("Import…", self.files.import_files, "Ctrl+I",
                                    "Make a preset from an accelerate YAML and/or a DeepSpeed JSON, or an exported preset file",
                                    pix.SP_DialogOpenButton)
        self.action_export = action("Export…", self.files.export, "Ctrl+E",
                                    "Write accelerate_config.yaml / ds_config.json and the preset file into a folder")
        self.action_open = action("Open config…", self.files.open_config, "Ctrl+O",
                                  "Open an accelerate YAML or DeepSpeed JSON as a new unsaved preset (repair offered)")
        self.action_paste = action("Paste config", self.files.paste_config, "Ctrl+Shift+V",
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

        split = QSplitter()
        split.addWidget(left)
        split.addWidget(middle)
        split.addWidget(self.checks)
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
        self.files.refresh()  # presets made from the command line meanwhile
        focus = QApplication.focusWidget()
        if focus is None or not self.isAncestorOf(focus):
            # Keys after Ctrl+1 go to this page (the presets, then Tab to the forms), not the page list.
            self.presets.setFocus(Qt.FocusReason.ShortcutFocusReason)

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
        with self.edits.owning():
            self.ctx.draft.replace(demo, DEFAULT_PRESET)
            self.edits.count += 1
            self.ctx.draft.mark_edited()
        self.edits.demo_count = self.edits.count
        self._update_title()
        editor.tabs.setCurrentWidget(editor.section_tabs["deepspeed"])
        self.checks.stop()
        self._check()

    def confirm_close(self) -> bool:
        return self.files.confirm_close()

    def shutdown(self) -> None:
        self.checks.stop()

    # ------------------------------------------------------------------------------------------------ the draft

    def _edited(self) -> None:
        """The user changed the preset in the editor."""
        self.edits.count += 1
        with self.edits.owning():
            self.ctx.draft.mark_edited()
            if preset_content(self.ctx.draft.preset) == self.edits.clean:
                self.ctx.draft.dirty = False
                self.ctx.draft.changed.emit()
        self._update_title()
        self.checks.forget_native()
        self.checks.schedule()

    def _draft_changed(self) -> None:
        if self.edits.owned or self.editor is None:  # not built yet: it shows the draft as it is when it is
            return
        # Changed by another page (or code): show its values and check them.
        self.editor.refresh()
        self._update_title()
        self.checks.forget_native()
        self.checks.schedule()

    def _draft_replaced(self) -> None:
        draft = self.ctx.draft
        if draft.preset is None:
            return
        self.edits.demo_count = None
        self.edits.clean = preset_content(draft.preset)
        self.presets.select(draft.saved_as)
        if draft.saved_as:
            self.ctx.settings.setValue(SETTINGS_KEY, draft.saved_as)
        self._update_title()
        self.checks.forget_native()  # said about the preset loaded before
        if self.editor is None:  # ensure_built shows it
            return
        self.editor.set_preset(draft.preset)
        self.checks.clear_messages()
        self.checks.schedule()

    def _after_save(self, _name: str) -> None:
        """The draft was written: its title says so, and its messages are checked against the saved file."""
        self._update_title()
        self.checks.schedule()

    def _update_title(self) -> None:
        draft = self.ctx.draft
        preset = draft.preset
        if preset is None:
            return
        name = draft.saved_as or preset.name
        parts = [f"<b>{_html(name)}</b>"]
        if is_builtin(draft.saved_as):
            parts.append("built-in, read-only: Save makes a copy")
        elif draft.saved_as is None:
            parts.append("not saved yet")
        if draft.dirty:
            parts.append("<i>unsaved changes</i>")
        self.title_label.setText(" · ".join(parts))
        user_preset = bool(draft.saved_as) and not is_builtin(draft.saved_as)
        self.action_rename.setEnabled(user_preset)
        self.action_delete.setEnabled(user_preset)
        self.action_export.setEnabled(preset.accelerate is not None or preset.deepspeed is not None)

    # ------------------------------------------------------------------------------------------------ checks

    def _check(self) -> None:
        """The pause after an edit is over: the checks panel checks the draft with the form's own input errors."""
        if self.ctx.draft.preset is None or self.editor is None:
            return
        self.checks.check(self.editor.input_errors())

    def _show_messages(self) -> None:
        messages = self.ctx.draft.messages
        not_applied = None
        if self.editor is not None:
            self.editor.show_messages(messages)
            not_applied = self.editor.input_errors()
        self.checks.show_messages(messages, not_applied)

    def jump_to(self, path: str) -> None:
        """Show the setting a message is about (from the message list)."""
        if self.ensure_built().locate(path) is None and path:
            self.ctx.status.emit(f"{path}: not a setting the form shows (edit it in the file, or remove it)")

    # ------------------------------------------------------------------------------------------------ presets

    def _listed(self, presets: list[Preset], problems: list[str]) -> None:
        self.presets.set_presets(presets, problems)
        self.presets.select(self.ctx.draft.saved_as)

    def _choose(self, name: str) -> None:
        """A preset picked in the list: load it (asking first about unsaved changes)."""
        self.presets.select(self.ctx.draft.saved_as)  # stays on the current one until it is really loaded
        self.files.open_named(name)
        # Answered by now (Discard loaded it, Save is writing, or a dialog was cancelled). A key that moved the
        # list selects its row once this returns, so the list goes back to what the editor holds after that.
        QTimer.singleShot(0, self, lambda: self.presets.select(self.ctx.draft.saved_as))


def _html(text: str) -> str:
    import html

    return html.escape(text)


PAGE = ConfigurePage
