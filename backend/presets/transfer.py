"""Presets in and out: importing accelerate YAML / DeepSpeed JSON files as a preset, and exporting a preset as the
files `accelerate launch` and `deepspeed` read (the launcher's own renderer, so both are the same files) together
with the preset itself, NAME.traindeck.yaml in the store's own format, which `import_preset` reads back whole
(launcher, num_processes, env and both configs): a shared preset comes back as the same preset.

A preset file is meant to be shared, so an exported one holds no secret: an `env` variable whose name or value
looks like one (the rules that refuse it on save, presets.secrets) is left out and named to the caller, never
written masked (a masked value read back would be a wrong value); a secret anywhere else refuses the export.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from traindeck.backend.core import paths
from traindeck.backend.core.fileio import atomic_write_text
from traindeck.backend.launch.config_files import ACCELERATE_CONFIG, DS_CONFIG, render_sections
from traindeck.backend.presets.files import load_preset, save_preset
from traindeck.backend.presets.model import (
    PRESET_FILE_SUFFIX,
    Preset,
    PresetError,
    _builtin_clash,
    check_name,
    dump_preset,
    is_preset_data,
    preset_to_mapping,
    read_preset_file,
)
from traindeck.backend.presets.secrets import _env_secrets, find_secrets

if TYPE_CHECKING:
    from traindeck.backend.config.messages import Message
    from traindeck.backend.config.source import SourceDocument

# ------------------------------------------------------------------------------------------ import


def import_preset(files: Sequence[Path | str], name: str, *, save: bool = True, overwrite: bool = False,
                  description: str | None = None, slips: list[Message] | None = None) -> Preset:
    """A preset from an accelerate YAML and/or a DeepSpeed JSON (either order; kinds told by their keys), or from a
    preset file `export_preset` wrote (alone: it holds the whole preset), or from a folder `export_preset` wrote
    into (its preset file, else its accelerate_config.yaml / ds_config.json).

    An accelerate YAML whose deepspeed_config.deepspeed_config_file points at a JSON brings that JSON in (unless a
    DeepSpeed JSON is given beside it, which then wins); the preset keeps the DeepSpeed settings in its
    `deepspeed` section and drops the (machine-specific) path, which export writes afresh. Everything else is kept
    exactly, unknown keys included. Saved as a user preset unless `save=False`.

    A DeepSpeed JSON with slips DeepSpeed's own reader (hjson) takes (comments, trailing commas) is judged by the
    rule `config check` applies (validate.lenient_slips): where that rule says error the import is refused naming
    every slip; where it says warning the preset takes what DeepSpeed reads and the warnings are appended to
    `slips` (when given). A text no reader takes is refused naming every syntax error.
    """
    from traindeck.backend.config.source import load_file
    from traindeck.backend.config.validate import referenced_deepspeed_file

    check_name(name)
    if _builtin_clash(name):
        raise PresetError(f"'{name}' is the name of a built-in preset; choose another name")
    if not files:
        raise PresetError("give an accelerate YAML and/or a DeepSpeed JSON to import")
    given = _expand_folders([Path(file).expanduser() for file in files])
    if len(given) > 2:
        raise PresetError("give at most two files: an accelerate YAML and a DeepSpeed JSON")
    accelerate_doc = deepspeed_doc = None
    for path in given:
        if not path.is_file():
            raise PresetError(f"no such file: {path}")
        _refuse_big_import(path)
        doc = load_file(path, as_deepspeed_reads=True)
        if doc.data is None:
            raise PresetError(f"cannot import {path}: " + _listed(doc.syntax, f"{path}: cannot be read"))
        if path.name.endswith(PRESET_FILE_SUFFIX) or is_preset_data(doc.data):
            if len(given) > 1:
                raise PresetError(f"{path} is a traindeck preset file: import it alone (it holds the whole preset, "
                                  "its configs included)")
            return _import_preset_file(path, name, save=save, overwrite=overwrite, description=description)
        if doc.kind == "accelerate":
            if accelerate_doc is not None:
                raise PresetError(f"two accelerate configs given ({accelerate_doc.file} and {path}); give one")
            accelerate_doc = doc
        else:
            if deepspeed_doc is not None:
                raise PresetError(f"two DeepSpeed configs given ({deepspeed_doc.file} and {path}); give one")
            deepspeed_doc = doc
    accelerate = copy.deepcopy(accelerate_doc.data) if accelerate_doc is not None else None
    deepspeed = copy.deepcopy(deepspeed_doc.data) if deepspeed_doc is not None else None
    sources = [f"accelerate config {accelerate_doc.file}"] if accelerate_doc is not None else []
    if accelerate_doc is not None:
        ref = referenced_deepspeed_file(accelerate_doc)
        if ref is not None and deepspeed is None:
            _refuse_big_import(ref)
            ref_doc = load_file(ref, kind="deepspeed", as_deepspeed_reads=True)
            if ref_doc.data is None:
                raise PresetError(f"{accelerate_doc.file}: its deepspeed_config_file {ref}: "
                                  + _listed(ref_doc.syntax, "cannot be read"))
            _judge_slips(ref_doc, "integration", slips)  # accelerate reads it (json.load), as config check says
            deepspeed = copy.deepcopy(ref_doc.data)
            sources.append(f"DeepSpeed config {ref}")
        if ref is not None and accelerate is not None:
            section = accelerate["deepspeed_config"]
            section.pop("deepspeed_config_file", None)
    if deepspeed_doc is not None:
        # Beside an accelerate config it is the one accelerate reads; alone, "auto" values tell who reads it.
        _judge_slips(deepspeed_doc, "integration" if accelerate_doc is not None else None, slips)
        sources.append(f"DeepSpeed config {deepspeed_doc.file}")
    launcher: Literal["accelerate", "deepspeed", "python"] = "accelerate" if accelerate is not None else "deepspeed"
    preset = Preset(name=name, launcher=launcher,
                    description=description if description is not None else "imported from " + " and ".join(sources),
                    accelerate=accelerate, deepspeed=deepspeed)
    if save:
        save_preset(preset, overwrite=overwrite)
    return preset


def _expand_folders(given: list[Path]) -> list[Path]:
    """Each folder given becomes the files an export wrote there: its one preset file, else its
    accelerate_config.yaml and/or ds_config.json."""
    out: list[Path] = []
    for path in given:
        if not path.is_dir():
            out.append(path)
            continue
        found = sorted(p for p in path.glob("*" + PRESET_FILE_SUFFIX) if not p.name.startswith(".") and p.is_file())
        if len(found) > 1:
            raise PresetError(f"{path} holds {len(found)} preset files ({', '.join(p.name for p in found)}): "
                              "give the one to import")
        configs = found or [path / n for n in (ACCELERATE_CONFIG, DS_CONFIG) if (path / n).is_file()]
        if not configs:
            raise PresetError(f"{path} holds no preset file (*{PRESET_FILE_SUFFIX}), {ACCELERATE_CONFIG} or "
                              f"{DS_CONFIG} to import")
        out += configs
    return out


def _import_preset_file(path: Path, name: str, *, save: bool, overwrite: bool, description: str | None) -> Preset:
    """The preset a preset file describes, under `name` (the name written inside is the sharer's)."""
    preset = read_preset_file(path)
    preset.name, preset.builtin, preset.path = name, False, None
    if description is not None:
        preset.description = description
    if save:
        save_preset(preset, overwrite=overwrite)
    return preset


# Syntax messages named in one refusal; the rest are counted.
LISTED_SLIPS = 10


def _listed(messages: Sequence[Message], fallback: str) -> str:
    """Every message, one a line (at most LISTED_SLIPS of them, then "and N more")."""
    if not messages:
        return fallback
    lines = [m.format() for m in messages[:LISTED_SLIPS]]
    if len(messages) > LISTED_SLIPS:
        lines.append(f"and {len(messages) - LISTED_SLIPS} more")
    return lines[0] if len(lines) == 1 else "\n  " + "\n  ".join(lines)


def _judge_slips(doc: SourceDocument, consumer: str | None, out: list[Message] | None) -> None:
    """`config check`'s verdict on the JSON slips of `doc`: errors refuse the import, warnings go to `out`."""
    from traindeck.backend.config.messages import sort_messages
    from traindeck.backend.config.validate import lenient_slips

    judged = sort_messages(lenient_slips(doc, consumer))
    errors = [m for m in judged if m.severity == "error"]
    if errors:
        raise PresetError(f"cannot import {doc.file}: " + _listed(errors, "") +
                          f"\n(`traindeck config fix {doc.file}` makes it strict JSON)")
    if out is not None:
        out += judged


# A preset is read at every `presets list` and dashboard start: an imported config is kept far below what
# `config check` accepts (bounded.MAX_BYTES), so a wrong file given to import cannot slow every later start.
MAX_IMPORT_BYTES = 1024 * 1024


def _refuse_big_import(path: Path) -> None:
    try:
        size = path.stat().st_size
    except OSError:
        return  # load_file says why it cannot be read
    if size > MAX_IMPORT_BYTES:
        raise PresetError(f"cannot import {path}: it is {size / 2**20:.1f} MB; a preset takes a config of at most "
                          f"{MAX_IMPORT_BYTES / 2**20:.0f} MB (accelerate and DeepSpeed configs are a few KB): "
                          "is this the right file?")


def import_accelerate_default(name: str, **kwargs: Any) -> Preset:
    """Import the config `accelerate config` wrote to its default location."""
    location = paths.accelerate_default_config()
    if not location.is_file():
        raise PresetError(f"no accelerate default config at {location} (run `accelerate config` first, or give "
                          "the file)")
    return import_preset([location], name, **kwargs)


# ------------------------------------------------------------------------------------------ export


def render_files(preset: Preset, directory: Path) -> dict[str, str]:
    """The files a preset becomes in `directory` ({file name: text}): the launcher's own renderer, so an exported
    preset and a launched one are the same files."""
    return render_sections(preset.accelerate, preset.deepspeed, Path(directory).absolute())


def preset_file_name(preset: Preset) -> str:
    """The name of the preset's own file in an export folder."""
    return preset.name + PRESET_FILE_SUFFIX


def shareable(preset: Preset) -> tuple[Preset, list[str]]:
    """A copy of `preset` fit to be shared, and the `env` variables left out of it because they hold a secret (the
    rules that refuse them on save). PresetError when a secret sits anywhere else (in a config section)."""
    shared = copy.deepcopy(preset)
    left_out = [where.removeprefix("env.") for where, _why in _env_secrets(shared.env)]
    shared.env = {k: v for k, v in shared.env.items() if k not in left_out}
    found = find_secrets(preset_to_mapping(shared))
    if found:
        where, why = found[0]
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise PresetError(f"refusing to export preset '{preset.name}': '{where}' looks like a secret ({why}){more}; "
                          "keep tokens, keys and passwords in the environment and remove them from the preset")
    return shared, left_out


def export_preset(name_or_preset: str | Preset, directory: Path | str, *,
                  left_out: list[str] | None = None) -> list[Path]:
    """Write accelerate_config.yaml (when there is an accelerate section) and ds_config.json (when DeepSpeed is
    used) into `directory`, as accelerate and the deepspeed launcher accept them: the YAML's deepspeed_config_file
    is the JSON's absolute path, with no inline DeepSpeed keys beside it. Beside them NAME.traindeck.yaml, the
    preset itself as the store writes it (private, 0600), which `import_preset` restores whole. `env` variables
    holding a secret are left out of it and their names appended to `left_out` (when given). Returns the files
    written: the tools' files (the YAML first), then the preset file."""
    preset = load_preset(name_or_preset) if isinstance(name_or_preset, str) else name_or_preset
    directory = Path(directory).expanduser().absolute()
    files = render_files(preset, directory)
    if not files:
        raise PresetError(f"preset '{preset.name}' has no accelerate or DeepSpeed config to export")
    check_name(preset.name)  # it names the preset file
    shared, dropped = shareable(preset)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for file_name in sorted(files, key=lambda n: not n.endswith(".yaml")):  # the YAML first
        target = directory / file_name
        atomic_write_text(target, files[file_name], mode=0o644)
        written.append(target)
    target = directory / preset_file_name(preset)
    atomic_write_text(target, _preset_file_text(shared, dropped), mode=0o600)
    written.append(target)
    if left_out is not None:
        left_out += dropped
    return written


def _preset_file_text(preset: Preset, dropped: list[str]) -> str:
    head = [f"# traindeck preset '{preset.name}': `traindeck presets import {preset_file_name(preset)} --name NAME`",
            "# restores it whole (launcher, num_processes, env, configs)."]
    if dropped:
        head.append(f"# Left out as secrets (set them in the environment): {', '.join(dropped)}.")
    return "\n".join(head) + "\n" + dump_preset(preset)


def export_summary(written: Sequence[Path], left_out: Sequence[str] = ()) -> str:
    """One line telling the user what an export wrote (and which secrets it left out)."""
    what = {ACCELERATE_CONFIG: "for accelerate launch --config_file", DS_CONFIG: "DeepSpeed's config"}
    parts = [f"{p.name} ({what.get(p.name, 'the whole preset, for traindeck presets import')})" for p in written]
    folder = written[0].parent if written else ""
    line = f"Exported to {folder}: " + ", ".join(parts)
    if left_out:
        line += f"; left out as secrets: {', '.join(left_out)}"
    return line
