"""Loading a config file or pasted text into plain data, remembering where every key sits (line, column).

Malformed text never raises: it yields a SourceDocument with `data=None` and syntax messages that point at the
exact line and column. Valid text yields the data exactly as the parser gives it (no defaults added, nothing
dropped), so saving it back gives the same data.
"""

from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass, field
from json.decoder import scanstring  # type: ignore[attr-defined]
from pathlib import Path
from typing import Any, Literal

import yaml

from traindeck.backend.config.messages import Message, PathT, Severity, format_path

Kind = Literal["accelerate", "deepspeed"]
Format = Literal["yaml", "json"]


@dataclass
class SourceDocument:
    """One config as the user has it: its text, its data, and a map from key paths to positions."""

    text: str
    format: Format
    data: Any  # None when the text could not be parsed
    kind: Kind | None
    file: str | None = None
    locations: dict[PathT, tuple[int, int]] = field(default_factory=dict)  # path -> (line, column), 1-based
    syntax: list[Message] = field(default_factory=list)

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


def load_file(path: str | Path, kind: Kind | None = None) -> SourceDocument:
    """Read and parse a file; unreadable files become a SourceDocument with one error, not an exception."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        doc = SourceDocument("", _format_for(p.name, ""), None, kind, str(p))
        doc.syntax.append(Message("error", "", f"cannot read the file: {exc.strerror or exc}", str(p), None, None))
        return doc
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        doc = SourceDocument("", _format_for(p.name, ""), None, kind, str(p))
        doc.syntax.append(Message("error", "", "the file is not UTF-8 text", str(p), line, None))
        return doc
    return parse_text(text, file=str(p), kind=kind)


def parse_text(text: str, file: str | None = None, kind: Kind | None = None, fmt: Format | None = None) -> SourceDocument:
    """Parse YAML or JSON text (format from the file name, else sniffed from the text)."""
    fmt = fmt or _format_for(file or "", text)
    doc = SourceDocument(text, fmt, None, kind, file)
    if fmt == "json":
        _parse_json(doc)
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
    loader = yaml.SafeLoader(doc.text)
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


def _parse_json(doc: SourceDocument) -> None:
    duplicates: list[str] = []

    def pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                duplicates.append(key)
            out[key] = value
        return out

    try:
        doc.data = json.loads(doc.text, object_pairs_hook=pairs_hook)
    except json.JSONDecodeError as exc:
        problem, at = _json_problem(doc.text, exc)
        line = doc.text.count("\n", 0, at) + 1
        column = at - (doc.text.rfind("\n", 0, at) + 1) + 1
        doc.syntax.append(Message("error", "", f"JSON syntax: {problem}", doc.file, line, column))
        return
    _JsonIndexer(doc).index()
    for key in dict.fromkeys(duplicates):
        # DeepSpeed loads its config with a duplicate-key check and refuses such a file at start-up.
        locs = [p for p in doc.locations if p and p[-1] == key]
        where = doc.locations[locs[-1]] if locs else (None, None)
        doc.syntax.append(Message("error", key, f"key '{key}' appears twice; DeepSpeed refuses duplicate keys",
                                  doc.file, *where))


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


class _JsonIndexer:
    """Walks text that json.loads already accepted, recording where each key (and list item) starts."""

    _NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?")
    _WS = re.compile(r"[ \t\n\r]*")

    def __init__(self, doc: SourceDocument) -> None:
        self.doc, self.text = doc, doc.text
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", self.text)]

    def index(self) -> None:
        self._value(self._skip(0), ())

    def _pos(self, i: int) -> tuple[int, int]:
        line = bisect.bisect_right(self.line_starts, i)
        return line, i - self.line_starts[line - 1] + 1

    def _skip(self, i: int) -> int:
        return self._WS.match(self.text, i).end()  # type: ignore[union-attr]

    def _value(self, i: int, path: PathT) -> int:
        c = self.text[i]
        if c == "{":
            i = self._skip(i + 1)
            if self.text[i] == "}":
                return i + 1
            while True:
                key_at = i
                key, i = scanstring(self.text, i + 1)
                self.doc.locations[path + (key,)] = self._pos(key_at)
                i = self._skip(self._skip(i) + 1)  # past ':'
                i = self._skip(self._value(i, path + (key,)))
                if self.text[i] == "}":
                    return i + 1
                i = self._skip(i + 1)  # past ','
        if c == "[":
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
        if c == '"':
            return scanstring(self.text, i + 1)[1]
        for literal in ("true", "false", "null", "NaN", "Infinity", "-Infinity"):
            if self.text.startswith(literal, i):
                return i + len(literal)
        m = self._NUMBER.match(self.text, i)
        return m.end() if m else i + 1
