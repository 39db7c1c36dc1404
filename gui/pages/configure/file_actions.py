"""The Configure page's preset files: listing the presets, and the file actions with their dialogs: new, save,
save as, rename, delete, import, export, open and paste a config (with the repair on offer), each asking first about
unsaved changes. PresetFiles is an object the page holds; it changes ctx.draft and tells the page by signals what
the page shows differently."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QFileDialog, QMessageBox, QWidget

from traindeck.backend.launch import ACCELERATE_CONFIG, DS_CONFIG
from traindeck.backend.presets import (
    BUILTIN_NAMES,
    PRESET_FILE_SUFFIX,
    Preset,
    PresetError,
    delete_preset,
    export_preset,
    export_summary,
    import_preset,
    list_presets,
    load_preset,
    preset_file_name,
    rename_preset,
    save_preset,
)
from traindeck.gui.context import DEFAULT_PRESET, AppContext
from traindeck.gui.pages.configure.draft_edits import DraftEdits, preset_content
from traindeck.gui.pages.configure.preset_dialogs import (
    ask_name,
    ask_unsaved,
    confirm,
    is_builtin,
    report_error,
    valid_name,
)

if TYPE_CHECKING:
    from traindeck.backend.config import Message
    from traindeck.backend.presets import ConfigText

SETTINGS_KEY = "draft/preset"  # the preset edited last (gui/app.py loads it at start)
CONFIG_FILTER = "Configs (*.yaml *.yml *.json);;All files (*)"


class PresetFiles(QObject):
    """The presets on disk as the Configure page uses them; dialogs open over `widget`.

    The draft is replaced here (the page follows ctx.draft's own signals) or changed inside `edits.owning()`, and
    the page hears of the rest through the signals below."""

    listed = Signal(list, list)  # the presets (Preset) and the problems met listing them
    saved = Signal(str)  # the draft was written under this name: its title and checks follow
    renamed = Signal(str)  # the draft's preset has this new name
    loaded = Signal(object)  # this config (Preset), opened or pasted, is the draft now, not saved yet

    def __init__(self, widget: QWidget, ctx: AppContext, edits: DraftEdits):
        super().__init__(widget)
        self.widget = widget
        self.ctx = ctx
        self.edits = edits
        self.user_names: list[str] = []  # the user's preset names, from the last listing

    def refresh(self) -> None:
        """List the presets again, on the pool: `listed` carries them."""
        def listing() -> tuple[list[Preset], list[str]]:
            problems: list[str] = []
            return list_presets(problems), problems

        def done(result: tuple[list[Preset], list[str]]) -> None:
            presets, problems = result
            self.user_names = [p.name for p in presets if not p.builtin]
            self.listed.emit(presets, problems)

        self.ctx.tasks.run(listing, done=done, failed=lambda e: self.ctx.status.emit(f"Cannot list presets: {e}"))

    def load_named(self, name: str) -> bool:
        """Load the user's or a built-in preset into the draft (an error box when it cannot be read)."""
        try:
            preset = load_preset(name)  # one small local file: read here, so the switch is immediate
        except PresetError as exc:
            self._error("Cannot open the preset", str(exc))
            return False
        with self.edits.owning():
            self.ctx.draft.replace(preset, name)
        self.ctx.status.emit(f"Preset {name}")
        return True

    # ---- unsaved changes

    def guard(self, then: Callable[[], None]) -> None:
        """Run `then` once unsaved changes are saved or discarded; not at all when the user cancels."""
        if not self.edits.unsaved():
            then()
            return
        answer = ask_unsaved(self.widget, self.ctx.draft)
        if answer == QMessageBox.StandardButton.Save:
            self.save(then=then)
        elif answer == QMessageBox.StandardButton.Discard:
            then()

    def open_named(self, name: str) -> None:
        """Load a preset picked by name, asking first about unsaved changes."""
        def load() -> None:
            self.load_named(name)

        self.guard(load)

    def confirm_close(self) -> bool:
        """The window is closing: True once unsaved changes are saved (written now) or discarded."""
        if not self.edits.unsaved():
            return True
        answer = ask_unsaved(self.widget, self.ctx.draft)
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
        self._saved(name, path, self.edits.count, self.ctx.draft.preset, None)
        return True

    def new_preset(self) -> None:
        from traindeck.backend.presets import blank_preset, free_name

        def start() -> None:
            with self.edits.owning():
                self.ctx.draft.replace(blank_preset(free_name("untitled", self.user_names)), None)
        self.guard(start)

    # ---- save, save as

    def save(self, then: Callable[[], None] | None = None) -> None:
        name = self._save_target(save_as=False)
        if name is not None:
            self._write(name, then)

    def save_as(self) -> None:
        name = self._save_target(save_as=True)
        if name is not None:
            self._write(name, None)

    def _save_target(self, save_as: bool) -> str | None:
        """The name to save under: the current user preset's, or one asked for (built-ins, new presets, Save As)."""
        draft = self.ctx.draft
        current = draft.saved_as
        if not save_as and current and not is_builtin(current):
            return current
        from traindeck.backend.presets import free_name

        base = draft.preset.name if draft.preset is not None else "my-preset"
        if current and is_builtin(current):
            base = f"my-{current}"
        elif current:
            base = f"{current}-copy"
        why = "Built-in presets are read-only: save your changes as a new preset.\n\n" \
            if is_builtin(current) and not save_as else ""
        name = ask_name(self.widget, "Save preset as", f"{why}Name of the new preset:",
                              free_name(base, self.user_names + list(BUILTIN_NAMES)))
        if name is None:
            return None
        if name != current and name.lower() in {n.lower() for n in self.user_names}:
            if not confirm(self.widget, "Replace preset?", f"A preset named '{name}' exists. Replace it with this one?"):
                return None
        return name

    def _copy_named(self, name: str) -> Preset:
        preset = copy.deepcopy(self.ctx.draft.preset)
        assert preset is not None
        preset.name, preset.builtin, preset.path = name, False, None
        return preset

    def _write(self, name: str, then: Callable[[], None] | None) -> None:
        target = self.ctx.draft.preset
        edits = self.edits.count
        self.ctx.status.emit(f"Saving {name}…")
        self.ctx.tasks.run(save_preset, self._copy_named(name), overwrite=True,
                           done=lambda path: self._saved(name, path, edits, target, then),
                           failed=lambda error: self._error("The preset was not saved", error))

    def _saved(self, name: str, path: Path, edits: int, target: Preset | None,
               then: Callable[[], None] | None) -> None:
        draft = self.ctx.draft
        if draft.preset is target and target is not None:
            target.name, target.builtin, target.path = name, False, Path(path)
            with self.edits.owning():
                draft.mark_saved(name)
                if edits != self.edits.count:  # typed on while it was written: those edits are not saved yet
                    draft.mark_edited()
                else:
                    self.edits.clean = preset_content(target)
            self.ctx.settings.setValue(SETTINGS_KEY, name)
            self.saved.emit(name)  # the title follows, and messages are now located in the saved file
        if name not in self.user_names:
            self.user_names.append(name)
        self.ctx.status.emit(f"Saved preset {name} ({path})")
        self.refresh()
        if then is not None:
            then()

    # ---- rename, delete

    def rename(self) -> None:
        old = self.ctx.draft.saved_as
        if not old or is_builtin(old):
            return
        new = ask_name(self.widget, "Rename preset", f"New name for '{old}':", old)
        if new is None or new == old:
            return
        if new.lower() != old.lower() and new.lower() in {n.lower() for n in self.user_names}:
            self._error("The preset was not renamed", f"a preset named '{new}' already exists")
            return
        target = self.ctx.draft.preset

        def done(renamed: Preset) -> None:
            draft = self.ctx.draft
            if draft.preset is target and target is not None:
                dirty = draft.dirty
                target.name, target.path = new, renamed.path
                with self.edits.owning():
                    draft.mark_saved(new)
                    if dirty:
                        draft.mark_edited()
                self.ctx.settings.setValue(SETTINGS_KEY, new)
                self.renamed.emit(new)
            self.ctx.status.emit(f"Renamed {old} to {new}")
            self.refresh()

        self.ctx.tasks.run(rename_preset, old, new, done=done,
                           failed=lambda error: self._error("The preset was not renamed", error))

    def delete(self) -> None:
        name = self.ctx.draft.saved_as
        if not name or is_builtin(name):
            return
        extra = " Its unsaved changes are lost too." if self.ctx.draft.dirty else ""
        if not confirm(self.widget, "Delete preset?", f"Delete the preset '{name}'? This cannot be undone.{extra}"):
            return

        def done(_result: object) -> None:
            self.user_names = [n for n in self.user_names if n != name]
            if self.ctx.draft.saved_as == name:
                self.load_named(DEFAULT_PRESET)
            self.ctx.status.emit(f"Deleted preset {name}")
            self.refresh()

        self.ctx.tasks.run(delete_preset, name, done=done,
                           failed=lambda error: self._error("The preset was not deleted", error))

    # ---- import, export

    def import_files(self) -> None:
        files, _filter = QFileDialog.getOpenFileNames(
            self.widget, "Import an accelerate config and/or a DeepSpeed config, or an exported preset file",
            str(Path.home()), CONFIG_FILTER)
        if not files:
            return
        if len(files) > 2:
            self._error("Cannot import", "choose at most two files: an accelerate YAML and a DeepSpeed JSON")
            return
        from traindeck.backend.presets import free_name

        first = Path(files[0]).name
        stem = (first.removesuffix(PRESET_FILE_SUFFIX) if first.endswith(PRESET_FILE_SUFFIX)
                else Path(first).stem).replace("_", "-")
        name = ask_name(self.widget, "Import preset", "Name of the new preset:",
                              free_name(stem if valid_name(stem) else "imported", self.user_names + list(BUILTIN_NAMES)))
        if name is None:
            return
        if name.lower() in {n.lower() for n in self.user_names}:
            if not confirm(self.widget, "Replace preset?",
                           f"A preset named '{name}' exists. Replace it with the imported one?"):
                return

        def run() -> None:
            slips: list[Message] = []  # JSON slips DeepSpeed reads past (config check's warnings), filled by the import

            def done(preset: Preset) -> None:
                self.user_names.append(name)
                with self.edits.owning():
                    self.ctx.draft.replace(preset, name)
                said = f": {len(slips)} JSON slip(s) DeepSpeed reads past (`traindeck config check` lists them)" \
                    if slips else ""
                self.ctx.status.emit(f"Imported preset {name}{said}")
                self.refresh()

            def failed(error: str) -> None:
                if len(files) != 1 or files[0].endswith(PRESET_FILE_SUFFIX):
                    self._error("The configs were not imported", error)
                    return
                from traindeck.backend.presets import read_config_file

                # One config refused for its text (a // comment, a trailing comma): the repair Open config
                # offers, here too, instead of an error that sends the user to a terminal.
                self.ctx.tasks.run(read_config_file, files[0],
                                   done=lambda config: self._import_repaired(config, name, error, done),
                                   failed=lambda _error: self._error("The configs were not imported", error))

            self.ctx.tasks.run(import_preset, files, name, overwrite=True, slips=slips, done=done, failed=failed)

        self.guard(run)

    def _import_repaired(self, config: ConfigText, name: str, error: str, done: Callable[[Preset], None]) -> None:
        """Offer the repair of a config the import refused; the repaired config is saved as preset `name`."""
        from traindeck.gui.widgets.repair_dialog import REPAIR, RepairDialog

        if not config.offers_repair:
            self._error("The configs were not imported", error)
            return
        dialog = RepairDialog(config, self.widget, verb="import", as_is=False)
        dialog.exec()
        if dialog.choice != REPAIR:
            self.ctx.status.emit(f"Not imported: {config.file}")
            return
        try:
            preset = config.preset(repaired=True, name=name)
        except PresetError as exc:
            self._error("The configs were not imported", str(exc))
            return
        preset.description = f"imported from {config.file}, repaired"
        changes = len(config.repair.changes) if config.repair is not None else 0

        def saved(_path: object) -> None:
            done(preset)
            self.ctx.status.emit(f"Imported preset {name}, repaired ({changes} change{'s' * (changes != 1)})")

        self.ctx.tasks.run(save_preset, preset, overwrite=True, done=saved,
                           failed=lambda failure: self._error("The configs were not imported", failure))

    def export(self) -> None:
        preset = self.ctx.draft.preset
        if preset is None:
            return
        folder = QFileDialog.getExistingDirectory(self.widget, "Export the preset and its config files to a folder",
                                                  str(Path.home()))
        if not folder:
            return
        existing = [n for n in (ACCELERATE_CONFIG, DS_CONFIG, preset_file_name(preset)) if (Path(folder) / n).exists()]
        if existing:
            if not confirm(self.widget, "Replace files?",
                           f"{', '.join(existing)} already exist in {folder}. Replace them?"):
                return

        left_out: list[str] = []  # secret env variables the preset file leaves out, filled by the export

        def done(written: list[Path]) -> None:
            self.ctx.status.emit(export_summary(written, left_out))

        self.ctx.tasks.run(export_preset, copy.deepcopy(preset), folder, left_out=left_out, done=done,
                           failed=lambda error: self._error("The preset was not exported", error))

    # ---- open, paste

    def open_config(self) -> None:
        file, _filter = QFileDialog.getOpenFileName(self.widget, "Open an accelerate or DeepSpeed config",
                                                    str(Path.home()), CONFIG_FILTER)
        if not file:
            return
        from traindeck.backend.presets import read_config_file

        self.ctx.tasks.run(read_config_file, file, done=self.offer_config,
                           failed=lambda error: self._error("Cannot open the config", error))

    def paste_config(self) -> None:
        text = QGuiApplication.clipboard().text()
        if not text.strip():
            QMessageBox.information(self.widget, "Nothing to paste", "The clipboard holds no text. Copy an accelerate "
                                    "YAML or a DeepSpeed JSON first.")
            return
        from traindeck.backend.presets import examine_text

        self.ctx.tasks.run(examine_text, text, done=self.offer_config,
                           failed=lambda error: self._error("Cannot read the pasted config", error))

    def offer_config(self, config: ConfigText) -> None:
        """Show what is wrong with a pasted/opened config and the repair on offer; load the user's choice into a
        new unsaved preset."""
        from traindeck.backend.presets import free_name
        from traindeck.gui.widgets.repair_dialog import AS_IS, REPAIR, RepairDialog

        if not config.loadable:
            lines = [m.format() for m in config.syntax[:5]]
            if config.repair is not None:
                lines += config.repair.problems[:5]
            self._error("The config cannot be loaded", "\n".join(lines) or "it cannot be read")
            return
        needs_dialog = config.offers_repair or not config.readable or bool(config.repair and config.repair.problems)
        choice = AS_IS
        if needs_dialog:
            dialog = RepairDialog(config, self.widget)
            dialog.exec()
            if dialog.choice is None:
                return
            choice = dialog.choice
        stem = Path(config.file).stem.replace("_", "-") if config.file else "pasted"
        name = free_name(stem if valid_name(stem) else "pasted", self.user_names + list(BUILTIN_NAMES))
        try:
            preset = config.preset(repaired=choice == REPAIR, name=name)
        except PresetError as exc:
            self._error("The config cannot be loaded", str(exc))
            return

        def load() -> None:
            with self.edits.owning():
                self.ctx.draft.replace(preset, None)
                self.edits.count += 1
                self.ctx.draft.mark_edited()  # not saved anywhere yet: closing asks
            self.loaded.emit(preset)
            what = "repaired and loaded" if choice == REPAIR else "loaded"
            self.ctx.status.emit(f"Config {what} as the unsaved preset {name}: Save keeps it")

        self.guard(load)

    def _error(self, title: str, text: str) -> None:
        report_error(self.widget, self.ctx, title, text)
