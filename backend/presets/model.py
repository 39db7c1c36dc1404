"""A preset as data: the Preset model, its file format (schema version, migrations of older files, reading and
writing the YAML) and the rules for names. No store, no I/O beyond reading one given file.

The preset package has one module per seam: preset_model (this), preset_secrets, preset_store, preset_transfer
(import/export), preset_validation; backend/presets/__init__.py re-exports them all for callers.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from traindeck.backend.config.bounded import BoundedSafeLoader, BoundsError, read_config_text

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

LauncherName = Literal["accelerate", "deepspeed", "python", "torchrun"]
# The launchers a preset may name, in the order the preset editor offers them.
LAUNCHERS: tuple[LauncherName, ...] = ("accelerate", "deepspeed", "python", "torchrun")
ACCEPTED_LAUNCHERS = LAUNCHERS

# The nvme_path the zero-infinity-nvme preset ships with: the user must replace it (validation says so).
NVME_PLACEHOLDER = "/path/to/nvme"


@dataclass
class Preset:
    name: str
    launcher: LauncherName
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
    # Environment variables every run of this preset needs (cpu-demo: DS_ACCELERATOR=cpu). The launch sets them
    # over the inherited environment and under the user's own variables; traindeck's key, never written into the
    # accelerate or DeepSpeed files.
    env: dict[str, str] = field(default_factory=dict)
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

# An exported preset's own file: NAME.traindeck.yaml beside the tools' files (`export_preset`), read back by
# `import_preset`. A YAML whose top holds one of PRESET_MARKERS is a preset file, whatever its name (no accelerate
# config or DeepSpeed JSON has these keys at its top).
PRESET_FILE_SUFFIX = ".traindeck.yaml"
PRESET_MARKERS = frozenset({"launcher", "schema_version"})


def is_preset_data(data: Any) -> bool:
    """True when a parsed file is a traindeck preset rather than an accelerate or DeepSpeed config."""
    return isinstance(data, dict) and bool(PRESET_MARKERS & set(map(str, data)))


_KNOWN_KEYS = ("schema_version", "name", "description", "launcher", "num_processes", "env", "accelerate",
               "deepspeed")

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_env(env: Any) -> None:
    """Raise PresetError (one line) unless `env` is a mapping of environment variable names to text values."""
    if not isinstance(env, dict):
        raise PresetError("'env' must be a mapping of variable names to values (NAME: value), not "
                          f"{type(env).__name__}")
    for name, value in env.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise PresetError(f"env: {str(name)!r} is not an environment variable name (letters, digits and '_', "
                              "not starting with a digit)")
        if not isinstance(value, str):
            if not isinstance(value, (int, float)):
                raise PresetError(f"env.{name} must be text, not {value!r}")
            written = str(value).lower() if isinstance(value, bool) else str(value)
            raise PresetError(f"env.{name} must be text, not {value!r}: quote it ({name}: '{written}')")
        if "\0" in value:
            raise PresetError(f"env.{name}: a value cannot hold a NUL character")

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
    if launcher not in ACCEPTED_LAUNCHERS:
        raise PresetError(f"{where}: launcher must be one of {', '.join(ACCEPTED_LAUNCHERS)}, not {launcher!r}")
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
    env = data.get("env")
    env = {} if env is None else env
    try:
        check_env(env)
    except PresetError as exc:
        raise PresetError(f"{where}: {exc}") from None
    extra = {k: v for k, v in data.items() if k not in _KNOWN_KEYS}
    return Preset(name=preset_name, launcher=launcher, description=description, accelerate=sections["accelerate"],
                  deepspeed=sections["deepspeed"], builtin=builtin, schema_version=SCHEMA_VERSION, extra=extra,
                  num_processes=nproc, env=dict(env), path=path)


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
    if preset.env:
        out["env"] = dict(preset.env)
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
    """Read one preset file. Raises PresetError (one line, with the place) when it cannot be read or parsed."""
    path = Path(path)
    try:
        text = read_config_text(path)  # the bounds of any config: size, binary, encoding
    except OSError as exc:
        raise PresetError(f"cannot read the preset file {path}: {exc.strerror or exc}") from None
    except BoundsError as exc:
        at = f":{exc.line}" if exc.line else ""
        raise PresetError(f"{path}{at}: the preset file cannot be read: {exc}") from None
    try:
        # Depth and alias expansion bounded: a shared preset is as hostile as any config file.
        data = yaml.load(text, Loader=BoundedSafeLoader)  # noqa: S506 (a SafeLoader subclass)
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
