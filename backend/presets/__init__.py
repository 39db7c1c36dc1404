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

The code lives in modules along the seams above, each with one job; this module gathers them so callers keep
importing from `traindeck.backend.presets`:
  preset_model       the Preset, its file format and migrations, names
  preset_secrets     keys and values that look like secrets (refused before saving)
  preset_store       built-ins and the user's presets on disk
  preset_transfer    import from accelerate/DeepSpeed files, export to them
  preset_validation  what is wrong with a preset before launch
"""

from __future__ import annotations

from traindeck.backend.presets.files import (
    builtin_dir,
    delete_preset,
    list_presets,
    load_builtin,
    load_preset,
    preset_names,
    rename_preset,
    save_preset,
)
from traindeck.backend.presets.model import (
    BUILTIN_NAMES,
    LAUNCHERS,
    NVME_PLACEHOLDER,
    SCHEMA_VERSION,
    Preset,
    PresetError,
    check_name,
    dump_preset,
    preset_from_mapping,
    preset_to_mapping,
    read_preset_file,
)
from traindeck.backend.presets.secrets import find_secrets, looks_like_secret_key
from traindeck.backend.presets.transfer import (
    export_preset,
    import_accelerate_default,
    import_preset,
    render_files,
)
from traindeck.backend.presets.validation import validate_preset

__all__ = [
    "BUILTIN_NAMES", "LAUNCHERS", "NVME_PLACEHOLDER", "Preset", "PresetError", "SCHEMA_VERSION", "builtin_dir",
    "check_name", "delete_preset", "dump_preset", "export_preset", "find_secrets", "import_accelerate_default",
    "import_preset", "list_presets", "load_builtin", "load_preset", "looks_like_secret_key", "preset_from_mapping",
    "preset_names", "preset_to_mapping", "read_preset_file", "rename_preset", "render_files", "save_preset",
    "validate_preset",
]
