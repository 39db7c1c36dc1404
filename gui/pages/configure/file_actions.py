"""The Configure page's file actions and their dialogs: new, save, save as, rename, delete, import, export, open
and paste a config (with the repair on offer), each asking first about unsaved changes. Split from configure_page.py;
ConfigurePage builds the widgets and state declared here and supplies the methods below that raise."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QFileDialog, QInputDialog, QLineEdit, QMessageBox

from traindeck.backend.launch import ACCELERATE_CONFIG, DS_CONFIG
from traindeck.backend.presets import (
    BUILTIN_NAMES,
    Preset,
    PresetError,
    check_name,
    delete_preset,
    export_preset,
    import_preset,
    load_preset,
    rename_preset,
    save_preset,
)
from traindeck.gui.context import DEFAULT_PRESET
from traindeck.gui.pages.base import Page

if TYPE_CHECKING:
    from traindeck.backend.presets import ConfigText

SETTINGS_KEY = "draft/preset"  # the preset edited last (gui/app.py loads it at start)
CONFIG_FILTER = "Configs (*.yaml *.yml *.json);;All files (*)"


class PresetFileActions(Page):
    # -- state (assigned in ConfigurePage.__init__) ---------------------------------------------------------
    _user_names: list[str]  # the user's preset names, from the last listing
    _edits: int  # edits so far: a save tells whether the user went on typing while it was written
    _clean: dict[str, object] | None  # the preset's content as loaded or last saved

    # -- what the page does that these actions call (ConfigurePage) -------------------------------------------
    def _owning(self) -> contextlib.AbstractContextManager[None]:
        raise NotImplementedError

    def _has_unsaved_work(self) -> bool:
        raise NotImplementedError

    def _is_builtin(self, name: str | None) -> bool:
        raise NotImplementedError

    def _update_title(self) -> None:
        raise NotImplementedError

    def _schedule_check(self) -> None:
        raise NotImplementedError

    def refresh_presets(self, then: Callable[[], None] | None = None) -> None:
        raise NotImplementedError

    def load_named(self, name: str) -> bool:
        """Load the user's or a built-in preset into the draft (an error box when it cannot be read)."""
        try:
            preset = load_preset(name)  # one small local file: read here, so the switch is immediate
        except PresetError as exc:
            self._error("Cannot open the preset", str(exc))
            return False
        with self._owning():
            self.ctx.draft.replace(preset, name)
        self.ctx.status.emit(f"Preset {name}")
        return True

    # ---- unsaved changes

    def _guard(self, then: Callable[[], None]) -> None:
        """Run `then` once unsaved changes are saved or discarded; not at all when the user cancels."""
        if not self._has_unsaved_work():
            then()
            return
        answer = self._ask_unsaved()
        if answer == QMessageBox.StandardButton.Save:
            self.save(then=then)
        elif answer == QMessageBox.StandardButton.Discard:
            then()

    def _ask_unsaved(self) -> QMessageBox.StandardButton:
        draft = self.ctx.draft
        name = draft.saved_as or (draft.preset.name if draft.preset else "the preset")
        return QMessageBox.question(
            self, "Unsaved changes", f"The preset '{name}' has unsaved changes. Save them?",
            QMessageBox.StandardButton.Save | QMessageBox.StandardButton.Discard | QMessageBox.StandardButton.Cancel,
            QMessageBox.StandardButton.Save)

    def new_preset(self) -> None:
        from traindeck.backend.presets import blank_preset, free_name

        def start() -> None:
            with self._owning():
                self.ctx.draft.replace(blank_preset(free_name("untitled", self._user_names)), None)
        self._guard(start)

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
        if not save_as and current and not self._is_builtin(current):
            return current
        from traindeck.backend.presets import free_name

        base = draft.preset.name if draft.preset is not None else "my-preset"
        if current and self._is_builtin(current):
            base = f"my-{current}"
        elif current:
            base = f"{current}-copy"
        why = "Built-in presets are read-only: save your changes as a new preset.\n\n" \
            if self._is_builtin(current) and not save_as else ""
        name = self._ask_name("Save preset as", f"{why}Name of the new preset:",
                              free_name(base, self._user_names + list(BUILTIN_NAMES)))
        if name is None:
            return None
        if name != current and name.lower() in {n.lower() for n in self._user_names}:
            answer = QMessageBox.question(
                self, "Replace preset?", f"A preset named '{name}' exists. Replace it with this one?",
                QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, QMessageBox.StandardButton.No)
            if answer != QMessageBox.StandardButton.Yes:
                return None
        return name

    def _ask_name(self, title: str, label: str, suggestion: str) -> str | None:
        text = suggestion
        while True:
            text, ok = QInputDialog.getText(self, title, label, QLineEdit.EchoMode.Normal, text)
            if not ok:
                return None
            name = text.strip()
            try:
                check_name(name)
                if self._is_builtin(name):
                    raise PresetError(f"'{name}' is the name of a built-in preset; choose another name")
            except PresetError as exc:
                QMessageBox.warning(self, title, str(exc))
                continue
            return name

    def _copy_named(self, name: str) -> Preset:
        preset = copy.deepcopy(self.ctx.draft.preset)
        assert preset is not None
        preset.name, preset.builtin, preset.path = name, False, None
        return preset

    def _write(self, name: str, then: Callable[[], None] | None) -> None:
        target = self.ctx.draft.preset
        edits = self._edits
        self.ctx.status.emit(f"Saving {name}…")
        self.ctx.tasks.run(save_preset, self._copy_named(name), overwrite=True,
                           done=lambda path: self._saved(name, path, edits, target, then),
                           failed=lambda error: self._error("The preset was not saved", error))

    def _saved(self, name: str, path: Path, edits: int, target: Preset | None,
               then: Callable[[], None] | None) -> None:
        draft = self.ctx.draft
        if draft.preset is target and target is not None:
            target.name, target.builtin, target.path = name, False, Path(path)
            with self._owning():
                draft.mark_saved(name)
                if edits != self._edits:  # typed on while it was written: those edits are not saved yet
                    draft.mark_edited()
                else:
                    self._clean = preset_content(target)
            self.ctx.settings.setValue(SETTINGS_KEY, name)
            self._update_title()
            self._schedule_check()  # messages are now located in the saved file
        if name not in self._user_names:
            self._user_names.append(name)
        self.ctx.status.emit(f"Saved preset {name} ({path})")
        self.refresh_presets()
        if then is not None:
            then()

    # ---- rename, delete

    def rename(self) -> None:
        old = self.ctx.draft.saved_as
        if not old or self._is_builtin(old):
            return
        new = self._ask_name("Rename preset", f"New name for '{old}':", old)
        if new is None or new == old:
            return
        if new.lower() != old.lower() and new.lower() in {n.lower() for n in self._user_names}:
            self._error("The preset was not renamed", f"a preset named '{new}' already exists")
            return
        target = self.ctx.draft.preset

        def done(renamed: Preset) -> None:
            draft = self.ctx.draft
            if draft.preset is target and target is not None:
                dirty = draft.dirty
                target.name, target.path = new, renamed.path
                with self._owning():
                    draft.mark_saved(new)
                    if dirty:
                        draft.mark_edited()
                self.ctx.settings.setValue(SETTINGS_KEY, new)
                self._update_title()
            self.ctx.status.emit(f"Renamed {old} to {new}")
            self.refresh_presets()

        self.ctx.tasks.run(rename_preset, old, new, done=done,
                           failed=lambda error: self._error("The preset was not renamed", error))

    def delete(self) -> None:
        name = self.ctx.draft.saved_as
        if not name or self._is_builtin(name):
            return
        extra = " Its unsaved changes are lost too." if self.ctx.draft.dirty else ""
        answer = QMessageBox.question(
            self, "Delete preset?", f"Delete the preset '{name}'? This cannot be undone.{extra}",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, QMessageBox.StandardButton.No)
        if answer != QMessageBox.StandardButton.Yes:
            return

        def done(_result: object) -> None:
            self._user_names = [n for n in self._user_names if n != name]
            if self.ctx.draft.saved_as == name:
                self.load_named(DEFAULT_PRESET)
            self.ctx.status.emit(f"Deleted preset {name}")
            self.refresh_presets()

        self.ctx.tasks.run(delete_preset, name, done=done,
                           failed=lambda error: self._error("The preset was not deleted", error))

    # ---- import, export

    def import_files(self) -> None:
        files, _filter = QFileDialog.getOpenFileNames(
            self, "Import an accelerate config and/or a DeepSpeed config", str(Path.home()), CONFIG_FILTER)
        if not files:
            return
        if len(files) > 2:
            self._error("Cannot import", "choose at most two files: an accelerate YAML and a DeepSpeed JSON")
            return
        from traindeck.backend.presets import free_name

        stem = Path(files[0]).stem.replace("_", "-")
        name = self._ask_name("Import preset", "Name of the new preset:",
                              free_name(stem if _valid(stem) else "imported", self._user_names + list(BUILTIN_NAMES)))
        if name is None:
            return
        if name.lower() in {n.lower() for n in self._user_names}:
            answer = QMessageBox.question(
                self, "Replace preset?", f"A preset named '{name}' exists. Replace it with the imported one?",
                QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, QMessageBox.StandardButton.No)
            if answer != QMessageBox.StandardButton.Yes:
                return

        def run() -> None:
            def done(preset: Preset) -> None:
                self._user_names.append(name)
                with self._owning():
                    self.ctx.draft.replace(preset, name)
                self.ctx.status.emit(f"Imported preset {name}")
                self.refresh_presets()

            self.ctx.tasks.run(import_preset, files, name, overwrite=True, done=done,
                               failed=lambda error: self._error("The configs were not imported", error))

        self._guard(run)

    def export(self) -> None:
        preset = self.ctx.draft.preset
        if preset is None:
            return
        folder = QFileDialog.getExistingDirectory(self, "Export the preset's config files to a folder",
                                                  str(Path.home()))
        if not folder:
            return
        existing = [n for n in (ACCELERATE_CONFIG, DS_CONFIG) if (Path(folder) / n).exists()]
        if existing:
            answer = QMessageBox.question(
                self, "Replace files?", f"{', '.join(existing)} already exist in {folder}. Replace them?",
                QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, QMessageBox.StandardButton.No)
            if answer != QMessageBox.StandardButton.Yes:
                return

        def done(written: list[Path]) -> None:
            self.ctx.status.emit("Exported " + ", ".join(str(p) for p in written))

        self.ctx.tasks.run(export_preset, copy.deepcopy(preset), folder, done=done,
                           failed=lambda error: self._error("The preset was not exported", error))

    # ---- open, paste

    def open_config(self) -> None:
        file, _filter = QFileDialog.getOpenFileName(self, "Open an accelerate or DeepSpeed config",
                                                    str(Path.home()), CONFIG_FILTER)
        if not file:
            return
        from traindeck.backend.presets import read_config_file

        self.ctx.tasks.run(read_config_file, file, done=self.offer_config,
                           failed=lambda error: self._error("Cannot open the config", error))

    def paste_config(self) -> None:
        text = QGuiApplication.clipboard().text()
        if not text.strip():
            QMessageBox.information(self, "Nothing to paste", "The clipboard holds no text. Copy an accelerate "
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
            dialog = RepairDialog(config, self)
            dialog.exec()
            if dialog.choice is None:
                return
            choice = dialog.choice
        stem = Path(config.file).stem.replace("_", "-") if config.file else "pasted"
        name = free_name(stem if _valid(stem) else "pasted", self._user_names + list(BUILTIN_NAMES))
        try:
            preset = config.preset(repaired=choice == REPAIR, name=name)
        except PresetError as exc:
            self._error("The config cannot be loaded", str(exc))
            return

        def load() -> None:
            with self._owning():
                self.ctx.draft.replace(preset, None)
                self._edits += 1
                self.ctx.draft.mark_edited()  # not saved anywhere yet: closing asks
            self._update_title()
            what = "repaired and loaded" if choice == REPAIR else "loaded"
            self.ctx.status.emit(f"Config {what} as the unsaved preset {name}: Save keeps it")

        self._guard(load)

    # ------------------------------------------------------------------------------------------------ errors

    def _error(self, title: str, text: str) -> None:
        self.ctx.status.emit(f"{title}: {text.splitlines()[0] if text else ''}")
        QMessageBox.warning(self, title, text)


def preset_content(preset: Preset | None) -> dict[str, object] | None:
    """What a preset says, without where it lives or what it is called (a copy: the draft goes on changing)."""
    if preset is None:
        return None
    return copy.deepcopy({f.name: getattr(preset, f.name) for f in dataclasses.fields(preset)
                          if f.name not in ("name", "builtin", "path")})


def _valid(name: str) -> bool:
    try:
        check_name(name)
    except PresetError:
        return False
    return True
