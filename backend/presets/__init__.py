"""Presets: a named launch set-up (launcher + accelerate config + DeepSpeed config), built in or the user's own.

Built-ins live in resources/presets/NAME.yaml (read-only); the user's presets in presets_dir()/NAME.yaml, written
atomically with mode 0600. A preset file is YAML:

    schema_version: 1
    name: my-zero2
    description: one line saying when to use it
    launcher: accelerate | deepspeed | python
    num_processes: 2          # optional; for launchers without an accelerate config (deepspeed, python)
    env: {NAME: value}        # optional; variables every run needs (the user's own variables win on a clash)
    accelerate: {...}         # the accelerate launch config, as `accelerate config` writes it (or absent)
    deepspeed: {...}          # the DeepSpeed JSON config, as a mapping (or absent)

`env` is traindeck's own key: never written into the accelerate or DeepSpeed files, and refused on save when a
name or value looks like a secret. Unknown top-level keys are kept (Preset.extra) and written back. The config sections are kept exactly as given:
nothing is added, dropped or reordered. Exporting writes the files `accelerate launch` / `deepspeed` read (see
`export_preset`; the same renderer the launcher uses) and beside them NAME.traindeck.yaml, this file's format
with secret `env` variables left out, which importing restores whole.

The code lives in modules along the seams above, each with one job; this module gathers them so callers keep
importing from `traindeck.backend.presets`:
  preset_model       the Preset, its file format and migrations, names
  preset_secrets     keys and values that look like secrets (refused before saving)
  preset_store       built-ins and the user's presets on disk
  preset_transfer    import from accelerate/DeepSpeed files, export to them
  preset_validation  what is wrong with a preset before launch
"""

import lazy_loader

# The face: every name below is declared, with its module, in __init__.pyi (what type checkers read) and imported
# on first use, so importing one module of the package never loads the rest.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
