"""`traindeck presets ...`: list, show, import, export, delete (and rename) launch presets."""

from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path
from typing import TYPE_CHECKING

from traindeck.backend.cli import UserError

if TYPE_CHECKING:
    from traindeck.backend.config import Message
    from traindeck.backend.presets import Preset

ORDER = 30


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("presets", help="list, show, import, export and delete launch presets",
                       description="Launch presets: a launcher with its accelerate and DeepSpeed configs.")
    p.set_defaults(handler=lambda args: (p.print_help(), 2)[1])
    s = p.add_subparsers(dest="presets_command", metavar="SUBCOMMAND")

    q = s.add_parser("list", help="list the built-in and your presets")
    q.add_argument("--json", action="store_true", help="print a JSON list")
    q.set_defaults(handler=_list)

    q = s.add_parser("show", help="print a preset (YAML) and its validation messages")
    q.add_argument("name", metavar="NAME")
    q.set_defaults(handler=_show)

    q = s.add_parser("import", help="make a preset from an accelerate YAML and/or a DeepSpeed JSON, or from an "
                     "exported preset file / folder")
    q.add_argument("files", metavar="FILE", nargs="*",
                   help="an accelerate YAML and/or a DeepSpeed JSON (at most two), or a NAME.traindeck.yaml preset "
                        "file (alone), or a folder `presets export` wrote into")
    q.add_argument("--name", required=True, help="the new preset's name")
    q.add_argument("--accelerate-default", action="store_true",
                   help="import the config `accelerate config` wrote to its default location")
    q.add_argument("--description", help="one line saying when to use the preset")
    q.add_argument("--force", action="store_true", help="replace an existing preset of that name")
    q.set_defaults(handler=_import)

    q = s.add_parser("export", help="write a preset's accelerate_config.yaml / ds_config.json into a folder, with "
                     "NAME.traindeck.yaml (the whole preset, secrets left out) beside them")
    q.add_argument("name", metavar="NAME")
    q.add_argument("--dir", required=True, metavar="DIR", help="folder to write into (created if missing)")
    q.set_defaults(handler=_export)

    q = s.add_parser("delete", help="delete one of your presets")
    q.add_argument("name", metavar="NAME")
    q.set_defaults(handler=_delete)

    q = s.add_parser("rename", help="rename one of your presets")
    q.add_argument("old", metavar="NAME")
    q.add_argument("new", metavar="NEW_NAME")
    q.set_defaults(handler=_rename)


def _presets() -> types.ModuleType:
    from traindeck.backend import presets

    return presets


def _list(args: argparse.Namespace) -> int:
    presets = _presets()
    problems: list[str] = []
    found = presets.list_presets(problems)
    if args.json:
        print(json.dumps([{"name": p.name, "launcher": p.launcher, "builtin": p.builtin, "description": p.description,
                           "deepspeed": p.deepspeed is not None, "processes": p.process_count(),
                           "path": str(p.path) if p.path else None} for p in found], indent=2))
    else:
        width = max((len(p.name) for p in found), default=4)
        for p in found:
            origin = "built-in" if p.builtin else "user"
            print(f"{p.name:<{width}}  {origin:<8}  {p.launcher:<10}  {p.description}")
    for problem in problems:
        print(f"traindeck: {problem}", file=sys.stderr)
    return 0


def _show(args: argparse.Namespace) -> int:
    presets = _presets()
    preset = _load(args.name)
    header = f"# built-in preset ({preset.path})" if preset.builtin else f"# {preset.path}"
    print(header)
    sys.stdout.write(presets.dump_preset(preset))
    messages = presets.validate_preset(preset)
    print()
    if messages:
        print(f"# {len(messages)} validation message(s):")
        for m in messages:
            print(m.format())
    else:
        print("# validation: no problems found")
    return 0


def _import(args: argparse.Namespace) -> int:
    presets = _presets()
    files = list(args.files)
    if args.accelerate_default:
        from traindeck.backend.core import accelerate_default_config

        location = accelerate_default_config()
        if not location.is_file():
            raise UserError(f"no accelerate default config at {location} (run `accelerate config` first)")
        files.insert(0, location)
    if not files:
        raise UserError("give a FILE to import (an accelerate YAML and/or a DeepSpeed JSON) or --accelerate-default")
    slips: list[Message] = []  # JSON slips DeepSpeed reads past: warnings, as `config check` says
    try:
        preset = presets.import_preset(files, args.name, overwrite=args.force, description=args.description,
                                       slips=slips)
    except presets.PresetError as exc:
        raise UserError(str(exc)) from None
    for m in slips[:presets.LISTED_SLIPS]:
        print(m.format())
    if len(slips) > presets.LISTED_SLIPS:
        print(f"and {len(slips) - presets.LISTED_SLIPS} more JSON slips (`traindeck config check` lists them)")
    env = f", env {', '.join(preset.env)}" if preset.env else ""
    print(f"imported preset '{preset.name}' ({preset.launcher} launcher, {preset.process_count()} process(es)"
          f"{env}{', with a DeepSpeed config' if preset.deepspeed is not None else ''}) -> {preset.path}")
    beside = _preset_files_beside(files, presets.PRESET_FILE_SUFFIX)
    if beside and not any(str(f).endswith(presets.PRESET_FILE_SUFFIX) for f in files):
        print(f"note: {beside[0]} beside it holds the whole exported preset (launcher, processes, env): "
              "import that file to get the preset back as it was shared")
    messages = presets.validate_preset(preset)
    for m in messages:
        print(m.format())
    return 0


def _preset_files_beside(files: list[Path | str], suffix: str) -> list[Path]:
    """Preset files an export wrote beside the config files imported (none when a folder was given)."""
    found: list[Path] = []
    for file in files:
        path = Path(file).expanduser()
        if path.is_file():
            found += sorted(p for p in path.parent.glob("*" + suffix) if not p.name.startswith(".") and p.is_file())
    return found


def _export(args: argparse.Namespace) -> int:
    presets = _presets()
    preset = _load(args.name)
    left_out: list[str] = []
    try:
        written = presets.export_preset(preset, args.dir, left_out=left_out)
    except presets.PresetError as exc:
        raise UserError(str(exc)) from None
    except OSError as exc:
        raise UserError(f"cannot write into {args.dir}: {exc.strerror or exc}") from None
    print(presets.export_summary(written, left_out))
    return 0


def _delete(args: argparse.Namespace) -> int:
    presets = _presets()
    try:
        presets.delete_preset(args.name)
    except presets.PresetError as exc:
        raise UserError(str(exc)) from None
    print(f"deleted preset '{args.name}'")
    return 0


def _rename(args: argparse.Namespace) -> int:
    presets = _presets()
    try:
        preset = presets.rename_preset(args.old, args.new)
    except presets.PresetError as exc:
        raise UserError(str(exc)) from None
    print(f"renamed preset '{args.old}' to '{preset.name}'")
    return 0


def _load(name: str) -> Preset:
    presets = _presets()
    try:
        return presets.load_preset(name)
    except presets.PresetError as exc:
        raise UserError(str(exc)) from None
