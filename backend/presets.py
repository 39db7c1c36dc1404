"""Presets: a named launch set-up (launcher + accelerate config + DeepSpeed config), built in or the user's own.

Built-ins live in resources/presets/NAME.yaml (read-only); the user's presets in presets_dir()/NAME.yaml, written
atomically with mode 0600. A preset file is YAML:

    schema_version: 1
    name: my-zero2
    description: one line saying when to use it
    launcher: accelerate | deepspeed | python
    num_processes: 2          # optional; for launchers without an accelerate config (deepspeed, python)
    accelerate: {...}         # the accelerate launch config, as `accelerate config` writes it (or absent)
    deepspeed: {...}          # the DeepSpeed JSON config, as a mapping (or absent)

Unknown top-level keys are kept (Preset.extra) and written back. The config sections are kept exactly as given:
nothing is added, dropped or reordered. Exporting writes the files `accelerate launch` / `deepspeed` read (see
`export_preset`; the same renderer the launcher uses).
"""

from __future__ import annotations

import copy
import difflib
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml

from traindeck.backend import paths
from traindeck.backend.fileio import atomic_write_text

if TYPE_CHECKING:
    from traindeck.backend.config.messages import Message

SCHEMA_VERSION = 1

# Names of the built-in presets (resources/presets/NAME.yaml). The advisor and the demo refer to them by name.
BUILTIN_NAMES = (
    "single-process",
    "ddp",
    "zero1",
    "zero2",
    "zero2-offload",
    "zero3",
    "zero3-offload",
    "zero-infinity-nvme",
    "fsdp-full-shard",
    "fsdp-shard-grad-op",
    "fsdp-offload",
    "cpu-demo",
)

LAUNCHERS = ("accelerate", "deepspeed", "python")

# The nvme_path the zero-infinity-nvme preset ships with: the user must replace it (validation says so).
NVME_PLACEHOLDER = "/path/to/nvme"


@dataclass
class Preset:
    name: str
    launcher: Literal["accelerate", "deepspeed", "python"]
    description: str = ""
    # The accelerate launch config as a mapping (what `accelerate config` writes), or None for deepspeed/python.
    # When `deepspeed` is set too, export writes it to ds_config.json and points deepspeed_config_file at it.
    accelerate: dict[str, Any] | None = None
    # The DeepSpeed JSON config as a mapping, or None when DeepSpeed is not used.
    deepspeed: dict[str, Any] | None = None
    builtin: bool = False
    schema_version: int = SCHEMA_VERSION
    # Keys found in the preset file that this version does not know: kept and written back, never dropped.
    extra: dict[str, Any] = field(default_factory=dict)
    # Processes to start when there is no accelerate config to say it (deepspeed/python launchers); None: the
    # accelerate config's num_processes, else 1. See `process_count()`.
    num_processes: int | None = None
    # Where the preset was read from (None for one built in memory); not part of the preset's value.
    path: Path | None = field(default=None, compare=False, repr=False)

    def process_count(self) -> int:
        """Processes this preset starts: num_processes, else the accelerate config's num_processes, else 1."""
        if isinstance(self.num_processes, int) and self.num_processes > 0:
            return self.num_processes
        n = (self.accelerate or {}).get("num_processes")
        return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1

    def uses_deepspeed(self) -> bool:
        return self.deepspeed is not None


class PresetError(Exception):
    """A preset cannot be read, found, saved or imported; the message says which and why, in one line."""


# ------------------------------------------------------------------------------------------ file format

_KNOWN_KEYS = ("schema_version", "name", "description", "launcher", "num_processes", "accelerate", "deepspeed")

# Older file versions and how to bring them to the current one: version -> function(data) -> data (next version).
# Version 0 is a hand-written preset without `schema_version`, which may use the natural long names for the
# two sections.
_LEGACY_SECTION_NAMES = {"accelerate_config": "accelerate", "deepspeed_config": "deepspeed", "ds_config": "deepspeed"}


def _migrate_0_to_1(data: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        new = _LEGACY_SECTION_NAMES.get(key, key) if isinstance(key, str) else key
        if new in out or (new != key and new in data):
            raise PresetError(f"the old key '{key}' and the new key '{new}' are both present; keep one")
        out[new] = value
    out["schema_version"] = 1
    return out


_MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {0: _migrate_0_to_1}


def preset_from_mapping(data: Any, *, name: str | None = None, builtin: bool = False,
                        path: Path | None = None) -> Preset:
    """A Preset from a preset file's data (migrating older versions). `name` (the file's stem) wins over the
    name written inside, which may be stale after a manual copy."""
    where = f"{path}" if path else "the preset"
    if not isinstance(data, dict):
        raise PresetError(f"{where}: expected a mapping of keys at the top of the preset file")
    version = data.get("schema_version", 0)
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise PresetError(f"{where}: schema_version must be a whole number, not {version!r}")
    if version > SCHEMA_VERSION:
        raise PresetError(f"{where} was written by a newer traindeck (preset schema version {version}; this one "
                          f"reads up to {SCHEMA_VERSION}): upgrade traindeck to use it")
    while version < SCHEMA_VERSION:
        try:
            data = _MIGRATIONS[version](dict(data))
        except PresetError as exc:
            raise PresetError(f"{where}: {exc}") from None
        version = data["schema_version"]
    preset_name = name if name is not None else data.get("name")
    if not isinstance(preset_name, str) or not preset_name:
        raise PresetError(f"{where}: the preset has no name")
    launcher = data.get("launcher", "accelerate")
    if launcher not in LAUNCHERS:
        raise PresetError(f"{where}: launcher must be one of {', '.join(LAUNCHERS)}, not {launcher!r}")
    description = data.get("description", "") or ""
    if not isinstance(description, str):
        raise PresetError(f"{where}: description must be text")
    sections: dict[str, dict[str, Any] | None] = {}
    for key in ("accelerate", "deepspeed"):
        value = data.get(key)
        if value is not None and not isinstance(value, dict):
            raise PresetError(f"{where}: '{key}' must be a mapping of config keys (or absent)")
        sections[key] = value
    nproc = data.get("num_processes")
    if nproc is not None and (not isinstance(nproc, int) or isinstance(nproc, bool) or nproc < 1):
        raise PresetError(f"{where}: num_processes must be a whole number >= 1, not {nproc!r}")
    extra = {k: v for k, v in data.items() if k not in _KNOWN_KEYS}
    return Preset(name=preset_name, launcher=launcher, description=description, accelerate=sections["accelerate"],
                  deepspeed=sections["deepspeed"], builtin=builtin, schema_version=SCHEMA_VERSION, extra=extra,
                  num_processes=nproc, path=path)


def preset_to_mapping(preset: Preset) -> dict[str, Any]:
    """The preset file's data, in the file's key order; unknown keys (extra) follow, as they came."""
    out: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "name": preset.name,
        "description": preset.description,
        "launcher": preset.launcher,
    }
    if preset.num_processes is not None:
        out["num_processes"] = preset.num_processes
    if preset.accelerate is not None:
        out["accelerate"] = copy.deepcopy(preset.accelerate)
    if preset.deepspeed is not None:
        out["deepspeed"] = copy.deepcopy(preset.deepspeed)
    for key, value in preset.extra.items():
        if key not in out:
            out[key] = copy.deepcopy(value)
    return out


def dump_preset(preset: Preset) -> str:
    """The preset file's text."""
    # libyaml's emitter when present: the same text as the pure-Python one, several times faster on big presets.
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return yaml.dump(preset_to_mapping(preset), Dumper=dumper, sort_keys=False, allow_unicode=True, width=100)


def read_preset_file(path: Path, *, builtin: bool = False) -> Preset:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PresetError(f"cannot read the preset file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise PresetError(f"the preset file {path} is not UTF-8 text") from None
    try:
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        raise PresetError(f"{path}{at}: the preset file is not valid YAML: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise PresetError(f"{path}: the preset file is not valid YAML: {exc}") from None
    return preset_from_mapping(data, name=path.stem, builtin=builtin, path=path)


# ------------------------------------------------------------------------------------------ names


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def check_name(name: str) -> None:
    """Raise PresetError unless `name` is a usable preset name (it becomes a file name)."""
    if not isinstance(name, str) or not name:
        raise PresetError("a preset needs a name")
    if _NAME.fullmatch(name) and ".." not in name and not name.lower().endswith((".yaml", ".yml", ".tmp")):
        return
    bad = sorted({c for c in name if not (c.isascii() and (c.isalnum() or c in "._-"))})
    why = (f"it contains {', '.join(repr(c) for c in bad)}" if bad else
           "it is too long" if len(name) > 64 else
           "it must start with a letter or digit" if not name[0].isalnum() else
           "it must not contain '..'" if ".." in name else "it must not end in a file extension")
    raise PresetError(f"'{name}' cannot be a preset name: {why} (use letters, digits, '.', '_' and '-', up to 64 "
                      "characters, starting with a letter or digit)")


def _builtin_clash(name: str) -> str | None:
    for builtin in BUILTIN_NAMES:
        if builtin.lower() == name.lower():
            return builtin
    return None


# ------------------------------------------------------------------------------------------ secrets


_SECRET_WORDS = {"token", "secret", "secrets", "password", "passwd", "pwd", "passphrase", "apikey", "credential",
                 "credentials", "privatekey", "accesskey", "secretkey", "authtoken", "bearer", "cookie"}
_SECRET_PAIRS = {("api", "key"), ("access", "key"), ("private", "key"), ("secret", "key"), ("auth", "token"),
                 ("client", "secret"), ("session", "key"), ("signing", "key"), ("encryption", "key"),
                 ("auth", "key"), ("license", "key"), ("wandb", "key"), ("hf", "key"), ("openai", "key")}
# Values that are credentials whatever key holds them: Hugging Face, OpenAI-style, GitHub, AWS, Slack tokens.
_SECRET_VALUE = re.compile(r"(hf_[A-Za-z0-9]{30,}|sk-[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{30,}|"
                           r"AKIA[0-9A-Z]{16}|xox[abposr]-[A-Za-z0-9-]{10,})")


def _words(key: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", key)
    return [w for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if w]


def looks_like_secret_key(key: str) -> bool:
    """hub_token, wandb_api_key, HF_TOKEN, password, aws_secret_access_key, apiKey ... but not tokenizer_name,
    max_tokens, calculate_per_token_loss, private_key_path or experiment_key."""
    words = _words(key)
    if not words:
        return False
    # The key names a secret when it ends in one (calculate_per_token_loss and private_key_path do not).
    if words[-1] in _SECRET_WORDS or tuple(words[-2:]) in _SECRET_PAIRS:
        return True
    return words == ["key"]


def find_secrets(data: Any, path: tuple[str | int, ...] = ()) -> list[tuple[str, str]]:
    """(dotted path, why) for every value that is a secret or sits under a key that names one."""
    from traindeck.backend.config.messages import format_path

    found: list[tuple[str, str]] = []
    if isinstance(data, dict):
        for key, value in data.items():
            here = path + (str(key),)
            if looks_like_secret_key(str(key)) and value not in (None, "", [], {}) and not isinstance(value, bool) \
                    and not isinstance(value, dict):
                found.append((format_path(here), f"the key '{key}' names a secret"))
            else:
                found += find_secrets(value, here)
    elif isinstance(data, list):
        for i, item in enumerate(data):
            found += find_secrets(item, path + (i,))
    elif isinstance(data, str) and _SECRET_VALUE.search(data):
        found.append((format_path(path), "the value looks like an access token"))
    return found


def _refuse_secrets(preset: Preset) -> None:
    found = find_secrets(preset_to_mapping(preset))
    if found:
        where, why = found[0]
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise PresetError(f"refusing to save preset '{preset.name}': '{where}' looks like a secret ({why}){more}; "
                          "presets are plain files meant to be shared, so keep tokens, keys and passwords in the "
                          "environment (e.g. HF_TOKEN, WANDB_API_KEY) and remove them from the preset")


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
    if preset.launcher not in LAUNCHERS:
        raise PresetError(f"launcher must be one of {', '.join(LAUNCHERS)}, not {preset.launcher!r}")
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


# ------------------------------------------------------------------------------------------ import


def import_preset(files: Sequence[Path | str], name: str, *, save: bool = True, overwrite: bool = False,
                  description: str | None = None) -> Preset:
    """A preset from an accelerate YAML and/or a DeepSpeed JSON (either order; kinds told by their keys).

    An accelerate YAML whose deepspeed_config.deepspeed_config_file points at a JSON brings that JSON in (unless a
    DeepSpeed JSON is given beside it, which then wins); the preset keeps the DeepSpeed settings in its
    `deepspeed` section and drops the (machine-specific) path, which export writes afresh. Everything else is kept
    exactly, unknown keys included. Saved as a user preset unless `save=False`.
    """
    from traindeck.backend.config.source import load_file
    from traindeck.backend.config.validate import referenced_deepspeed_file

    check_name(name)
    if _builtin_clash(name):
        raise PresetError(f"'{name}' is the name of a built-in preset; choose another name")
    if not files:
        raise PresetError("give an accelerate YAML and/or a DeepSpeed JSON to import")
    if len(files) > 2:
        raise PresetError("give at most two files: an accelerate YAML and a DeepSpeed JSON")
    accelerate_doc = deepspeed_doc = None
    for file in files:
        path = Path(file).expanduser()
        if not path.is_file():
            raise PresetError(f"no such file: {path}")
        _refuse_big_import(path)
        doc = load_file(path)
        if doc.data is None:
            first = doc.syntax[0].format() if doc.syntax else f"{path}: cannot be read"
            raise PresetError(f"cannot import {path}: {first}")
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
            ref_doc = load_file(ref, kind="deepspeed")
            if ref_doc.data is None:
                why = ref_doc.syntax[0].format() if ref_doc.syntax else "cannot be read"
                raise PresetError(f"{accelerate_doc.file}: its deepspeed_config_file {ref}: {why}")
            deepspeed = copy.deepcopy(ref_doc.data)
            sources.append(f"DeepSpeed config {ref}")
        if ref is not None and accelerate is not None:
            section = accelerate["deepspeed_config"]
            section.pop("deepspeed_config_file", None)
    if deepspeed_doc is not None:
        sources.append(f"DeepSpeed config {deepspeed_doc.file}")
    launcher: Literal["accelerate", "deepspeed", "python"] = "accelerate" if accelerate is not None else "deepspeed"
    preset = Preset(name=name, launcher=launcher,
                    description=description if description is not None else "imported from " + " and ".join(sources),
                    accelerate=accelerate, deepspeed=deepspeed)
    if save:
        save_preset(preset, overwrite=overwrite)
    return preset


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
    from traindeck.backend.launch.builders import render_config_files

    return render_config_files(preset, Path(directory).absolute())


def export_preset(name_or_preset: str | Preset, directory: Path | str) -> list[Path]:
    """Write accelerate_config.yaml (when there is an accelerate section) and ds_config.json (when DeepSpeed is
    used) into `directory`, as accelerate and the deepspeed launcher accept them: the YAML's deepspeed_config_file
    is the JSON's absolute path, with no inline DeepSpeed keys beside it. Returns the files written."""
    preset = load_preset(name_or_preset) if isinstance(name_or_preset, str) else name_or_preset
    directory = Path(directory).expanduser().absolute()
    files = render_files(preset, directory)
    if not files:
        raise PresetError(f"preset '{preset.name}' has no accelerate or DeepSpeed config to export")
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for file_name in sorted(files, key=lambda n: not n.endswith(".yaml")):  # the YAML first
        target = directory / file_name
        atomic_write_text(target, files[file_name], mode=0o644)
        written.append(target)
    return written


# ------------------------------------------------------------------------------------------ validation


def validate_preset(preset: Preset, *, world_size: int | None = None, script: str | None = None) -> list[Message]:
    """The config checks on a preset's sections, as export (and launch) will hand them to the tools, located in
    the preset file (line and column of each key) where the preset came from one; plus what only a preset can get
    wrong (a placeholder NVMe path, a launcher without its config). Paths are prefixed with the section
    ("deepspeed.zero_optimization.stage"). `script` (the training script chosen to launch it) tells who fills the
    DeepSpeed config's "auto" values (the HF Trainer, accelerate, or nobody)."""
    import json
    import tempfile

    from traindeck.backend.config.auto_fill import script_consumer
    from traindeck.backend.config.messages import Message, sort_messages
    from traindeck.backend.config.source import SourceDocument, parse_text
    from traindeck.backend.config.validate import check_document

    text: str | None = None
    if preset.path is not None and preset.path.is_file():
        try:
            text = preset.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            text = None
    file = str(preset.path) if text is not None else None
    whole = parse_text(text if text is not None else dump_preset(preset), file=file, fmt="yaml")
    if whole.data is None:
        return list(whole.syntax)
    if text is not None and not _same_sections(whole.data, preset):
        # The file changed since the preset was read (or the preset was edited in memory): locate in its dump.
        file = None
        whole = parse_text(dump_preset(preset), fmt="yaml")

    def located(path: tuple[str | int, ...]) -> tuple[int | None, int | None]:
        return whole.where(path) if file is not None else (None, None)

    def sub_doc(section: str, data: Any, kind: Literal["accelerate", "deepspeed"]) -> SourceDocument | None:
        if not isinstance(data, dict):
            return None
        locations = {p[1:]: pos for p, pos in whole.locations.items() if p[:1] == (section,) and len(p) > 1}
        # The section's own header stands for keys the export adds (deepspeed_config_file, a precision section).
        head = whole.locations.get((section,))
        for key in data:
            if (key,) not in locations and head is not None:
                locations[(key,)] = head
        return SourceDocument(text=" ", format="yaml", data=data, kind=kind, file=_MARK + section,
                              locations=locations)

    with tempfile.TemporaryDirectory(prefix="traindeck-preset-") as tmp:
        try:
            rendered = render_files(preset, Path(tmp))
        except Exception as exc:  # a renderer bug must not hide the preset's own problems
            rendered = {}
            line, column = located(())
            return [Message("error", "", f"the preset cannot be rendered to config files: {exc}", file, line,
                            column)] + _preset_checks(preset, located, file)
        for name, content in rendered.items():
            (Path(tmp) / name).write_text(content, encoding="utf-8")
        rendered_ds = json.loads(rendered["ds_config.json"]) if "ds_config.json" in rendered else None
        rendered_acc = yaml.safe_load(rendered["accelerate_config.yaml"]) if "accelerate_config.yaml" in rendered \
            else None
        ds_doc = sub_doc("deepspeed", rendered_ds, "deepspeed")
        acc_doc = sub_doc("accelerate", rendered_acc, "accelerate")
        checked: list[Message] = []
        consumer, why = script_consumer(script)
        if consumer is None and preset.launcher == "accelerate" and acc_doc is not None:
            # Under `accelerate launch` the HF Trainer or accelerate's own DeepSpeed integration fills "auto"
            # values (which of them: the script says); under the deepspeed launcher it is not known.
            consumer, why = "integration", "the preset launches it with accelerate"
        if acc_doc is not None:
            checked += check_document(acc_doc, world_size=world_size, deepspeed_doc=ds_doc, consumer=consumer,
                                      consumer_why=why)
        if ds_doc is not None:
            size = world_size
            if size is None:
                size = preset.process_count() if acc_doc is None or preset.launcher != "accelerate" else \
                    _accelerate_world(rendered_acc)
            checked += check_document(ds_doc, world_size=size, consumer=consumer, consumer_why=why)
    messages = (list(whole.syntax) if file is not None else []) + [_in_preset(m, file) for m in checked]
    messages += _preset_checks(preset, located, file)
    return sort_messages(dict.fromkeys(messages))


_MARK = "\0preset-section:"


def _same_sections(data: Any, preset: Preset) -> bool:
    return isinstance(data, dict) and data.get("accelerate") == preset.accelerate and \
        data.get("deepspeed") == preset.deepspeed


def _in_preset(message: Message, file: str | None) -> Message:
    """A message from a section's check, moved into the preset file: path prefixed with the section."""
    import dataclasses

    if message.file and message.file.startswith(_MARK):
        section = message.file[len(_MARK):]
        path = f"{section}.{message.path}" if message.path else section
        line, column = (message.line, message.column) if file is not None else (None, None)
        return dataclasses.replace(message, path=path, file=file, line=line, column=column)
    return message


def _accelerate_world(accelerate: dict[str, Any] | None) -> int | None:
    n = (accelerate or {}).get("num_processes")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def _preset_checks(preset: Preset, located: Callable[[tuple[str | int, ...]], tuple[int | None, int | None]],
                   file: str | None) -> list[Message]:
    from traindeck.backend.config.messages import Message, format_path

    out: list[Message] = []

    def add(severity: Literal["error", "warning"], path: tuple[str | int, ...], text: str) -> None:
        line, column = located(path)
        out.append(Message(severity, format_path(path), text, file, line, column))

    for where, value in _walk(preset.deepspeed or {}, ("deepspeed",)):
        if where[-1] == "nvme_path" and isinstance(value, str) and value.rstrip("/") == NVME_PLACEHOLDER:
            add("error", where, f"'{NVME_PLACEHOLDER}' is a placeholder: set it to a folder on a local NVMe drive "
                                "with room for the offloaded tensors")
    for where, value in _walk(preset.accelerate or {}, ("accelerate",)):
        if where[-1] in ("offload_param_nvme_path", "offload_optimizer_nvme_path") and isinstance(value, str) \
                and value.rstrip("/") == NVME_PLACEHOLDER:
            add("error", where, f"'{NVME_PLACEHOLDER}' is a placeholder: set it to a folder on a local NVMe drive")
    if preset.launcher == "deepspeed" and preset.deepspeed is None:
        add("error", ("launcher",), "the deepspeed launcher needs a DeepSpeed config: add a 'deepspeed' section")
    if preset.launcher == "accelerate" and preset.accelerate is None:
        add("warning", ("launcher",), "no 'accelerate' section: a minimal accelerate config will be used")
    if preset.launcher != "accelerate" and preset.accelerate is not None:
        add("warning", ("accelerate",), f"the {preset.launcher} launcher does not read the accelerate config")
    if preset.accelerate is not None and preset.deepspeed is not None:
        inline = (preset.accelerate.get("deepspeed_config") or {})
        if isinstance(inline, dict):
            from traindeck.backend.launch.builders import INLINE_DEEPSPEED_KEYS

            for key in INLINE_DEEPSPEED_KEYS:
                if key in inline:
                    add("warning", ("accelerate", "deepspeed_config", key),
                        f"'{key}' is not used: with a 'deepspeed' section the DeepSpeed settings come from it "
                        "(accelerate refuses inline keys beside a deepspeed_config_file); set it there")
    for key in sorted(set(preset.extra) - set(_KNOWN_KEYS)):
        add("warning", (key,), f"unknown preset key '{key}' (kept, not used)")
    return out


def _walk(data: Any, path: tuple[str | int, ...]) -> Iterable[tuple[tuple[str | int, ...], Any]]:
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _walk(value, path + (key,))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield from _walk(value, path + (i,))
    else:
        yield path, data

__all__ = [
    "BUILTIN_NAMES", "LAUNCHERS", "NVME_PLACEHOLDER", "Preset", "PresetError", "SCHEMA_VERSION", "builtin_dir",
    "check_name", "delete_preset", "dump_preset", "export_preset", "find_secrets", "import_accelerate_default",
    "import_preset", "list_presets", "load_builtin", "load_preset", "looks_like_secret_key", "preset_from_mapping",
    "preset_names", "preset_to_mapping", "read_preset_file", "rename_preset", "render_files", "save_preset",
    "validate_preset",
]
