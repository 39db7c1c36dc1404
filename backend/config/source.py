"""Loading a config file or pasted text into plain data, remembering where every key sits (line, column).

Malformed text never raises: it yields a SourceDocument with `data=None` and syntax messages that point at the
exact line and column. Valid text yields the data exactly as the parser gives it (no defaults added, nothing
dropped), so saving it back gives the same data.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from json.decoder import scanstring  # type: ignore[attr-defined]
from pathlib import Path
from typing import Any, Literal

import yaml

from traindeck.backend.config.bounded import (
    MAX_BYTES,
    MAX_DEPTH,
    BoundedSafeLoader,
    BoundedYamlError,
    BoundsError,
    json_too_deep,
    line_column,
    read_config_text,
    too_big,
)
from traindeck.backend.config.messages import Message, PathT, Severity, format_path

Kind = Literal["accelerate", "deepspeed"]
Format = Literal["yaml", "json"]


class Locations(dict[PathT, tuple[int, int]]):
    """Key path -> (line, column), 1-based. The inside of a JSON list is indexed the first time a path into it is
    asked for (`in`, `[]`, `get`): a long list (a generated per-layer table) costs no walk in Python unless a
    message points into it. Iterating lists only what is indexed so far; `index_all()` indexes the rest first."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deferred: dict[PathT, int] = {}  # list path -> index of its '[' in the text
        self._indexer: _JsonIndexer | None = None

    def defer(self, path: PathT, at: int, indexer: _JsonIndexer) -> None:
        self._deferred[path] = at
        self._indexer = indexer

    def _index_into(self, path: PathT) -> None:
        """Index the deferred list `path` lies inside (none is inside another: a deferred list is indexed whole)."""
        if not self._deferred or self._indexer is None:
            return
        for k in range(1, len(path)):
            at = self._deferred.pop(path[:k], None)
            if at is not None:
                self._indexer.walk_list(at, path[:k])
                return

    def index_all(self) -> None:
        while self._deferred and self._indexer is not None:
            path, at = self._deferred.popitem()
            self._indexer.walk_list(at, path)

    def __contains__(self, path: object) -> bool:
        if dict.__contains__(self, path):
            return True
        if isinstance(path, tuple) and self._deferred:
            self._index_into(path)
            return dict.__contains__(self, path)
        return False

    def __missing__(self, path: PathT) -> tuple[int, int]:
        if isinstance(path, tuple) and self._deferred:
            self._index_into(path)
            if dict.__contains__(self, path):
                return dict.__getitem__(self, path)
        raise KeyError(path)

    def get(self, path: PathT, default: Any = None) -> Any:
        return self[path] if path in self else default

    def clear(self) -> None:
        super().clear()
        self._deferred.clear()
        self._indexer = None


@dataclass
class SourceDocument:
    """One config as the user has it: its text, its data, and a map from key paths to positions."""

    text: str
    format: Format
    data: Any  # None when the text could not be parsed
    kind: Kind | None
    file: str | None = None
    locations: dict[PathT, tuple[int, int]] = field(default_factory=Locations)  # path -> (line, column), 1-based
    syntax: list[Message] = field(default_factory=list)
    # JSON slips DeepSpeed's own reader (hjson) reads past, while strict JSON readers (the HF Trainer, accelerate)
    # stop on them: whether each is an error depends on who reads the file (validate.check_document decides).
    lenient: list[Message] = field(default_factory=list)

    def where(self, path: PathT) -> tuple[int | None, int | None]:
        """Position of `path`, or of its nearest ancestor that exists in the text (for keys that are missing)."""
        probe = tuple(path)
        while probe:
            if probe in self.locations:
                return self.locations[probe]
            probe = probe[:-1]
        return (1, 1) if self.text else (None, None)

    def message(self, severity: Severity, path: PathT, text: str) -> Message:
        line, column = self.where(path)
        return Message(severity, format_path(path), text, self.file, line, column)


def load_file(path: str | Path, kind: Kind | None = None, *, as_deepspeed_reads: bool = False) -> SourceDocument:
    """Read and parse a file; unreadable, binary, non-UTF-8 and oversized files become a SourceDocument with one
    error (bounded.py), not an exception. `as_deepspeed_reads`: JSON that strict JSON refuses but DeepSpeed's own
    reader (hjson) takes is read as DeepSpeed reads it, its slips kept in `lenient` (for `config check`)."""
    p = Path(path)
    try:
        text = read_config_text(p)
    except OSError as exc:
        doc = SourceDocument("", _format_for(p.name, ""), None, kind, str(p))
        doc.syntax.append(Message("error", "", f"cannot read the file: {exc.strerror or exc}", str(p), None, None))
        return doc
    except BoundsError as exc:
        doc = SourceDocument("", _format_for(p.name, ""), None, kind, str(p))
        doc.syntax.append(Message("error", "", str(exc), str(p), exc.line, exc.column))
        return doc
    return parse_text(text, file=str(p), kind=kind, as_deepspeed_reads=as_deepspeed_reads)


def parse_text(text: str, file: str | None = None, kind: Kind | None = None, fmt: Format | None = None,
               *, locate: bool = True, as_deepspeed_reads: bool = False) -> SourceDocument:
    """Parse YAML or JSON text (format from the file name, else sniffed from the text). `locate=False` skips
    recording where each JSON key sits (a pass in Python over the whole text) when only the verdict is needed."""
    fmt = fmt or _format_for(file or "", text)
    doc = SourceDocument(text, fmt, None, kind, file)
    if len(text) > MAX_BYTES:  # pasted text: the same bound as a file's
        doc.syntax.append(Message("error", "", too_big(len(text.encode("utf-8", "replace"))), file, 1, 1))
        return doc
    if fmt == "json":
        _parse_json(doc, locate=locate, as_deepspeed_reads=as_deepspeed_reads and kind in (None, "deepspeed"))
    else:
        _parse_yaml(doc)
    if doc.data is not None and not isinstance(doc.data, dict):
        doc.syntax.append(doc.message("error", (), f"expected a mapping of keys to values at the top, found {_type_word(doc.data)}"))
        doc.data = None
    if doc.kind is None and isinstance(doc.data, dict):
        doc.kind = detect_kind(doc.data, fmt)
    return doc


# Keys that only one of the two kinds of file has: enough to tell a pasted text's kind.
_ACCELERATE_MARKERS = {
    "compute_environment", "distributed_type", "num_processes", "num_machines", "machine_rank", "mixed_precision",
    "deepspeed_config", "fsdp_config", "megatron_lm_config", "use_cpu", "gpu_ids", "main_training_function",
}
_DEEPSPEED_MARKERS = {
    "zero_optimization", "train_batch_size", "train_micro_batch_size_per_gpu", "fp16", "bf16", "bfloat16",
    "optimizer", "scheduler", "gradient_accumulation_steps", "steps_per_print", "wall_clock_breakdown", "aio",
    "activation_checkpointing", "zero_allow_untested_optimizer",
}


def detect_kind(data: dict[str, Any], fmt: Format | None = None) -> Kind:
    """accelerate YAML or DeepSpeed JSON, by which kind's keys dominate (ties: by format)."""
    keys = set(map(str, data))
    acc = len(keys & _ACCELERATE_MARKERS)
    ds = len(keys & _DEEPSPEED_MARKERS)
    if acc != ds:
        return "accelerate" if acc > ds else "deepspeed"
    return "deepspeed" if fmt == "json" else "accelerate"


def _format_for(name: str, text: str) -> Format:
    lower = name.lower()
    if lower.endswith(".json"):
        return "json"
    if lower.endswith((".yaml", ".yml")):
        return "yaml"
    return "json" if text.lstrip().startswith(("{", "[")) else "yaml"


def _type_word(value: Any) -> str:
    return {list: "a list", str: "a single text value", int: "a number", float: "a number", bool: "true/false"}.get(
        type(value), type(value).__name__
    )


# ----------------------------------------------------------------------------------------------- YAML


class _DuplicateKey(Exception):
    def __init__(self, key: str, first: yaml.Mark, again: yaml.Mark) -> None:
        super().__init__(key)
        self.key, self.first, self.again = key, first, again


def _parse_yaml(doc: SourceDocument) -> None:
    loader = BoundedSafeLoader(doc.text)
    try:
        node = loader.get_single_node()
        if node is None:  # empty document
            doc.data = {}
            return
        doc.data = loader.construct_document(node)
        _index_yaml(node, (), doc, loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = " ".join(p for p in (exc.problem, exc.context and f"({exc.context})") if p) or str(exc)
        line, column = (mark.line + 1, mark.column + 1) if mark else (None, None)
        hint = " (tabs cannot indent YAML: use spaces)" if "\\t" in problem or "'\t'" in problem else ""
        if isinstance(exc, BoundedYamlError):  # not a syntax mistake: a file refused for what it would become
            doc.syntax.append(Message("error", "", f"YAML refused: {problem}", doc.file, line, column))
            doc.data = None
            return
        if "mapping values are not allowed here" in problem:
            hint = " (this line is indented differently from the keys beside it, or a value with ': ' needs quotes)"
        start = exc.context_mark
        if start is not None and mark is not None and start.line != mark.line:  # e.g. where an unclosed quote opened
            hint += f" (it starts on line {start.line + 1}, column {start.column + 1})"
        doc.syntax.append(Message("error", "", f"YAML syntax: {problem}{hint}", doc.file, line, column))
        doc.data = None
    except yaml.YAMLError as exc:
        doc.syntax.append(Message("error", "", f"YAML syntax: {exc}", doc.file, 1, 1))
        doc.data = None
    finally:
        loader.dispose()


def _index_yaml(node: yaml.Node, path: PathT, doc: SourceDocument, loader: yaml.SafeLoader) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, yaml.Mark] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int)):
                key = str(key)
            if key in seen:
                # YAML keeps the last value silently; the user almost never means that.
                doc.syntax.append(
                    Message("warning", format_path(path + (key,)),
                            f"key '{key}' appears twice (also on line {seen[key].line + 1}); the last value wins",
                            doc.file, key_node.start_mark.line + 1, key_node.start_mark.column + 1)
                )
            seen[key] = key_node.start_mark
            child = path + (key,)
            doc.locations[child] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            _index_yaml(value_node, child, doc, loader)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            doc.locations[path + (i,)] = (item.start_mark.line + 1, item.start_mark.column + 1)
            _index_yaml(item, path + (i,), doc, loader)


# ----------------------------------------------------------------------------------------------- JSON


def _noting_duplicates(duplicates: list[str]) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    """An object_pairs_hook that builds the dict as json does (the last value wins) and notes each repeated key
    (DeepSpeed loads its config with a hook that refuses them)."""

    def pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                duplicates.append(key)
            out[key] = value
        return out

    return pairs_hook


def _parse_json(doc: SourceDocument, *, locate: bool = True, as_deepspeed_reads: bool = False) -> None:
    duplicates: list[str] = []
    try:
        doc.data = json.loads(doc.text, object_pairs_hook=_noting_duplicates(duplicates))
    except RecursionError:  # json's C decoder gives up near 1000 levels: say where our own bound is passed
        _too_deep(doc, json_too_deep(doc.text) or 0)
        return
    except json.JSONDecodeError as exc:
        slips = _json_syntax(doc, exc)
        if not as_deepspeed_reads or not _read_as_deepspeed_does(doc):
            doc.syntax += slips
            return
        doc.lenient += slips
        return
    try:
        if locate:
            _JsonIndexer(doc).index()
    except _TooDeep as deep:
        doc.data = None
        doc.locations.clear()
        _too_deep(doc, deep.index)
        return
    if duplicates and isinstance(doc.locations, Locations):
        doc.locations.index_all()  # a repeated key may sit in an object inside a list
    for key in dict.fromkeys(duplicates):
        # DeepSpeed loads its config with a duplicate-key check and refuses such a file at start-up.
        locs = [p for p in doc.locations if p and p[-1] == key]
        where = doc.locations[locs[-1]] if locs else (None, None)
        doc.syntax.append(Message("error", key, f"key '{key}' appears twice; DeepSpeed refuses duplicate keys",
                                  doc.file, *where))


def _read_as_deepspeed_does(doc: SourceDocument) -> bool:
    """DeepSpeedConfig(path) loads the file with hjson (duplicate keys refused): when that reads a mapping, keep its
    data, located through the tolerant reader's tree. False when hjson refuses the text too, or is not installed."""
    if not doc.text.strip():
        return False  # hjson reads nothing as {}; DeepSpeed then stops on the missing batch size: say "empty"
    try:
        import hjson
    except ImportError:
        return False
    from traindeck.backend.config.repair_tree import KeyMap, Unparseable
    from traindeck.backend.config.tolerant_json import TolerantJsonReader

    duplicates: list[str] = []
    try:
        data = hjson.loads(doc.text, object_pairs_hook=_noting_duplicates(duplicates))
    except (hjson.HjsonDecodeError, RecursionError, ValueError):
        return False
    if not isinstance(data, dict) or duplicates:
        return False
    doc.data = data
    try:
        reader = TolerantJsonReader(doc.text)
        tree = reader.read()
    except Unparseable:
        return True

    def walk(node: Any, path: PathT) -> None:
        if isinstance(node, KeyMap):
            for entry in node.entries:
                here = path + (entry.key,)
                if entry.key_span is not None:
                    doc.locations[here] = (reader.line_of(entry.key_span[0]), reader.column_of(entry.key_span[0]))
                walk(entry.value, here)
        elif isinstance(node, list):
            for i, item in enumerate(node):
                walk(item, path + (i,))

    walk(tree, ())
    return True


def _too_deep(doc: SourceDocument, index: int) -> None:
    line, column = line_column(doc.text, index)
    doc.syntax.append(Message("error", "", f"JSON refused: nested more than {MAX_DEPTH} levels deep (a config has a "
                                           "few)", doc.file, line, column))


def _json_syntax(doc: SourceDocument, exc: json.JSONDecodeError) -> list[Message]:
    """Every syntax problem in the text, not only the first json stops at: the tolerant reader (shared with
    `config fix`) reads on past trailing and missing commas, comments, single quotes and Python literals, naming
    each, until a problem it cannot read past (also named). json's own first error is always among them."""
    from traindeck.backend.config.repair_tree import Unparseable
    from traindeck.backend.config.tolerant_json import TolerantJsonReader

    found: dict[tuple[int, int], str] = {}
    reader: TolerantJsonReader | None = None
    stop: Unparseable | None = None
    try:
        reader = TolerantJsonReader(doc.text)
        reader.read()
    except Unparseable as exc_stop:
        stop = exc_stop
    if reader is not None:
        for at, problem in reader.problems:
            found.setdefault((reader.line_of(at), reader.column_of(at)), problem)
    problem, at = _json_problem(doc.text, exc)
    first = line_column(doc.text, at)
    found.setdefault(first, problem)  # json's wording, where the reader saw nothing at that place
    if stop is not None and stop.line is not None:
        found.setdefault((stop.line, stop.column or 1), str(stop).removeprefix("JSON syntax: "))
    return [Message("error", "", f"JSON syntax: {text}", doc.file, line, column)
            for (line, column), text in sorted(found.items())]


def _json_problem(text: str, exc: json.JSONDecodeError) -> tuple[str, int]:
    """json's own message, or the likely cause for the mistakes people make when copying configs; and where."""
    before = text[: exc.pos].rstrip()
    after = text[exc.pos :].lstrip()
    trailing = before.endswith(",") and after[:1] in "]}"
    if trailing and (exc.msg.startswith("Expecting property name") or exc.msg.startswith("Expecting value")):
        return "a trailing comma before ']' or '}' (JSON allows none; `traindeck config fix` removes it)", len(before) - 1
    if exc.msg.startswith("Expecting ',' delimiter"):
        return "a missing comma between two entries (`traindeck config fix` adds it)", exc.pos
    if exc.msg.startswith("Expecting property name enclosed in double quotes") and after[:1] == "'":
        return "keys must use double quotes in JSON, not single quotes", exc.pos
    if exc.msg.startswith("Expecting value") and re.match(r"(True|False|None)\b", after):
        word = re.match(r"\w+", after).group(0)  # type: ignore[union-attr]
        return f"'{word}' is Python; JSON writes true, false or null", exc.pos
    return exc.msg, exc.pos


_DECODER = json.JSONDecoder()


class _TooDeep(Exception):
    def __init__(self, index: int) -> None:
        super().__init__(index)
        self.index = index


class _JsonIndexer:
    """Walks text that json.loads already accepted, recording where each key (and list item) starts. A list is
    stepped over by json's C decoder (its depth still bounded) and its inside indexed only when a path into it is
    asked for (Locations): no rule reads inside a long list, so its items cost nothing."""

    _NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?")
    _WS = re.compile(r"[ \t\n\r]*")
    # A key without escapes, then a text value without escapes, a number, true, false or null, and the space after.
    _PLAIN_ENTRY = re.compile(r'"([^"\\]*)"[ \t\n\r]*:[ \t\n\r]*(?:"[^"\\]*"|-?[0-9][-+.0-9eE]*|true|false|null)'
                              r"[ \t\n\r]*")

    def __init__(self, doc: SourceDocument) -> None:
        self.doc, self.text = doc, doc.text
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", self.text)]
        self.defer_lists = True  # lists met while indexing a deferred list are indexed with it

    def index(self) -> None:
        self._value(self._skip(0), ())

    def walk_list(self, at: int, path: PathT) -> None:
        """Record where each item inside the list opening at `at` starts (the list already passed the depth
        bound)."""
        self.defer_lists = False
        try:
            self._list(at, path)
        finally:
            self.defer_lists = True

    def _step_over_list(self, i: int, path: PathT) -> int | None:
        """The end of the list opening at `i`, its inside left to be indexed on demand; None when it cannot be
        deferred (the document's locations are a plain dict)."""
        if not isinstance(self.doc.locations, Locations):
            return None
        try:
            end = _DECODER.raw_decode(self.text, i)[1]
        except (ValueError, RecursionError):
            return None
        room = MAX_DEPTH - len(path)
        nested = self.text.count("[", i + 1, end) + self.text.count("{", i, end)
        if nested >= room:  # brackets inside text values count too: only then is the depth worth a look
            too_deep = json_too_deep(self.text[i:end], room)
            if too_deep is not None:
                raise _TooDeep(i + too_deep)
        self.doc.locations.defer(path, i, self)
        return end

    def _pos(self, i: int) -> tuple[int, int]:
        line = bisect.bisect_right(self.line_starts, i)
        return line, i - self.line_starts[line - 1] + 1

    def _skip(self, i: int) -> int:
        return self._WS.match(self.text, i).end()  # type: ignore[union-attr]

    def _value(self, i: int, path: PathT) -> int:
        c = self.text[i]
        if c in "{[" and len(path) >= MAX_DEPTH:
            raise _TooDeep(i)
        if c == "{":
            i = self._skip(i + 1)
            if self.text[i] == "}":
                return i + 1
            while True:
                key_at = i
                plain = self._PLAIN_ENTRY.match(self.text, i)
                if plain is not None:  # the commonest entry, "key": plain value, in one match
                    self.doc.locations[path + (plain.group(1),)] = self._pos(key_at)
                    i = plain.end()
                else:
                    key, i = scanstring(self.text, i + 1)
                    self.doc.locations[path + (key,)] = self._pos(key_at)
                    i = self._skip(self._skip(i) + 1)  # past ':'
                    i = self._skip(self._value(i, path + (key,)))
                if self.text[i] == "}":
                    return i + 1
                i = self._skip(i + 1)  # past ','
        if c == "[":
            end = self._step_over_list(i, path) if self.defer_lists else None
            return end if end is not None else self._list(i, path)
        if c == '"':
            return scanstring(self.text, i + 1)[1]
        for literal in ("true", "false", "null", "NaN", "Infinity", "-Infinity"):
            if self.text.startswith(literal, i):
                return i + len(literal)
        m = self._NUMBER.match(self.text, i)
        return m.end() if m else i + 1

    def _list(self, i: int, path: PathT) -> int:
        """Index the items of the list opening at `i` (and everything inside them); the end of the list."""
        i = self._skip(i + 1)
        n = 0
        if self.text[i] == "]":
            return i + 1
        while True:
            self.doc.locations[path + (n,)] = self._pos(i)
            i = self._skip(self._value(i, path + (n,)))
            n += 1
            if self.text[i] == "]":
                return i + 1
            i = self._skip(i + 1)
