"""Joining the hand-written Section classes with the key snapshot of the tool that reads them.

`bind_snapshot(root, tool)` walks a root Section (DeepSpeedConfig, AccelerateConfig) along the snapshot's sections:
each Section class gets its SNAPSHOT path and the tool's policy for unknown keys, and snapshot sections no class
describes (DeepSpeed's compile, tensor_parallel, zero_optimization.zenflow, ...) get a generated Section.
`merge` (called by schema.fields_of) then builds a section's FieldSpecs: every key and alias of the snapshot, with
the snapshot's types/values/defaults where the tool validates them itself, and the hand-written help and metadata.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from traindeck.backend.config import key_snapshot as snapshot
from traindeck.backend.config.schema import (
    _CACHE,
    FieldSpec,
    Section,
    ValueKind,
    _union_members,
    set_snapshot_merge,
)

_GENERATED: dict[tuple[str, str], type[Section]] = {}
_BOUND: dict[tuple[str, str], type[Section]] = {}


def bind_snapshot(root: type[Section], tool: snapshot.Tool, path: str = "") -> None:
    """Tie `root` and the Section classes under it to the snapshot sections at the same place in the file."""
    snap = snapshot.section(tool, path)
    if snap is None:
        return
    _bind(root, tool, path, snap)
    for name, info in root.model_fields.items():
        entry, _ = _entry_for(snap, info.alias or name)
        child_path = entry.get("section") if entry else None
        child = _section_class(info.annotation)
        if child is not None and child_path and child.SNAPSHOT is None:
            bind_snapshot(child, tool, child_path)


def _bind(section: type[Section], tool: snapshot.Tool, path: str, snap: dict[str, Any]) -> None:
    section.SNAPSHOT = (tool, path)
    _BOUND[(tool, path)] = section
    _CACHE.pop(section, None)  # fields read before binding (a module computing its DEPRECATED) are rebuilt
    refuses = snapshot.refuses_unknown(snap)
    if refuses and section.UNKNOWN != "error":
        section.UNKNOWN = "error"
        section.UNKNOWN_WHY = f"{_tool_name(tool)} refuses unknown keys in {path or 'this file'}"
    elif not refuses and section.UNKNOWN != "warning":
        section.UNKNOWN = "warning"
        section.UNKNOWN_WHY = f"{_tool_name(tool)} ignores it"
    # The tool's own deprecations (DeepSpeedConfigModel fields with deprecated=True); hand-written entries stay
    # for deprecations the tool handles outside its models (aio.thread_count, bfloat16, ...).
    deprecated = dict(section.DEPRECATED)
    for name, entry in snap["fields"].items():
        if not entry.get("deprecated"):
            continue
        new = entry.get("new_param", "") if entry.get("set_new_param", True) else ""
        deprecated.setdefault(name, _declared_spelling(section, snap, new) if new else "")
    # A spelling the tool accepts as an alias is not deprecated: both are accepted, neither is "repaired".
    aliases = {a for entry in snap["fields"].values() for a in entry.get("aliases", [])}
    section.DEPRECATED = {old: new for old, new in deprecated.items() if old not in aliases}


def _declared_spelling(section: type[Section], snap: dict[str, Any], name: str) -> str:
    """The spelling of field `name` the hand-written class uses (stage3_* for DeepSpeed's ZeRO-3 aliases)."""
    entry = snap["fields"].get(name)
    if entry is None:
        return name
    declared = {info.alias or n for n, info in section.model_fields.items()}
    for spelling in snapshot.spellings(entry, name):
        if spelling in declared:
            return spelling
    return name


def _tool_name(tool: str) -> str:
    return {"deepspeed": "DeepSpeed", "accelerate": "accelerate"}.get(tool, tool)


def _section_class(annotation: Any) -> type[Section] | None:
    for member in _union_members(annotation):
        if isinstance(member, type) and issubclass(member, Section):
            return member
    return None


def _entry_for(snap: dict[str, Any], key: str) -> tuple[dict[str, Any] | None, str]:
    for name, entry in snap["fields"].items():
        if key in snapshot.spellings(entry, name):
            return entry, name
    return None, ""


def generated_section(tool: snapshot.Tool, path: str) -> type[Section] | None:
    """The Section for a snapshot section: the bound hand-written class, else one generated from the snapshot."""
    if (tool, path) in _BOUND:
        return _BOUND[(tool, path)]
    snap = snapshot.section(tool, path)
    if snap is None or snap.get("extra") == "passed-on":
        return None  # handed on whole to code that reads it later: its keys cannot be known (a plain mapping)
    if (tool, path) not in _GENERATED:
        name = "".join(part.title() for part in path.replace(".", "_").split("_")) or "Root"
        cls: type[Section] = type(name, (Section,), {"__module__": __name__, "__doc__": f"{path}: {snap.get('source', '')}",
                                                     "__annotations__": {}})
        _bind(cls, tool, path, snap)
        _GENERATED[(tool, path)] = cls
    return _GENERATED[(tool, path)]


# ------------------------------------------------------------------------------------------ field specs


def merge(section: type[Section], hand: dict[str, FieldSpec]) -> dict[str, FieldSpec]:
    """The section's keys: the hand-written ones (with the snapshot's facts where the tool checks them itself),
    then the snapshot's keys the class does not declare, and every other spelling of each key."""
    assert section.SNAPSHOT is not None
    tool, path = section.SNAPSHOT
    snap = snapshot.section(tool, path)
    if snap is None:
        return hand
    validated = snapshot.refuses_unknown(snap) and tool == "deepspeed"  # pydantic models check their values
    out: dict[str, FieldSpec] = {}
    primary: dict[str, str] = {}  # snapshot field name -> the key its spec is filed under
    for key, spec in hand.items():
        entry, name = _entry_for(snap, key)
        if entry is not None:
            primary.setdefault(name, key)
            spec = _with_snapshot(spec, entry, tool, validated)
        out[key] = spec
    for name, entry in snap["fields"].items():
        if name not in primary:
            if name in section.DEPRECATED:
                continue  # an old name: the checker words its replacement (a spec here would be read as its help)
            out[name] = _from_snapshot(name, entry, tool, validated)
            primary[name] = name
        first = out[primary[name]]
        for spelling in snapshot.spellings(entry, name):
            if spelling not in out:
                out[spelling] = dataclasses.replace(first, key=spelling, alias_of=primary[name])
    return out


def _kind(entry: dict[str, Any]) -> tuple[ValueKind, tuple[Any, ...], bool]:
    """(kind, choices, also_text) from a snapshot entry, reduced as schema._classify reduces annotations."""
    kinds = [k for k in entry.get("kinds", []) if k != "choice"]
    choices = tuple(entry.get("choices", ()))
    if choices:
        return "choice", choices, bool(kinds)
    if "section" in kinds:
        return "section", (), False
    if "float" in kinds:
        return "float", (), "str" in kinds
    if len(set(kinds)) == 1:
        return kinds[0], (), False
    if "int" in kinds:
        return "int", (), "str" in kinds
    return "any", (), False


def _limits(entry: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "ge" in entry:
        out.update(minimum=entry["ge"], exclusive_minimum=False)
    elif "gt" in entry:
        out.update(minimum=entry["gt"], exclusive_minimum=True)
    if "le" in entry:
        out["maximum"] = entry["le"]
    return out


def _with_snapshot(spec: FieldSpec, entry: dict[str, Any], tool: snapshot.Tool, validated: bool) -> FieldSpec:
    """A hand-written spec corrected by the snapshot: nested sections are bound; in sections the tool validates,
    the tool's type, values, range and default replace the hand-written ones (help and metadata stay)."""
    changes: dict[str, Any] = {}
    child_path = entry.get("section")
    if child_path:
        child = generated_section(tool, child_path)
        if child is not None and (spec.section is None or spec.section.SNAPSHOT is None):
            changes.update(kind="section", section=child)
    if tool == "deepspeed" and not validated and not child_path and "default" in entry:
        changes["default"] = entry["default"]  # the default DeepSpeed passes to get_scalar_param / dict.get
    if validated and not child_path:
        kind, choices, also_text = _kind(entry)
        # A hand-written narrowing the model does not declare stays: a value list for a str field (comet's mode)
        # or a range a field_validator enforces (fp16.loss_scale >= 0) cannot be read from the model's fields.
        narrowed = kind == "str" and spec.kind == "choice" and not spec.also_text
        if kind != "any" and not narrowed:
            changes.update(kind=kind, choices=choices, also_text=also_text or spec.also_text)
        changes["nullable"] = bool(entry.get("nullable")) or (spec.nullable and kind == "any")
        if "default" in entry:
            changes["default"] = entry["default"]
        limits = _limits(entry)
        if limits:
            changes.update({"minimum": None, "maximum": None, "exclusive_minimum": False, **limits})
    return dataclasses.replace(spec, **changes) if changes else spec


def _from_snapshot(name: str, entry: dict[str, Any], tool: snapshot.Tool, validated: bool) -> FieldSpec:
    """A key only the snapshot knows: described from it alone (help says where it comes from)."""
    kind, choices, also_text = _kind(entry)
    section = generated_section(tool, entry["section"]) if entry.get("section") else None
    if section is None and kind == "section":
        kind = "mapping"
    if not validated and kind not in ("section", "mapping"):
        kind, choices, also_text = "any", (), False  # the tool does not check it: no type to hold it to
    extra = _limits(entry) if validated else {}
    help_text = "DeepSpeed's own key (no description here yet)" if tool == "deepspeed" else \
        "accelerate's own key (no description here yet)"
    if entry.get("deprecated"):
        new = entry.get("new_param", "")
        help_text = f"use '{new}' instead" if new else "has no effect any more"
    # DeepSpeedConfigModel drops every "auto" before validating (its default is used): accepted in its sections.
    auto = validated and kind != "section"
    return FieldSpec(key=name, kind=kind, help=help_text, default=entry.get("default"), choices=choices,
                     nullable=bool(entry.get("nullable")) or kind == "any", auto=auto, also_text=also_text,
                     section=section, **extra)


set_snapshot_merge(merge)
