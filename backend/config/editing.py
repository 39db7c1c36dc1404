"""Editing a config document in place, one key at a time: what a form does when the user types.

A form never holds its own copy of the config: it reads and writes the user's dict through these functions, so
keys the form does not show (unknown ones included) are never touched.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import yaml

from traindeck.backend.config.messages import PathT
from traindeck.backend.config.schema import FieldSpec

_MISSING = object()


def get_path(data: dict[str, Any], path: PathT, default: Any = None) -> Any:
    """The value at `path`, or `default` when any part of the path is absent."""
    node: Any = data
    for part in path:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            return default
    return node


def set_path(data: dict[str, Any], path: PathT, value: Any) -> None:
    """Set `path` to `value`, creating missing sections on the way (a null section becomes a mapping)."""
    node: dict[Any, Any] = data
    for part in path[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[path[-1]] = value


def remove_path(data: dict[str, Any], path: PathT) -> None:
    """Remove the key at `path` (the tool's default then applies); sections it leaves empty stay, as written."""
    parent = get_path(data, path[:-1], _MISSING) if len(path) > 1 else data
    if isinstance(parent, dict):
        parent.pop(path[-1], None)  # type: ignore[arg-type]  # a list index is never a dict's key: pop finds none


class FieldTextError(ValueError):
    """Typed text that is not a value of the field's kind; the message says what is expected."""


def value_from_text(spec: FieldSpec, text: str) -> Any:
    """Turn what the user typed into the value to store ("" -> None, meaning: unset, use the default).

    Numbers accept the forms configs use (5e8 for an integer bucket size, 1_000); "auto" where the key allows it;
    lists and mappings as YAML/JSON flow text ("[0.9, 0.999]", "{lr: 1e-4}").
    """
    text = text.strip()
    if text == "":
        return None
    if text == "auto" and (spec.auto or spec.kind == "str"):
        return "auto"
    if text == "null" and spec.nullable:
        return None
    kind = spec.kind
    if kind == "bool":
        lowered = text.lower()
        if lowered in ("true", "yes", "on", "1"):
            return True
        if lowered in ("false", "no", "off", "0"):
            return False
        raise FieldTextError(f"expected true or false, got {text!r}")
    if kind == "choice":
        number = _number(text) if _numeric_choices(spec) else None
        return _choice(spec, number if number is not None else text)
    if kind in ("int", "float"):
        number = _number(text)
        if number is None:
            if spec.also_text:
                return text
            raise FieldTextError(f"expected {spec.describe()}, got {text!r}")
        if kind == "int":
            if not float(number).is_integer():
                raise FieldTextError(f"expected a whole number, got {text}")
            return int(number)
        return number
    if kind in ("list", "mapping", "any"):
        value = _flow_value(text)
        if kind == "list" and not isinstance(value, list):
            raise FieldTextError("expected a list, e.g. [0.9, 0.999]")
        if kind == "mapping" and not isinstance(value, dict):
            raise FieldTextError("expected a mapping, e.g. {lr: 0.0001}")
        return value
    return text


class _FlowLoader(yaml.SafeLoader):
    """YAML as a form field is typed, with YAML 1.2's numbers: 1e-4 (no decimal point) is a number, as in JSON,
    where YAML 1.1 (PyYAML) reads it as text and the optimizer is later handed the text "1e-4"."""


_FlowLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


def _flow_value(text: str) -> Any:
    """A list, mapping or scalar typed in a field: JSON when it looks like JSON ({"lr": 1e-4} is JSON), else YAML
    flow text ({lr: 1e-4}) read with YAML 1.2's numbers."""
    if text[:1] in "{[\"":
        try:
            return json.loads(text)
        except ValueError:
            pass  # {lr: 1e-4} or a slip: YAML reads it, or says where it stops
    try:
        return yaml.load(text, Loader=_FlowLoader)  # noqa: S506 - a SafeLoader with one more number form
    except yaml.YAMLError as exc:
        raise FieldTextError(f"not a valid value: {exc}") from None


def text_from_value(spec: FieldSpec, value: Any) -> str:
    """The text a form shows for a stored value (the inverse of value_from_text for valid values)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) >= 1e6:
        return f"{value:.0e}".replace("e+0", "e").replace("e+", "e")
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


def _numeric_choices(spec: FieldSpec) -> bool:
    return bool(spec.choices) and all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in spec.choices)


def _choice(spec: FieldSpec, typed: Any) -> Any:
    for choice in spec.choices:
        if choice == typed and not isinstance(choice, bool) or str(choice) == str(typed):
            return choice
    if spec.also_text and isinstance(typed, str):
        return typed
    raise FieldTextError(f"expected {spec.describe()}, got {str(typed)!r}")


def _number(text: str) -> float | int | None:
    cleaned = text.replace("_", "")
    try:
        return int(cleaned)
    except ValueError:
        pass
    try:
        value = float(cleaned)
    except ValueError:
        return None
    if math.isnan(value) or math.isinf(value):
        return None
    # 5e8 typed for an integer field means the whole number; keep it an int when it is one.
    return int(value) if value.is_integer() and "e" in cleaned.lower() else value
