"""Describing config sections: the base model and the field metadata that forms and validation read.

A section is a pydantic model whose fields are the section's keys (alias = the key as written in the file) with a
one-line `description`, allowed values as a `Literal`, ranges as `ge`/`le`, and a default that says what the tool
does when the key is absent. Extra metadata goes in `json_schema_extra`:
  - "auto": True       the key may be "auto" (filled in by the HF Trainer / accelerate integration only)
  - "applies": "..."   a short condition shown in forms ("stage 3", "offload to nvme")
  - "stages": (2, 3)   ZeRO stages the key has an effect in (forms hide it otherwise; a rule warns)
Class-level settings:
  - UNKNOWN: what the tool does with a key it does not know ("error": refuses it; "warning": ignores it)
  - DEPRECATED: old key -> new key (or -> "" when the key is gone with nothing replacing it). When the old key's
    value has another form than the new key's (a flag replaced by a section), the section also declares a field for
    the old key: its type checks the old value and its description, worded as the replacement, is the message.
  - DEPRECATED_CLASH: "" when the new key silently wins over its old name set beside it; otherwise the reason the
    tool refuses the two together (an error)
  - REMOVED: keys the tool no longer supports and refuses outright: key -> why (an error)
  - SNAPSHOT: (tool, path) of the section in the key snapshot (snapshot/*.json, generated from the installed tools
    by snapshot_gen.py). Set by `bind_snapshot`. The snapshot then decides the key names and their other spellings
    (aliases: both accepted), UNKNOWN (the tool's `extra` policy) and, in sections the tool validates itself,
    types, allowed values, ranges and defaults; the hand-written fields add what the tool's models do not say
    (help, "auto", stages, applies). Keys the snapshot has and the class does not are described from the snapshot.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Union

import annotated_types
from pydantic import BaseModel, ConfigDict
from pydantic.fields import FieldInfo

from traindeck.backend.config.messages import Severity


class Section(BaseModel):
    """A config section. Extra keys are allowed at this level: reporting them is the checker's job, not pydantic's."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    UNKNOWN: ClassVar[Severity] = "warning"
    UNKNOWN_WHY: ClassVar[str] = "it is ignored"
    DEPRECATED: ClassVar[dict[str, str]] = {}
    DEPRECATED_CLASH: ClassVar[str] = ""
    REMOVED: ClassVar[dict[str, str]] = {}
    SNAPSHOT: ClassVar[tuple[str, str] | None] = None
    # Declared keys the snapshot does not list, each with why (the probe cannot see the tool read them).
    OUTSIDE_SNAPSHOT: ClassVar[dict[str, str]] = {}
    # Choice keys where an unquoted YAML 1.1 boolean (NO -> false) is still taken by the tool: the value check
    # leaves a bool there to the kind's rules, which say what the tool does with it.
    RULES_WORD_BOOL: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def unknown_key_hint(cls, key: str) -> str | None:
        """Where an unknown key belongs, when the section can tell (e.g. a nested key whose indentation was lost:
        "it belongs under deepspeed_config"); None lets the checker suggest the closest known key instead."""
        return None


ValueKind = Literal["bool", "int", "float", "str", "choice", "list", "mapping", "section", "any"]


@dataclass(frozen=True)
class FieldSpec:
    """Everything a form or the checker needs to know about one key."""

    key: str  # as written in the file
    kind: ValueKind
    help: str
    default: Any = None
    choices: tuple[Any, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    nullable: bool = False
    auto: bool = False
    also_text: bool = False  # a number/choice field that also takes free text (e.g. a path or "auto"-like word)
    section: type[Section] | None = None
    item_section: type[Section] | None = None  # the value is a list of such sections (no described key is one)
    applies: str = ""
    stages: tuple[int, ...] = ()
    alias_of: str = ""  # another spelling of the key `alias_of` (the tool accepts both; forms show one)

    def describe(self) -> str:
        """What values are allowed, in words: used in messages and tooltips."""
        if self.kind == "choice":
            words = ", ".join(repr(c) if isinstance(c, str) else str(c).lower() if isinstance(c, bool) else str(c)
                              for c in self.choices)
            text = f"one of {words}"
        else:
            text = {
                "bool": "true or false", "int": "a whole number", "float": "a number", "str": "text",
                "list": "a list", "mapping": "a mapping", "section": "a section of keys", "any": "any value",
            }[self.kind]
            if self.kind in ("int", "float") and (self.minimum is not None or self.maximum is not None):
                if self.minimum is not None and self.maximum is not None:
                    text += f" from {_num(self.minimum)} to {_num(self.maximum)}"
                elif self.minimum is not None:
                    text += f" {'>' if self.exclusive_minimum else '>='} {_num(self.minimum)}"
                elif self.maximum is not None:
                    text += f" <= {_num(self.maximum)}"
        if self.auto:
            text += ' or "auto"'
        if self.nullable:
            text += " or null"
        return text


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else f"{value:g}"


# snapshot_merge.merge, set when that module binds a section to its snapshot (it imports this module: a hook, not an
# import back, keeps the two one-way). A section with a SNAPSHOT has been bound, so the hook is set by then.
_snapshot_merge: Callable[[type[Section], dict[str, FieldSpec]], dict[str, FieldSpec]] | None = None


def set_snapshot_merge(merge: Callable[[type[Section], dict[str, FieldSpec]], dict[str, FieldSpec]]) -> None:
    """Install snapshot_merge.merge as the hook fields_of calls for a bound section."""
    global _snapshot_merge
    _snapshot_merge = merge


def fields_of(section: type[Section]) -> dict[str, FieldSpec]:
    """The keys of a section, in declaration order, keyed as written in files (every accepted spelling: the
    other spellings of a key have `alias_of` set)."""
    cached = _CACHE.get(section)
    if cached is None:
        cached = {spec.key: spec for spec in (_spec(name, info) for name, info in section.model_fields.items())}
        if section.SNAPSHOT is not None and _snapshot_merge is not None:
            cached = _snapshot_merge(section, cached)
        _CACHE[section] = cached
    return cached


def form_keys(specs: dict[str, FieldSpec], present: Any) -> list[str]:
    """The keys a form shows: one spelling per key, the one the file uses (else the declared one)."""
    keys = present if isinstance(present, dict) else {}
    shown: list[str] = []
    for key, spec in specs.items():
        if spec.alias_of:
            continue
        others = [k for k, s in specs.items() if s.alias_of == key]
        used = [k for k in others if k in keys]
        shown.append(key if key in keys or not used else used[0])
    return shown


_CACHE: dict[type[Section], dict[str, FieldSpec]] = {}


def _spec(name: str, info: FieldInfo) -> FieldSpec:
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    kind, choices, nullable, section, also_text = _classify(info.annotation)
    minimum: Any = None
    maximum: Any = None
    exclusive = False
    for meta in info.metadata:
        if isinstance(meta, annotated_types.Ge):
            minimum = meta.ge
        elif isinstance(meta, annotated_types.Gt):
            minimum, exclusive = meta.gt, True
        elif isinstance(meta, annotated_types.Le):
            maximum = meta.le
    default = None if info.is_required() else info.get_default(call_default_factory=True)
    if isinstance(default, BaseModel):
        default = None  # sections have no single default value to show
    return FieldSpec(
        key=info.alias or name,
        kind=kind,
        help=info.description or "",
        default=default,
        choices=choices,
        minimum=minimum,
        maximum=maximum,
        exclusive_minimum=exclusive,
        nullable=nullable,
        auto=bool(extra.get("auto", False)),
        also_text=also_text,
        section=section,
        applies=str(extra.get("applies", "")),
        stages=tuple(extra.get("stages", ())),  # type: ignore[arg-type]
    )


def _classify(annotation: Any) -> tuple[ValueKind, tuple[Any, ...], bool, type[Section] | None, bool]:
    """Reduce a type annotation to (kind, choices, nullable, section, also_text)."""
    members = _union_members(annotation)
    nullable = type(None) in members
    members = [m for m in members if m is not type(None)]
    choices: list[Any] = []
    kinds: list[ValueKind] = []
    section: type[Section] | None = None
    for member in members:
        origin = typing.get_origin(member)
        if origin is Literal:
            literal_values = [v for v in typing.get_args(member) if v != "auto"]
            choices += literal_values
            continue
        if isinstance(member, type) and issubclass(member, Section):
            section = member
            kinds.append("section")
        elif member is bool:
            kinds.append("bool")
        elif member is int:
            kinds.append("int")
        elif member is float:
            kinds.append("float")
        elif member is str:
            kinds.append("str")
        elif member in (list, tuple) or origin in (list, tuple):
            kinds.append("list")
        elif member is dict or origin is dict:
            kinds.append("mapping")
        else:
            kinds.append("any")
    if choices and not kinds:
        return "choice", tuple(choices), nullable, None, False
    if choices:  # e.g. int | Literal["auto"] handled by the auto flag; Literal[...] | str is a choice with free text
        return "choice", tuple(choices), nullable, section, True
    if "float" in kinds:  # int | float
        return "float", (), nullable, section, "str" in kinds
    if len(set(kinds)) == 1:
        return kinds[0], (), nullable, section, False
    if "section" in kinds:
        return "section", (), nullable, section, False
    if "int" in kinds:
        return "int", (), nullable, None, "str" in kinds
    return "any", (), nullable, None, False


def _union_members(annotation: Any) -> list[Any]:
    origin = typing.get_origin(annotation)
    if origin is Union or origin is types.UnionType:
        out: list[Any] = []
        for arg in typing.get_args(annotation):
            out += _union_members(arg)
        return out
    if origin is typing.Annotated:
        return _union_members(typing.get_args(annotation)[0])
    return [annotation]
