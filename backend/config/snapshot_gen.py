"""Regenerate the key snapshot (backend/config/snapshot/*.json) by introspecting the installed DeepSpeed and accelerate.

    .venv/bin/python -m traindeck.backend.config.snapshot_gen          # rewrite the snapshot files
    .venv/bin/python -m traindeck.backend.config.snapshot_gen --check  # exit 1 when they differ from the tools

This is a developer tool run in the training interpreter (it imports deepspeed, accelerate and torch); the dashboard
and `config check` never import it: they read the JSON it writes (key_snapshot.py).

What is read, and how:
  - DeepSpeed's pydantic sections (DeepSpeedConfigModel subclasses: zero_optimization, fp16, bf16, compile, ...):
    every field of the model and of the models nested in it, with its name AND alias (DeepSpeed sets
    populate_by_name, so both spellings are accepted), type, constraints, default, deprecation and the model's
    `extra` policy ("forbid": DeepSpeed refuses an unknown key).
  - the keys DeepSpeed reads loosely (the top level and dict sections read with get_scalar_param / dict.get; snapshot_trace.py):
    found by running deepspeed.runtime.config.DeepSpeedConfig on a dict that records every key it is asked for
    (and the default it is asked with). Such a section ignores keys it does not read ("loose").
  - accelerate: the dataclass fields of ClusterConfig and SageMakerConfig (commands/config/config_args.py; both
    refuse unknown top-level keys), and for each plugin section (deepspeed_config, fsdp_config, ...) the flags of
    `accelerate launch` its entries are copied onto (commands/launch.py); an entry without a flag is ignored.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import inspect
import json
import logging
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any

SNAPSHOT_DIR = Path(__file__).with_name("snapshot")

# DeepSpeed's pydantic sections: where they sit in ds_config.json -> the model that parses them (module, class).
DEEPSPEED_MODELS: dict[str, tuple[str, str]] = {
    "zero_optimization": ("deepspeed.runtime.zero.config", "DeepSpeedZeroConfig"),
    "fp16": ("deepspeed.runtime.precision_config", "DeepSpeedFP16Config"),
    "bf16": ("deepspeed.runtime.precision_config", "DeepSpeedBF16Config"),
    "tensorboard": ("deepspeed.monitor.config", "TensorBoardConfig"),
    "wandb": ("deepspeed.monitor.config", "WandbConfig"),
    "csv_monitor": ("deepspeed.monitor.config", "CSVConfig"),
    "comet": ("deepspeed.monitor.config", "CometConfig"),
    "comms_logger": ("deepspeed.comm.config", "CommsLoggerConfig"),
    "hybrid_engine": ("deepspeed.runtime.config", "HybridEngineConfig"),
    "compile": ("deepspeed.compile.config", "CompileConfig"),
    "tensor_parallel": ("deepspeed.runtime.tensor_parallel.config", "TPTrainingConfig"),
    "weight_quantization": ("deepspeed.inference.config", "WeightQuantConfig"),
    "timers.throughput": ("deepspeed.utils.config", "DeepSpeedThroughputTimerConfig"),
}

# accelerate's plugin sections -> the `accelerate launch` argument group whose flags their entries become, and the
# prefix launch adds to an entry written without it (commands/launch.py).
ACCELERATE_SECTIONS: dict[str, tuple[str, str]] = {
    "deepspeed_config": ("DeepSpeed Arguments", ""),
    "fsdp_config": ("FSDP Arguments", "fsdp_"),
    "megatron_lm_config": ("Megatron-LM Arguments", ""),
    "fp8_config": ("FP8 Arguments", "fp8_"),
    "mpirun_config": ("MPI Arguments", ""),
    "parallelism_config": ("ParallelismConfig Arguments", ""),
    "dynamo_config": ("Resource Selection Arguments", "dynamo_"),  # only its dynamo_* flags
}


# ------------------------------------------------------------------------------------------ values as JSON


def _plain(value: Any) -> Any:
    """A default as JSON: enums by value, ints that print themselves (pp_int) as int, torch dtypes as text."""
    if isinstance(value, enum.Enum):
        return _plain(value.value)
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else str(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_plain(v) for v in value]
        return sorted(items, key=repr) if isinstance(value, (set, frozenset)) else items
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) or hasattr(value, "model_dump"):
        return None  # a nested section: its own fields carry the defaults
    return str(value)


def _enum_choices(cls: type[enum.Enum]) -> list[Any]:
    """Every value an enum accepts by value, aliases included (DeepSpeed's DtypeEnum takes "fp16", "half", ...)."""
    out: list[Any] = []
    for value in list(cls._value2member_map_):
        if isinstance(value, (str, int, float, bool)) and value not in out:
            out.append(value)
    return out


# ------------------------------------------------------------------------------------------ types


def describe_type(annotation: Any, sections: dict[str, Any], path: str) -> dict[str, Any]:
    """A type annotation as {"kinds": [...], "choices": [...], "nullable": bool, "section": path}. Nested pydantic
    models are described into `sections` under `path`."""
    from pydantic import BaseModel

    out: dict[str, Any] = {"kinds": [], "choices": [], "nullable": False}

    def add_kind(kind: str) -> None:
        if kind not in out["kinds"]:
            out["kinds"].append(kind)

    def walk(tp: Any) -> None:
        origin = typing.get_origin(tp)
        if tp is type(None) or tp is None:
            out["nullable"] = True
        elif origin is typing.Union or origin is types.UnionType:
            for arg in typing.get_args(tp):
                walk(arg)
        elif origin is typing.Annotated:
            walk(typing.get_args(tp)[0])
        elif origin is typing.Literal:
            for value in typing.get_args(tp):
                if value not in out["choices"]:
                    out["choices"].append(_plain(value))
            add_kind("choice")
        elif isinstance(tp, type) and issubclass(tp, enum.Enum):
            out["choices"] += [c for c in _enum_choices(tp) if c not in out["choices"]]
            add_kind("choice")
        elif isinstance(tp, type) and issubclass(tp, BaseModel):
            describe_model(tp, sections, path)
            out["section"] = path
            add_kind("section")
        elif tp is bool:
            add_kind("bool")
        elif tp is int or (isinstance(tp, type) and issubclass(tp, int) and not issubclass(tp, bool)):
            add_kind("int")
        elif tp is float:
            add_kind("float")
        elif tp is str:
            add_kind("str")
        elif tp in (list, tuple, set) or origin in (list, tuple, set, typing.List, typing.Tuple):  # noqa: UP006
            add_kind("list")
            args = typing.get_args(tp)
            if args and typing.get_origin(args[0]) is typing.Literal:
                out["item_choices"] = [_plain(v) for v in typing.get_args(args[0])]
        elif tp is dict or origin is dict or tp is typing.Dict:  # noqa: UP006
            add_kind("mapping")
        else:
            add_kind("any")

    walk(annotation)
    return out


def describe_model(model: Any, sections: dict[str, Any], path: str) -> None:
    """One pydantic model (a DeepSpeed config section) and the models nested in it, into `sections[path]`."""
    import annotated_types

    extra = model.model_config.get("extra") or "ignore"
    fields: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        entry: dict[str, Any] = {"aliases": []}
        for alias in (info.alias, info.validation_alias if isinstance(info.validation_alias, str) else None):
            if alias and alias != name and alias not in entry["aliases"]:
                entry["aliases"].append(alias)
        choices = getattr(info.validation_alias, "choices", None)
        for alias in choices or ():
            if isinstance(alias, str) and alias != name and alias not in entry["aliases"]:
                entry["aliases"].append(alias)
        entry.update(describe_type(info.annotation, sections, f"{path}.{name}" if path else name))
        entry["required"] = info.is_required()
        if not info.is_required():
            entry["default"] = _plain(info.get_default(call_default_factory=True))
        for meta in info.metadata:
            for attr in ("ge", "gt", "le", "lt"):
                if isinstance(meta, getattr(annotated_types, attr.capitalize())):
                    entry[attr] = _plain(getattr(meta, attr))
        schema_extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        if schema_extra.get("deprecated"):
            entry["deprecated"] = True
            entry["new_param"] = schema_extra.get("new_param", "")
            entry["set_new_param"] = bool(schema_extra.get("set_new_param", True))
            if schema_extra.get("deprecated_msg"):
                entry["deprecated_msg"] = str(schema_extra["deprecated_msg"])
        fields[name] = entry
    sections[path] = {
        "source": f"{model.__module__}.{model.__qualname__}",
        "extra": extra,
        "populate_by_name": bool(model.model_config.get("populate_by_name", False)),
        "fields": fields,
    }


# ------------------------------------------------------------------------------------------ loosely read keys


def describe_loose(reads: dict[str, dict[str, Any]], passed_on: set[str], pydantic_paths: set[str]) -> dict[str, Any]:
    """The loosely read sections: their keys, defaults and (from the default) kinds."""
    out: dict[str, Any] = {}
    for path, keys in sorted(reads.items()):
        parent, _, key = path.rpartition(".")
        if path in pydantic_paths or (not keys and not isinstance(reads.get(parent, {}).get(key), dict)):
            continue  # given a dict it was looped over, but it is no section (a list, or a dict-or-bool switch)
        fields: dict[str, Any] = {}
        for key, default in sorted(keys.items()):
            entry: dict[str, Any] = {"aliases": []}
            child = f"{path}.{key}" if path else key
            if child in pydantic_paths:
                entry.update({"kinds": ["section"], "choices": [], "nullable": False, "section": child})
            elif (child in reads and reads[child]) or isinstance(default, dict):
                entry.update({"kinds": ["section"], "choices": [], "nullable": False, "section": child})
            else:
                kind = {bool: "bool", int: "int", float: "float", str: "str", list: "list"}.get(type(default))
                entry.update({"kinds": [kind] if kind else [], "choices": [], "nullable": default is None})
            if default is not ... and not isinstance(default, dict):
                entry["default"] = _plain(default)
            fields[key] = entry
        # "loose": DeepSpeed ignores a key it does not read; "passed-on": the whole section is handed on (to the
        # data pipeline, the pipeline engine, ...), so keys read later cannot be seen from here.
        extra = "passed-on" if any(path == p or path.startswith(p + ".") for p in passed_on) else "loose"
        out[path] = {"source": "deepspeed.runtime.config.DeepSpeedConfig (dict lookups)", "extra": extra,
                     "populate_by_name": False, "fields": fields}
    return out


# ------------------------------------------------------------------------------------------ the two snapshots


def deepspeed_snapshot() -> dict[str, Any]:
    import importlib

    import deepspeed
    from deepspeed.runtime import config as ds_config

    sections: dict[str, Any] = {}
    for path, (module, name) in DEEPSPEED_MODELS.items():
        describe_model(getattr(importlib.import_module(module), name), sections, path)
    from traindeck.backend.config.snapshot_trace import trace_loose_reads

    loose = describe_loose(*trace_loose_reads(), set(sections))
    for path, section in loose.items():
        sections[path] = section
    top = sections.setdefault("", {"extra": "loose", "fields": {}})
    for path in list(DEEPSPEED_MODELS):
        parent, _, key = path.rpartition(".")
        holder = sections.setdefault(parent, {"source": "", "extra": "loose", "populate_by_name": False,
                                              "fields": {}})
        entry = holder["fields"].setdefault(key, {"aliases": []})
        entry.update({"kinds": ["section"], "choices": [], "nullable": False, "section": path})
        entry.pop("default", None)
    # bf16's old name: get_bfloat16_config reads "bfloat16" only when "bf16" is absent (not a pydantic alias).
    if "bfloat16" in top["fields"]:
        top["fields"]["bfloat16"].update({"kinds": ["section"], "choices": [], "nullable": False, "section": "bf16"})
    removed = {"": dict(ds_config._REMOVED_TOP_LEVEL_CONFIG_KEYS),
               "zero_optimization": dict(ds_config._REMOVED_ZERO_CONFIG_KEYS)}
    for path, keys in removed.items():
        for key in keys:
            sections.get(path, {}).get("fields", {}).pop(key, None)
    return {
        "tool": "deepspeed",
        "version": deepspeed.__version__,
        "removed": removed,
        "sections": dict(sorted(sections.items())),
    }


def _dataclass_section(cls: Any, sections: dict[str, Any], path: str) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        entry: dict[str, Any] = {"aliases": []}
        entry.update(describe_type(hints.get(f.name, Any), sections, f"{path}.{f.name}"))
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        entry["required"] = not has_default
        if f.default is not dataclasses.MISSING:
            entry["default"] = _plain(f.default)
        fields[f.name] = entry
    return {"source": f"{cls.__module__}.{cls.__qualname__}", "extra": "forbid", "populate_by_name": False,
            "fields": fields}


def accelerate_snapshot() -> dict[str, Any]:
    import accelerate
    from accelerate.commands import launch as accelerate_launch_command
    from accelerate.commands.config.config_args import ClusterConfig, SageMakerConfig
    from accelerate.commands.launch import launch_command_parser
    from accelerate.utils import launch as accelerate_launch_utils

    sections: dict[str, Any] = {}
    sections[""] = _dataclass_section(ClusterConfig, sections, "")
    sections["@sagemaker"] = _dataclass_section(SageMakerConfig, sections, "@sagemaker")
    parser = launch_command_parser()
    launch_source = inspect.getsource(accelerate_launch_utils) + inspect.getsource(accelerate_launch_command)
    groups = {group.title: group._group_actions for group in parser._action_groups}
    for key, (title, prefix) in ACCELERATE_SECTIONS.items():
        fields: dict[str, Any] = {}
        for action in groups.get(title, []):
            if key == "dynamo_config" and not action.dest.startswith("dynamo_"):
                continue
            entry: dict[str, Any] = {"aliases": []}
            if prefix and action.dest.startswith(prefix) and key != "dynamo_config" or \
                    (key == "dynamo_config" and action.dest.startswith("dynamo_")):
                short = action.dest[len(prefix):]
                if short and not short.startswith(prefix.rstrip("_")):
                    entry["aliases"].append(short)
            kinds: list[str] = []
            if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):  # noqa: SLF001
                kinds.append("bool")
            elif action.type in (int, float, str):
                kinds.append(action.type.__name__)
            elif getattr(action.type, "__name__", "") == "str_to_bool":
                kinds.append("bool")
            else:
                kinds.append("any")
            entry.update({"kinds": kinds, "choices": [_plain(c) for c in action.choices or ()],
                          "nullable": action.default is None, "default": _plain(action.default),
                          "flag": action.option_strings[0] if action.option_strings else ""})
            fields[action.dest] = entry
        # Entries without a flag that launch still reads: it copies every entry onto its argparse namespace and
        # utils/launch.py reads some with getattr(args, "fsdp_ignored_modules", None).
        if prefix:
            for name in sorted(set(re.findall(r'getattr\(args, "(' + prefix + r'[a-z0-9_]+)"', launch_source))):
                if name not in fields:
                    fields[name] = {"aliases": [name[len(prefix):]],
                                    "kinds": ["any"], "choices": [], "nullable": True, "flag": ""}
        sections[key] = {"source": f"accelerate launch ({title})", "extra": "loose", "populate_by_name": False,
                         "prefix": prefix, "fields": fields}
    for holder in ("", "@sagemaker"):
        for key, entry in sections[holder]["fields"].items():
            if key in sections:
                entry.update({"kinds": ["section"], "section": key, "nullable": True})
    return {
        "tool": "accelerate",
        "version": accelerate.__version__,
        "sections": dict(sorted(sections.items())),
    }


def generate() -> dict[str, dict[str, Any]]:
    """Both snapshots, as the installed tools describe them (imports deepspeed and accelerate)."""
    logging.disable(logging.WARNING)  # DeepSpeed logs while parsing the probes
    try:
        return {"deepspeed": deepspeed_snapshot(), "accelerate": accelerate_snapshot()}
    finally:
        logging.disable(logging.NOTSET)


def drift(shipped: dict[str, Any], fresh: dict[str, Any]) -> list[str]:
    """What differs between the shipped snapshot and the installed tool, one line each (empty: they agree)."""
    out: list[str] = []
    if shipped.get("version") != fresh.get("version"):
        out.append(f"version: snapshot {shipped.get('version')}, installed {fresh.get('version')}")
    old_sections, new_sections = shipped.get("sections", {}), fresh.get("sections", {})
    for path in sorted(set(old_sections) | set(new_sections)):
        where = path or "(top level)"
        if path not in new_sections:
            out.append(f"{where}: section not in the installed tool")
            continue
        if path not in old_sections:
            out.append(f"{where}: section missing from the snapshot")
            continue
        old, new = old_sections[path], new_sections[path]
        if old.get("extra") != new.get("extra"):
            out.append(f"{where}: unknown keys {new.get('extra')} (snapshot: {old.get('extra')})")
        old_fields, new_fields = old.get("fields", {}), new.get("fields", {})
        for key in sorted(set(old_fields) | set(new_fields)):
            if key not in new_fields:
                out.append(f"{where}.{key}: not a key of the installed tool")
            elif key not in old_fields:
                out.append(f"{where}.{key}: missing from the snapshot")
            elif old_fields[key] != new_fields[key]:
                changed = sorted(k for k in set(old_fields[key]) | set(new_fields[key])
                                 if old_fields[key].get(k) != new_fields[key].get(k))
                out.append(f"{where}.{key}: {', '.join(changed)} differ "
                           + "; ".join(f"{k}: snapshot {old_fields[key].get(k)!r}, installed "
                                       f"{new_fields[key].get(k)!r}" for k in changed))
    if shipped.get("removed") != fresh.get("removed"):
        out.append("removed keys differ")
    return out


def render(snapshot: dict[str, Any]) -> str:
    return json.dumps(snapshot, indent=1, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="snapshot_gen", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when the snapshot is stale")
    parser.add_argument("--out", type=Path, default=SNAPSHOT_DIR)
    args = parser.parse_args(argv)
    stale = []
    for tool, snapshot in generate().items():
        target = args.out / f"{tool}.json"
        text = render(snapshot)
        current = target.read_text(encoding="utf-8") if target.exists() else ""
        if current != text:
            stale.append(str(target))
            if args.check and current:
                for line in drift(json.loads(current), json.loads(text)):
                    print(f"{tool}: {line}", file=sys.stderr)
            if not args.check:
                target.parent.mkdir(parents=True, exist_ok=True)
                tmp = target.with_suffix(".tmp")
                tmp.write_text(text, encoding="utf-8")
                tmp.replace(target)
    if args.check and stale:
        print(f"stale snapshot (regenerate with python -m traindeck.backend.config.snapshot_gen): "
              f"{', '.join(stale)}", file=sys.stderr)
        return 1
    print("updated: " + ", ".join(stale) if stale else "snapshot is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
