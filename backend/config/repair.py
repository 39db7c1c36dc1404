"""Repairing pasted configs: lost indentation, JSON punctuation, Python literals, comments, typos, old key names.

`repair_text(text, file=None)` returns the config that was meant, with each change in words and its line, and says
so instead of guessing when a fix is ambiguous:

  (a) lost indentation: keys of a section found at the level above it (a YAML `deepspeed_config:` left empty with
      zero_stage, offload_optimizer_device ... following at the top; fsdp_* keys; a DeepSpeed JSON with
      zero_optimization keys at the top) are moved under the one section whose description (fields_of) has them,
      preferring the empty section header they follow in the text. A key several sections know is left where it
      is and reported.
  (b) JSON: trailing and missing commas, Python's True/False/None, single-quoted strings, unquoted keys, // and
      /* */ comments (DeepSpeed's hjson reader takes some of these; accelerate and the HF Trainer read with json
      and refuse them): fixed by token-level edits so the rest of the text keeps its formatting.
  (c) typos: a value that is not allowed where exactly one allowed value is close ("DEEPSPED", "cpuu", "Bf16",
      "Auto"), a key close to exactly one known key, text that should be a number or true/false, and deprecated
      keys renamed to their new names.

Output: minimal edits of the original text when the structure is unchanged; otherwise YAML through
yaml.safe_dump(sort_keys=False) or JSON with a 2-space indent (comments in the original are then lost).
"""

from __future__ import annotations

import ast
import difflib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml

from traindeck.backend.config.messages import PathT, format_path
from traindeck.backend.config.schema import FieldSpec, Section, fields_of
from traindeck.backend.config.source import Format, Kind, detect_kind
from traindeck.backend.config.validate import check_value, root_section, suggest


@dataclass
class RepairResult:
    """text_out: the repaired text (None when the text cannot be parsed even after the fixes); changes: what was
    changed, one line each ("line 4: moved zero_stage under deepspeed_config"); problems: what could not be fixed
    without guessing (the config still needs a human there)."""

    text_out: str | None
    changes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    format: Format = "yaml"
    kind: Kind | None = None

    @property
    def ok(self) -> bool:
        """True when the text could be repaired with nothing left ambiguous."""
        return self.text_out is not None and not self.problems

    @property
    def changed(self) -> bool:
        return bool(self.changes)


class _Unparseable(Exception):
    def __init__(self, message: str, line: int | None = None, column: int | None = None) -> None:
        super().__init__(message)
        self.line, self.column = line, column

    def describe(self) -> str:
        where = f"line {self.line}" + (f", column {self.column}" if self.column else "") + ": " if self.line else ""
        return f"{where}{self}"


# ------------------------------------------------------------------------------------------ the tree
# Both formats are read into the same tree, which keeps what plain dicts lose: key order with duplicates, the line
# of each key, and where each key and scalar value sit in the text (for minimal edits).


@dataclass
class _Entry:
    key: Any
    value: Any  # _Map | list | scalar
    line: int
    key_span: tuple[int, int] | None = None
    value_span: tuple[int, int] | None = None
    quote: str | None = None  # the value's quoting in the text: "'", '"' or None (plain)
    empty: bool = False  # written with nothing after the colon (YAML) / {} / null: may head flattened keys
    origin: PathT = ()  # where the key was in the text


@dataclass
class _Map:
    entries: list[_Entry] = field(default_factory=list)

    def get(self, key: Any) -> _Entry | None:
        for entry in self.entries:
            if entry.key == key:
                return entry
        return None


def _plain(value: Any) -> Any:
    if isinstance(value, _Map):
        out: dict[Any, Any] = {}
        for entry in value.entries:
            out[entry.key] = _plain(entry.value)
        return out
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


# ------------------------------------------------------------------------------------------ YAML


def _yaml_tree(text: str) -> _Map:
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return _Map()
        if not isinstance(node, yaml.MappingNode):
            raise _Unparseable("expected a mapping of keys to values at the top", node.start_mark.line + 1)
        return _yaml_map(node, loader, ())
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise _Unparseable(f"YAML syntax: {exc.problem or exc}", mark.line + 1 if mark else None,
                           mark.column + 1 if mark else None) from None
    except yaml.YAMLError as exc:
        raise _Unparseable(f"YAML syntax: {exc}") from None
    finally:
        loader.dispose()


def _yaml_map(node: yaml.MappingNode, loader: yaml.SafeLoader, path: PathT) -> _Map:
    out = _Map()
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, (str, int)):
            key = str(key)
        entry = _Entry(key=key, value=None, line=key_node.start_mark.line + 1,
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


def _flattened(text: str) -> str | None:
    """The text with every line's indentation removed, when every line is a simple `key: value` / list item /
    comment line (so that nothing but the nesting is lost); None otherwise."""
    lines = text.splitlines(keepends=True)
    if not all(_KEY_LINE.match(line.rstrip("\r\n")) for line in lines):
        return None
    return "".join(line.lstrip(" \t") if line.strip() else line for line in lines)


# ------------------------------------------------------------------------------------------ lenient JSON


@dataclass
class _Tok:
    kind: str  # "{", "}", "[", "]", ":", ",", "str", "num", "word", "comment", "eof"
    start: int
    end: int
    text: str


_NUMBER = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_WORD = re.compile(r"[A-Za-z_$][A-Za-z0-9_$.-]*|-?Infinity")


class _JsonReader:
    """Reads JSON as people paste it, recording the edits that make it strict JSON."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.edits: list[tuple[int, int, str, str]] = []  # (start, end, replacement, what was done)
        self.tokens = list(self._tokens())
        self.i = 0

    # -- positions

    def line_of(self, index: int) -> int:
        return self.text.count("\n", 0, index) + 1

    def column_of(self, index: int) -> int:
        return index - (self.text.rfind("\n", 0, index) + 1) + 1

    def _edit(self, start: int, end: int, replacement: str, what: str) -> None:
        self.edits.append((start, end, replacement, f"line {self.line_of(start)}: {what}"))

    # -- tokens

    def _tokens(self) -> Iterator[_Tok]:
        text, i, n = self.text, 0, len(self.text)
        while i < n:
            c = text[i]
            if c in " \t\r\n\ufeff":
                i += 1
                continue
            if c in "{}[]:,":
                yield _Tok(c, i, i + 1, c)
                i += 1
                continue
            if text.startswith("//", i) or c == "#":
                end = text.find("\n", i)
                end = n if end < 0 else end
                self._remove_comment(i, end, "// comment" if c == "/" else "# comment")
                i = end
                continue
            if text.startswith("/*", i):
                end = text.find("*/", i + 2)
                if end < 0:
                    raise _Unparseable("a /* comment is never closed", self.line_of(i), self.column_of(i))
                self._remove_comment(i, end + 2, "/* */ comment")
                i = end + 2
                continue
            if c in "\"'":
                end = self._string_end(i)
                yield _Tok("str", i, end, text[i:end])
                i = end
                continue
            m = _NUMBER.match(text, i)
            if m and (c.isdigit() or c in "-." ) and not text.startswith("-Infinity", i):
                yield _Tok("num", i, m.end(), m.group(0))
                i = m.end()
                continue
            m = _WORD.match(text, i)
            if m:
                yield _Tok("word", i, m.end(), m.group(0))
                i = m.end()
                continue
            raise _Unparseable(f"unexpected character {c!r}", self.line_of(i), self.column_of(i))
        yield _Tok("eof", n, n, "")

    def _string_end(self, i: int) -> int:
        quote, j, n = self.text[i], i + 1, len(self.text)
        while j < n:
            ch = self.text[j]
            if ch == "\\":
                j += 2
                continue
            if ch == quote:
                return j + 1
            if ch == "\n":
                break
            j += 1
        raise _Unparseable("a text value is not closed on its line (missing quote)", self.line_of(i),
                           self.column_of(i))

    def _remove_comment(self, start: int, end: int, what: str) -> None:
        line_start = self.text.rfind("\n", 0, start) + 1
        line_end = self.text.find("\n", end)
        line_end = len(self.text) if line_end < 0 else line_end
        before = self.text[line_start:start]
        after = self.text[end:line_end]
        if not before.strip() and not after.strip():
            # The comment is all there is on its line(s): remove the line(s).
            self._edit(line_start, min(line_end + 1, len(self.text)), "", f"removed a {what}")
            return
        lead = len(before) - len(before.rstrip(" \t"))
        self._edit(start - lead, end, "", f"removed a {what}")

    # -- parsing

    def _peek(self) -> _Tok:
        return self.tokens[self.i]

    def _next(self) -> _Tok:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def _fail(self, tok: _Tok, message: str) -> _Unparseable:
        return _Unparseable(f"JSON syntax: {message}", self.line_of(tok.start), self.column_of(tok.start))

    def read(self) -> _Map:
        tok = self._peek()
        if tok.kind != "{":
            raise self._fail(tok, "expected '{' at the start of a DeepSpeed JSON config")
        value, _ = self._value(())
        tok = self._peek()
        if tok.kind == ",":
            self._next()
            self._edit(tok.start, tok.end, "", "removed a comma after the closing '}'")
            tok = self._peek()
        if tok.kind != "eof":
            raise self._fail(tok, "text after the end of the config")
        return value

    def _value(self, path: PathT) -> tuple[Any, _Tok]:
        """(value, its last token)."""
        tok = self._next()
        if tok.kind == "{":
            return self._object(path, tok)
        if tok.kind == "[":
            return self._array(path, tok)
        if tok.kind == "str":
            return self._string(tok), tok
        if tok.kind == "num":
            text = tok.text
            fixed = text
            if fixed.startswith("."):
                fixed = "0" + fixed
            if fixed.startswith("-."):
                fixed = "-0" + fixed[1:]
            if fixed.endswith("."):
                fixed += "0"
            fixed = re.sub(r"\.([eE])", r".0\1", fixed)
            if re.match(r"-?0\d", fixed):
                raise self._fail(tok, f"{text} is not a JSON number (no leading zeros)")
            if fixed != text:
                self._edit(tok.start, tok.end, fixed, f"{text} -> {fixed} (JSON number spelling)")
            return json.loads(fixed), tok
        if tok.kind == "word":
            literal = {"true": True, "false": False, "null": None, "NaN": float("nan"), "Infinity": float("inf"),
                       "-Infinity": float("-inf")}
            if tok.text in literal:
                return literal[tok.text], tok
            python = {"True": ("true", True), "False": ("false", False), "None": ("null", None)}
            if tok.text in python:
                spelled, value = python[tok.text]
                self._edit(tok.start, tok.end, spelled, f"{tok.text} -> {spelled} (JSON spelling)")
                return value, tok
            raise self._fail(tok, f"{tok.text!r} is not a JSON value (text must be in double quotes)")
        raise self._fail(tok, f"expected a value, found {tok.text or 'the end of the text'!r}")

    def _string(self, tok: _Tok) -> str:
        if tok.text.startswith('"'):
            try:
                return json.loads(tok.text)
            except json.JSONDecodeError:
                pass
        try:
            value = ast.literal_eval(tok.text)
        except (ValueError, SyntaxError):
            raise self._fail(tok, "a text value JSON cannot read") from None
        if not isinstance(value, str):
            raise self._fail(tok, "a text value JSON cannot read")
        spelled = json.dumps(value, ensure_ascii=False)
        if tok.text.startswith("'"):
            self._edit(tok.start, tok.end, spelled, f"{tok.text} -> {spelled} (JSON needs double quotes)")
        return value

    def _object(self, path: PathT, open_tok: _Tok) -> tuple[_Map, _Tok]:
        out = _Map()
        if self._peek().kind == "}":
            return out, self._next()
        while True:
            tok = self._next()
            if tok.kind == "str":
                key = self._string(tok)
            elif tok.kind in ("word", "num"):
                key = tok.text
                self._edit(tok.start, tok.end, json.dumps(key), f"quoted the key {key} (JSON needs double quotes)")
            else:
                raise self._fail(tok, f"expected a key in double quotes, found {tok.text or 'the end of the text'!r}")
            colon = self._next()
            if colon.kind != ":":
                raise self._fail(colon, f"expected ':' after the key \"{key}\"")
            value_tok = self._peek()
            value, last = self._value(path + (key,))
            entry = _Entry(key=key, value=value, line=self.line_of(tok.start), key_span=(tok.start, tok.end),
                           origin=path + (key,))
            if not isinstance(value, (_Map, list)):
                entry.value_span = (value_tok.start, last.end)
                entry.quote = '"' if value_tok.kind == "str" else None
            entry.empty = value is None or (isinstance(value, _Map) and not value.entries)
            out.entries.append(entry)
            after = self._peek()
            if after.kind == ",":
                self._next()
                if self._peek().kind == "}":
                    self._edit(after.start, after.end, "", "removed a trailing comma before '}'")
                    return out, self._next()
                continue
            if after.kind == "}":
                return out, self._next()
            if after.kind in ("str", "word"):
                self._edit(last.end, last.end, ",", f"added a missing comma after the value of \"{key}\"")
                continue
            if after.kind == "eof":
                raise self._fail(open_tok, "this '{' is never closed")
            raise self._fail(after, f"expected ',' or '}}' after the value of \"{key}\"")

    def _array(self, path: PathT, open_tok: _Tok) -> tuple[list[Any], _Tok]:
        out: list[Any] = []
        if self._peek().kind == "]":
            return out, self._next()
        while True:
            value, last = self._value(path + (len(out),))
            out.append(_plain(value))
            after = self._peek()
            if after.kind == ",":
                self._next()
                if self._peek().kind == "]":
                    self._edit(after.start, after.end, "", "removed a trailing comma before ']'")
                    return out, self._next()
                continue
            if after.kind == "]":
                return out, self._next()
            if after.kind in ("str", "num", "word", "{", "["):
                self._edit(last.end, last.end, ",", "added a missing comma between two list items")
                continue
            if after.kind == "eof":
                raise self._fail(open_tok, "this '[' is never closed")
            raise self._fail(after, "expected ',' or ']' in a list")


def _apply(text: str, edits: list[tuple[int, int, str, str]]) -> str:
    out = text
    for start, end, replacement, _ in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        out = out[:start] + replacement + out[end:]
    return out


# ------------------------------------------------------------------------------------------ the schema side


def _knows(section: type[Section], key: Any) -> bool:
    return isinstance(key, str) and (key in fields_of(section) or key in section.DEPRECATED)


def _child_section(section: type[Section] | None, key: Any) -> type[Section] | None:
    if section is None or not isinstance(key, str):
        return None
    spec = fields_of(section).get(key)
    if spec is None and key in section.DEPRECATED and section.DEPRECATED[key]:
        spec = fields_of(section).get(section.DEPRECATED[key])
    return spec.section if spec is not None and spec.kind == "section" else None


def _homes(section: type[Section], key: str, prefix: PathT = (), seen: frozenset[type] = frozenset()) -> list[PathT]:
    """Paths (below `section`) of the sections that declare `key` (old names accepted as aliases do not count
    here: only a key a section really has says where a stray key belongs)."""
    out: list[PathT] = []
    for name, spec in fields_of(section).items():
        child = spec.section if spec.kind == "section" else None
        if child is None or child in seen:
            continue
        here = prefix + (name,)
        if isinstance(key, str) and key in fields_of(child):
            out.append(here)
        out += _homes(child, key, here, seen | {section})
    return out


def _removed(section: type[Section]) -> dict[str, str]:
    removed = getattr(section, "REMOVED", None)
    return removed if isinstance(removed, dict) else {}


def _suggest_key(section: type[Section], key: str) -> str | None:
    """The one known key `key` is a misspelling of; None for a key the tool dropped (REMOVED: not a typo)."""
    if not isinstance(key, str) or key in _removed(section):
        return None
    candidates = list(fields_of(section)) + [k for k in section.DEPRECATED]
    hint = suggest(key, candidates)
    return hint if hint is not None and hint != key else None


def _close(word: str, candidates: list[str]) -> list[str]:
    """Every candidate close enough to be the intended spelling (as suggest() measures it)."""
    lowered = {c.lower(): c for c in candidates if isinstance(c, str)}
    return [lowered[c] for c in difflib.get_close_matches(word.lower(), list(lowered), n=4, cutoff=0.75)]


# ------------------------------------------------------------------------------------------ repairing the tree


class _Repairer:
    def __init__(self) -> None:
        self.changes: list[tuple[int, str]] = []
        self.problems: list[tuple[int, str]] = []
        self.structural = False
        # Minimal text edits for changes that keep the structure: (start, end, replacement).
        self.edits: list[tuple[int, int, str]] = []
        self.fmt: Format = "yaml"

    def change(self, line: int, text: str) -> None:
        self.changes.append((line, f"line {line}: {text}"))

    def problem(self, line: int, text: str) -> None:
        self.problems.append((line, f"line {line}: {text}"))

    # -- one mapping level

    def repair(self, node: _Map, section: type[Section] | None, path: PathT) -> None:
        if section is not None:
            self._follow_headers(node, section, path)
            self._move_down(node, section, path)
            self._rename_keys(node, section, path)
        self._duplicates(node, path)
        for entry in node.entries:
            child = _child_section(section, entry.key)
            if isinstance(entry.value, _Map):
                self.repair(entry.value, child, path + (entry.key,))
            elif section is not None and isinstance(entry.key, str):
                spec = fields_of(section).get(entry.key)
                if spec is None and entry.key in section.DEPRECATED:
                    spec = fields_of(section).get(section.DEPRECATED[entry.key])
                if spec is not None:
                    self._fix_value(entry, spec, path + (entry.key,))
        if section is not None:
            # Last, once the values inside are repaired: old key names -> new ones (the new key's value check
            # decides whether a plain rename keeps the meaning).
            present = {e.key for e in node.entries}
            for entry in list(node.entries):
                if isinstance(entry.key, str) and entry.key in section.DEPRECATED:
                    self._deprecated(node, entry, section, path, present)

    def _follow_headers(self, node: _Map, section: type[Section], path: PathT) -> None:
        """Keys that follow an empty section header in the text and belong to that section go under it."""
        chain: list[tuple[_Entry, type[Section], PathT]] = []  # open headers, outermost first
        kept: list[_Entry] = []
        for entry in node.entries:
            key = entry.key
            if not chain:
                kept.append(entry)
                self._maybe_open(entry, section, path, chain)
                continue
            homes: list[int] = [i for i in range(len(chain) - 1, -1, -1) if _knows(chain[i][1], key)]
            here = _knows(section, key)
            if len(homes) + here == 1 and homes:
                i = homes[0]
                del chain[i + 1:]
                header, header_section, header_path = chain[i]
                self._put(header, entry, header_path)
                self._maybe_open(entry, header_section, header_path, chain)
                continue
            if len(homes) + here == 1:  # the level itself: the headers above are closed
                chain.clear()
                kept.append(entry)
                self._maybe_open(entry, section, path, chain)
                continue
            if homes or here:
                places = [format_path(chain[i][2]) for i in homes] + (["the top level" if not path else
                                                                       format_path(path)] if here else [])
                self.problem(entry.line, f"'{key}' could belong under {' or '.join(places)}; left where it is "
                                         "(indent it under the one you mean)")
                kept.append(entry)
                continue
            # Known nowhere along the chain: a misspelt key of the innermost header (or of this level)?
            fixes = [(i, _suggest_key(chain[i][1], key)) for i in range(len(chain) - 1, -1, -1)]
            fixes = [(i, hint) for i, hint in fixes if hint]
            level_hint = _suggest_key(section, key)
            if len(fixes) == 1 and not level_hint and isinstance(key, str):
                i, hint = fixes[0]
                del chain[i + 1:]
                header, header_section, header_path = chain[i]
                self.change(entry.line, f"key '{key}' -> '{hint}' (a key of {format_path(header_path)})")
                self.structural = True
                entry.key = hint
                self._put(header, entry, header_path)
                self._maybe_open(entry, header_section, header_path, chain)
                continue
            kept.append(entry)  # left for the next steps (a deeper section, a typo at this level, or unknown)
        node.entries = kept

    def _maybe_open(self, entry: _Entry, section: type[Section], path: PathT,
                    chain: list[tuple[_Entry, type[Section], PathT]]) -> None:
        child = _child_section(section, entry.key)
        if entry.empty and child is not None:
            chain.append((entry, child, path + (entry.key,)))

    def _put(self, header: _Entry, entry: _Entry, header_path: PathT) -> None:
        if not isinstance(header.value, _Map):
            header.value = _Map()
        header.value.entries.append(entry)
        header.empty = False
        self.structural = True
        self.change(entry.line, f"moved {entry.key} under {format_path(header_path)}")

    def _move_down(self, node: _Map, section: type[Section], path: PathT) -> None:
        """A key this level does not know, that exactly one section below it knows, goes there."""
        kept: list[_Entry] = []
        for entry in node.entries:
            key = entry.key
            if _knows(section, key) or not isinstance(key, str):
                kept.append(entry)
                continue
            homes = _homes(section, key)
            if len(homes) == 1:
                target = self._container(node, kept, homes[0], entry)
                if target is not None:
                    existing = target.get(key)
                    if existing is not None and _plain(existing.value) != _plain(entry.value):
                        self.problem(entry.line, f"'{key}' is a key of {format_path(path + homes[0])}, which "
                                                 f"already has '{key}' (line {existing.line}) with another value; "
                                                 "keep one")
                        kept.append(entry)
                        continue
                    if existing is not None:
                        self.change(entry.line, f"removed '{key}': {format_path(path + homes[0])} already has it "
                                                f"with the same value")
                    else:
                        target.entries.append(entry)
                        self.change(entry.line, f"moved {key} under {format_path(path + homes[0])}")
                    self.structural = True
                    continue
                kept.append(entry)
                continue
            if len(homes) > 1:
                places = ", ".join(format_path(path + h) for h in homes)
                self.problem(entry.line, f"'{key}' is a key of several sections ({places}); left where it is "
                                         "(move it under the one you mean)")
            kept.append(entry)
        node.entries = kept

    def _container(self, node: _Map, kept: list[_Entry], rel: PathT, entry: _Entry) -> _Map | None:
        """The mapping at `rel` below `node`, created when missing; None (and a problem) when something else is
        in the way."""
        current = node
        for depth, part in enumerate(rel):
            found = current.get(part)
            if found is None and current is node:
                found = next((e for e in kept if e.key == part), None)
            if found is None:
                found = _Entry(key=part, value=_Map(), line=entry.line, origin=())
                current.entries.append(found)
            elif found.value is None or (isinstance(found.value, _Map)):
                if found.value is None:
                    found.value = _Map()
                    found.empty = False
            else:
                self.problem(entry.line, f"'{entry.key}' belongs under {format_path(rel[:depth + 1])}, but that is "
                                         f"not a section here (line {found.line}); left where it is")
                return None
            current = found.value
        return current

    def _rename_keys(self, node: _Map, section: type[Section], path: PathT) -> None:
        """Misspelt keys -> the one close known key; deprecated keys -> their new names."""
        present = {e.key for e in node.entries}
        for entry in list(node.entries):
            key = entry.key
            if not isinstance(key, str):
                continue
            if key in section.DEPRECATED or key in fields_of(section) or key in _removed(section):
                continue
            hint = _suggest_key(section, key)
            if hint is None:
                several = _close(key, list(fields_of(section)))
                if len(several) > 1:
                    self.problem(entry.line, f"unknown key '{key}' is close to several keys ("
                                             f"{', '.join(several)}); left as it is")
                continue
            if hint in present:
                self.problem(entry.line, f"unknown key '{key}' looks like '{hint}', which is also set; keep one")
                continue
            self.change(entry.line, f"key '{key}' -> '{hint}'" + (f" (in {format_path(path)})" if path else ""))
            self._rename(entry, hint)
            present.add(hint)

    def _deprecated(self, node: _Map, entry: _Entry, section: type[Section], path: PathT, present: set[Any]) -> None:
        old, new = entry.key, section.DEPRECATED[entry.key]
        if not new:
            return  # nothing replaces it: the checker says so; not a repair
        if "." in new:
            self._deprecated_elsewhere(node, entry, section, path, new)
            return
        if new in present:
            clash = getattr(section, "DEPRECATED_CLASH", "")
            if clash:  # the tool refuses the two together: which one is meant is the user's call
                self.problem(entry.line, f"'{old}' is the old name of '{new}', which is also set ({clash}); keep one")
            else:  # the tool uses the new key and ignores the old one: removing it changes nothing
                self.change(entry.line, f"removed the deprecated key '{old}': '{new}' is also set and wins")
                node.entries.remove(entry)
                self.structural = True
            return
        spec = fields_of(section).get(new)
        value = _plain(entry.value)
        if spec is not None and not [f for f in check_value(spec, value, path + (new,)) if f[0] == "error"]:
            self.change(entry.line, f"deprecated key '{old}' -> '{new}'")
            self._rename(entry, new)
            present.add(new)
            return
        # An old on/off switch replaced by a choice that names it (accelerate's fp16: true -> mixed_precision: fp16).
        if spec is not None and spec.kind == "choice" and isinstance(value, bool) and old in spec.choices:
            replacement = old if value else ("no" if "no" in spec.choices else None)
            if replacement is not None:
                self.change(entry.line, f"deprecated key '{old}: {_show(value)}' -> '{new}: {replacement}'")
                self._rename(entry, new)
                entry.value = replacement
                if entry.value_span is not None:
                    self.edits.append((entry.value_span[0], entry.value_span[1],
                                       self._value_text(replacement, entry.quote)))
                else:
                    self.structural = True
                present.add(new)
                return
        # An old on/off switch replaced by a section with a device (DeepSpeed's cpu_offload -> offload_optimizer).
        if spec is not None and spec.kind == "section" and spec.section is not None and isinstance(value, bool) \
                and "device" in fields_of(spec.section):
            self.structural = True
            if value:
                self.change(entry.line, f"deprecated key '{old}: true' -> '{new}: {{device: cpu}}'")
                entry.key, entry.value = new, _Map([_Entry("device", "cpu", entry.line)])
                present.add(new)
            else:
                self.change(entry.line, f"removed the deprecated key '{old}: false' (no {new} is the same)")
                node.entries.remove(entry)
            return
        self.problem(entry.line, f"'{old}' is deprecated: '{new}' replaces it, but its value has another form; "
                                 "rewrite it by hand")

    def _deprecated_elsewhere(self, node: _Map, entry: _Entry, section: type[Section], path: PathT, new: str) -> None:
        """An old key whose new name lives in a section ("dynamo_backend" -> "dynamo_config.dynamo_backend")."""
        parts = tuple(new.split("."))
        target_section: type[Section] | None = section
        for part in parts[:-1]:
            target_section = _child_section(target_section, part)
        spec = fields_of(target_section).get(parts[-1]) if target_section is not None else None
        value = _plain(entry.value)
        holder = node.get(parts[0])
        if spec is None or [f for f in check_value(spec, value, path + parts) if f[0] == "error"]:
            self.problem(entry.line, f"'{entry.key}' is deprecated: set {new} instead (by hand: the value needs "
                                     "another form)")
            return
        if holder is not None and not (holder.empty or (isinstance(holder.value, _Map) and not holder.value.entries)):
            self.problem(entry.line, f"'{entry.key}' is deprecated and {parts[0]} is also set (line {holder.line}); "
                                     f"set {new} there and remove '{entry.key}'")
            return
        node.entries.remove(entry)
        target = self._container(node, node.entries, parts[:-1], entry)
        if target is None:
            node.entries.append(entry)
            return
        moved = _Entry(key=parts[-1], value=entry.value, line=entry.line, origin=entry.origin)
        target.entries.append(moved)
        self.structural = True
        self.change(entry.line, f"deprecated key '{entry.key}' -> '{new}'")

    def _rename(self, entry: _Entry, new: str) -> None:
        entry.key = new
        if entry.key_span is not None:
            self.edits.append((entry.key_span[0], entry.key_span[1], self._key_text(new)))
        else:
            self.structural = True

    def _duplicates(self, node: _Map, path: PathT) -> None:
        seen: dict[Any, _Entry] = {}
        for entry in node.entries:
            first = seen.get(entry.key)
            if first is not None:
                where = format_path(path + (entry.key,))
                if _plain(first.value) == _plain(entry.value):
                    self.change(entry.line, f"removed '{where}', set twice to the same value (also line {first.line})")
                    node.entries.remove(entry)
                    self.structural = True
                    return self._duplicates(node, path)
                self.problem(entry.line, f"'{where}' is set twice (also line {first.line}) with different values; "
                                         "keep the one you mean")
            else:
                seen[entry.key] = entry

    # -- values

    def _fix_value(self, entry: _Entry, spec: FieldSpec, path: PathT) -> None:
        value = entry.value
        errors = [f for f in check_value(spec, value, path) if f[0] == "error"]
        if not errors:
            return
        new = _corrected(value, spec)
        if new is _NOTHING:
            if isinstance(value, str) and spec.kind == "choice":
                several = _close(value, [c for c in spec.choices if isinstance(c, str)])
                if len(several) > 1:
                    self.problem(entry.line, f"{format_path(path)}: {_show(value)} is not allowed and is close to "
                                             f"several values ({', '.join(repr(c) for c in several)}); left as it is")
            return
        if [f for f in check_value(spec, new, path) if f[0] == "error"]:
            return
        self.change(entry.line, f"{format_path(path)}: {_show(value)} -> {_show(new)}")
        entry.value = new
        if entry.value_span is not None:
            self.edits.append((entry.value_span[0], entry.value_span[1], self._value_text(new, entry.quote)))
        else:
            self.structural = True

    # -- spelling values in the text

    def _value_text(self, value: Any, quote: str | None) -> str:
        if self.fmt == "json":
            return json.dumps(value, ensure_ascii=False)
        if isinstance(value, str):
            if quote == '"':
                return json.dumps(value, ensure_ascii=False)
            if quote == "'" or _needs_quotes(value):
                return "'" + value.replace("'", "''") + "'"
            return value
        return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()

    def _key_text(self, key: str) -> str:
        if self.fmt == "json":
            return json.dumps(key, ensure_ascii=False)
        return key if not _needs_quotes(key) else "'" + key.replace("'", "''") + "'"


_NOTHING = object()


def _needs_quotes(text: str) -> bool:
    try:
        return yaml.safe_load(text) != text or text != text.strip() or ":" in text or "#" in text or not text
    except yaml.YAMLError:
        return True


def _corrected(value: Any, spec: FieldSpec) -> Any:
    """The value the user most likely meant, or _NOTHING when there is no single clear one."""
    if isinstance(value, str):
        word = value.strip()
        if spec.auto and word.lower() == "auto":
            return "auto"
        if spec.kind == "bool" or (spec.kind == "choice" and any(isinstance(c, bool) for c in spec.choices)):
            if word.lower() in ("true", "false"):
                return word.lower() == "true"
        if spec.kind in ("int", "float") or (spec.kind == "choice" and all(
                isinstance(c, (int, float)) and not isinstance(c, bool) for c in spec.choices)):
            try:
                number: int | float = int(word)
            except ValueError:
                try:
                    number = float(word)
                except ValueError:
                    return _NOTHING
            return number
        if spec.kind == "choice":
            hint = suggest(word, [c for c in spec.choices if isinstance(c, str)])
            return hint if hint is not None else _NOTHING
        return _NOTHING
    if isinstance(value, bool) and spec.kind == "choice":
        # YAML 1.1 reads an unquoted no/yes/off/on as true/false: accelerate's 'no' written without quotes.
        spelled = {False: ("no", "false", "off"), True: ("yes", "true", "on")}[value]
        matches = [c for c in spec.choices if isinstance(c, str) and c.lower() in spelled]
        return matches[0] if len(matches) == 1 else _NOTHING
    return _NOTHING


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    return repr(value) if isinstance(value, str) else str(value)


# ------------------------------------------------------------------------------------------ entry point


def repair_text(text: str, file: str | None = None, *, kind: Kind | None = None, fmt: Format | None = None
                ) -> RepairResult:
    """Repair a pasted accelerate YAML or DeepSpeed JSON. See the module's description."""
    if fmt is None:
        lower = (file or "").lower()
        fmt = "json" if lower.endswith(".json") else "yaml" if lower.endswith((".yaml", ".yml")) else (
            "json" if text.lstrip("\ufeff \t\r\n").startswith("{") else "yaml")
    fixer = _Repairer()
    fixer.fmt = fmt
    syntax_edits: list[tuple[int, int, str, str]] = []
    flattened = False
    try:
        if fmt == "json":
            reader = _JsonReader(text)
            tree = reader.read()
            syntax_edits = reader.edits
        else:
            try:
                tree = _yaml_tree(text)
            except _Unparseable as first:
                flat = _flattened(text)
                if flat is None or flat == text:
                    raise first
                try:
                    tree = _yaml_tree(flat)
                except _Unparseable:
                    raise first from None
                flattened = True
    except _Unparseable as exc:
        return RepairResult(None, [], [f"cannot repair: {exc.describe()}"], fmt, kind)
    for start, _end, _rep, what in syntax_edits:
        fixer.changes.append((text.count("\n", 0, start) + 1, what))
    data = _plain(tree)
    kind = kind or detect_kind(data, fmt)
    if flattened:
        fixer.structural = True
        fixer.change(1, "the indentation was inconsistent (YAML could not read it): re-nested every key under "
                        "the section it belongs to")
    try:
        section: type[Section] | None = root_section(kind, data)
    except ModuleNotFoundError:
        section = None
        fixer.problems.append((0, f"the {kind} config description is not available: only syntax was repaired"))
    if section is not None:
        fixer.repair(tree, section, ())
    changes = [c for _, c in sorted(fixer.changes, key=lambda c: c[0])]
    problems = [p for _, p in sorted(fixer.problems, key=lambda p: p[0])]
    if fixer.structural:
        plain = _plain(tree)
        if fmt == "json":
            out = json.dumps(plain, indent=2, ensure_ascii=False) + "\n"
        else:
            out = yaml.safe_dump(plain, sort_keys=False, allow_unicode=True, default_flow_style=False)
    else:
        edits = list(syntax_edits) + [(s, e, r, "") for s, e, r in fixer.edits]
        out = _apply(text, edits)
    return RepairResult(out, changes, problems, fmt, kind)
