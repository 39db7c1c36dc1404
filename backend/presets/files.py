"""Where presets live: the built-ins (read-only, shipped in resources/presets) and the user's own (presets_dir(),
written atomically with mode 0600); listing, loading, saving, renaming and deleting.
"""

from __future__ import annotations

import difflib
import time
from pathlib import Path

from traindeck.backend.core import paths
from traindeck.backend.core.fileio import atomic_write_text
from traindeck.backend.presets.model import (
    _NAME,
    ACCEPTED_LAUNCHERS,
    BUILTIN_NAMES,
    Preset,
    PresetError,
    _builtin_clash,
    check_env,
    check_name,
    dump_preset,
    read_preset_file,
)
from traindeck.backend.presets.secrets import _refuse_secrets

# ------------------------------------------------------------------------------------------ the store


def builtin_dir() -> Path:
    return paths.resources_dir() / "presets"


def _user_path(name: str) -> Path:
    return paths.presets_dir() / f"{name}.yaml"


def _user_files() -> list[Path]:
    directory = paths.presets_dir()
    if not directory.is_dir():
        return []
    # Hidden files (the atomic writer's temporary files are ".NAME.yaml.XXXX.tmp") are never presets.
    return sorted(p for p in directory.glob("*.yaml") if not p.name.startswith(".") and p.is_file())


def load_builtin(name: str) -> Preset:
    if name not in BUILTIN_NAMES:
        raise PresetError(f"'{name}' is not a built-in preset")
    return read_preset_file(builtin_dir() / f"{name}.yaml", builtin=True)


def list_presets(errors: list[str] | None = None) -> list[Preset]:
    """Built-ins (in BUILTIN_NAMES order), then the user's presets by name. A user preset that cannot be read is
    left out and its problem appended to `errors` when given."""
    out: list[Preset] = []
    for name in BUILTIN_NAMES:
        try:
            out.append(load_builtin(name))
        except PresetError as exc:
            if errors is not None:
                errors.append(str(exc))
    for file in _user_files():
        if _builtin_clash(file.stem) or not _NAME.fullmatch(file.stem):
            if errors is not None:
                errors.append(f"{file}: ignored: " + (f"'{file.stem}' is a built-in preset's name"
                                                      if _builtin_clash(file.stem) else "not a valid preset name"))
            continue
        try:
            out.append(read_preset_file(file))
        except PresetError as exc:
            if errors is not None:
                errors.append(str(exc))
    return out


def preset_names() -> list[str]:
    return list(BUILTIN_NAMES) + [p.stem for p in _user_files() if not _builtin_clash(p.stem)]


def load_preset(name: str) -> Preset:
    """A built-in or user preset by name; PresetError (with the closest name suggested) when there is none."""
    if name in BUILTIN_NAMES:
        return load_builtin(name)
    if isinstance(name, str) and _NAME.fullmatch(name) and _user_path(name).is_file():
        return read_preset_file(_user_path(name))
    names = preset_names()
    close = difflib.get_close_matches(str(name).lower(), [n.lower() for n in names], n=1, cutoff=0.6)
    by_lower = {n.lower(): n for n in names}
    hint = f"; did you mean '{by_lower[close[0]]}'?" if close else ""
    raise PresetError(f"no preset named '{name}'{hint} (`traindeck presets list` shows them)")


def save_preset(preset: Preset, overwrite: bool = False) -> Path:
    """Write a user preset atomically (0600). Refuses built-in names, bad names, secrets, and (unless `overwrite`)
    an existing preset of the same name. Returns the file written."""
    check_name(preset.name)
    clash = _builtin_clash(preset.name)
    if clash:
        raise PresetError(f"'{preset.name}' is the name of a built-in preset ('{clash}'); choose another name "
                          "(built-ins cannot be replaced)")
    if preset.launcher not in ACCEPTED_LAUNCHERS:
        raise PresetError(f"launcher must be one of {', '.join(ACCEPTED_LAUNCHERS)}, not {preset.launcher!r}")
    try:
        check_env(preset.env)
    except PresetError as exc:
        raise PresetError(f"cannot save preset '{preset.name}': {exc}") from None
    _refuse_secrets(preset)
    target = _user_path(preset.name)
    if target.exists() and not overwrite:
        raise PresetError(f"a preset named '{preset.name}' already exists (delete it first, or overwrite it)")
    text = dump_preset(preset)
    paths.ensure_private_dir(target.parent)
    atomic_write_text(target, text, mode=0o600)
    _clean_stale_temp_files(target.parent)
    preset.path = target
    preset.builtin = False
    return target


def _clean_stale_temp_files(directory: Path, older_than_s: float = 600.0) -> None:
    """Remove temporary files a killed writer left behind (never a recent one: another writer may own it)."""
    now = time.time()
    for tmp in directory.glob(".*.yaml.*.tmp"):
        try:
            if now - tmp.stat().st_mtime > older_than_s:
                tmp.unlink()
        except OSError:
            pass


def delete_preset(name: str) -> None:
    if _builtin_clash(name):
        raise PresetError(f"'{name}' is a built-in preset and cannot be deleted")
    check_name(name)
    target = _user_path(name)
    if not target.is_file():
        load_preset(name)  # raises with a suggestion
    target.unlink()


def rename_preset(old: str, new: str) -> Preset:
    if _builtin_clash(old):
        raise PresetError(f"'{old}' is a built-in preset and cannot be renamed (save a copy under a new name)")
    preset = load_preset(old)
    if new == old:
        return preset
    check_name(new)
    if _user_path(new).exists() and new.lower() != old.lower():
        raise PresetError(f"a preset named '{new}' already exists")
    old_path = preset.path
    preset.name = new
    save_preset(preset, overwrite=True)
    if old_path is not None and old_path.exists() and old_path.resolve() != _user_path(new).resolve():
        old_path.unlink()
    return preset
