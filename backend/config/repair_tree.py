"""The tree config repair works on: what plain dicts lose (key order with duplicates, each key's line, where each key
and scalar value sit in the text, for minimal edits), read from YAML here and from JSON by tolerant_json.

Both readers refuse hostile text the way source.py does (bounded.py: nesting depth, alias expansion), so a repair
never recurses without bound or expands an alias bomb.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from traindeck.backend.config.bounded import BoundedSafeLoader, BoundedYamlError
from traindeck.backend.config.messages import PathT


class Unparseable(Exception):
    """The text cannot be read even leniently: the message and (1-based) where."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None, *,
                 refused: bool = False) -> None:
        super().__init__(message)
        self.line, self.column = line, column
        self.refused = refused  # not a syntax mistake but a bound passed (bounded.py): nothing to repair

    def describe(self) -> str:
        where = f"line {self.line}" + (f", column {self.column}" if self.column else "") + ": " if self.line else ""
        return f"{where}{self}"


@dataclass
class Entry:
    key: Any
    value: Any  # KeyMap | list | scalar
    line: int
    key_span: tuple[int, int] | None = None
    value_span: tuple[int, int] | None = None
    quote: str | None = None  # the value's quoting in the text: "'", '"' or None (plain)
    empty: bool = False  # written with nothing after the colon (YAML) / {} / null: may head flattened keys
    origin: PathT = ()  # where the key was in the text


@dataclass
class KeyMap:
    entries: list[Entry] = field(default_factory=list)

    def get(self, key: Any) -> Entry | None:
        for entry in self.entries:
            if entry.key == key:
                return entry
        return None


def plain(value: Any) -> Any:
    if isinstance(value, KeyMap):
        out: dict[Any, Any] = {}
        for entry in value.entries:
            out[entry.key] = plain(entry.value)
        return out
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


# ------------------------------------------------------------------------------------------ YAML


def yaml_tree(text: str) -> KeyMap:
    loader = BoundedSafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return KeyMap()
        if not isinstance(node, yaml.MappingNode):
            raise Unparseable("expected a mapping of keys to values at the top", node.start_mark.line + 1)
        return _yaml_map(node, loader, ())
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        what = "refused" if isinstance(exc, BoundedYamlError) else "syntax"
        raise Unparseable(f"YAML {what}: {exc.problem or exc}", mark.line + 1 if mark else None,
                          mark.column + 1 if mark else None, refused=what == "refused") from None
    except yaml.YAMLError as exc:
        raise Unparseable(f"YAML syntax: {exc}") from None
    finally:
        loader.dispose()


def _yaml_map(node: yaml.MappingNode, loader: yaml.SafeLoader, path: PathT) -> KeyMap:
    out = KeyMap()
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, (str, int)):
            key = str(key)
        entry = Entry(key=key, value=None, line=key_node.start_mark.line + 1,
                       key_span=(key_node.start_mark.index, key_node.end_mark.index), origin=path + (key,))
        if isinstance(value_node, yaml.MappingNode):
            entry.value = _yaml_map(value_node, loader, path + (key,))
        elif isinstance(value_node, yaml.SequenceNode):
            entry.value = loader.construct_object(value_node, deep=True)
        else:
            entry.value = loader.construct_object(value_node, deep=True)
            entry.value_span = (value_node.start_mark.index, value_node.end_mark.index)
            entry.quote = value_node.style if value_node.style in ("'", '"') else None
            # `key:` with nothing after it: what a section header becomes when its keys lost their indentation.
            # (An explicit `{}` is a section meant to be empty, as accelerate writes unused ones.)
            entry.empty = value_node.tag == "tag:yaml.org,2002:null" and value_node.value in ("", "~", "null")
        out.entries.append(entry)
    return out


_KEY_LINE = re.compile(r"\s*(?:-\s+)?[^\s#:][^:#]*:(?:\s.*)?$|\s*-\s.*$|\s*#.*$|\s*$")


def flattened(text: str) -> str | None:
    """The text with every line's indentation removed, when every line is a simple `key: value` / list item /
    comment line (so that nothing but the nesting is lost); None otherwise."""
    lines = text.splitlines(keepends=True)
    if not all(_KEY_LINE.match(line.rstrip("\r\n")) for line in lines):
        return None
    return "".join(line.lstrip(" \t") if line.strip() else line for line in lines)

