"""Reading config files that may be hostile or simply wrong: size, nesting depth and YAML alias expansion bounded.

A config is a few kilobytes nested four or five levels deep, so each bound is far above any real one and far below
what hurts: unbounded, a 100,000-deep `[[[[` ends in a RecursionError, a 370-byte "billion laughs" alias file
grows to gigabytes once walked, and a 49 MB file takes minutes. Each refusal is one `BoundsError` with a message
and, where the text has one, the 1-based line and column of the place; callers turn it into their one-line message.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

# A DeepSpeed JSON or accelerate YAML is a few KB; generated ones with long lists stay well under a megabyte.
MAX_BYTES = 8 * 1024 * 1024
# Real configs nest 4-5 levels (zero_optimization.offload_param.device). Python's own parsers fail near 1000.
MAX_DEPTH = 100
# Values YAML aliases may add when expanded (anchors are legitimate; a billion-laughs file adds billions).
MAX_ALIAS_VALUES = 100_000


class BoundsError(Exception):
    """The text is refused before parsing finishes: too big, too deep, or aliases that expand too far."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None) -> None:
        super().__init__(message)
        self.line, self.column = line, column


def _megabytes(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MB"


def too_big(size: int) -> str:
    """The one-line refusal of a file of `size` bytes, over MAX_BYTES."""
    return (f"the file is {_megabytes(size)}; a config file is at most {_megabytes(MAX_BYTES)} (accelerate and "
            "DeepSpeed configs are a few KB): is this the right file?")


def read_config_text(path: Path) -> str:
    """The text of a config file, refusing (BoundsError or OSError) files too big, binary or not UTF-8.

    Reads at most MAX_BYTES + 1 bytes, so a FIFO or /dev/zero given by mistake cannot fill the memory either.
    """
    with open(path, "rb") as handle:
        raw = handle.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        try:
            size = max(path.stat().st_size, len(raw))
        except OSError:
            size = len(raw)
        raise BoundsError(too_big(size))
    return decode_config_bytes(raw)


def decode_config_bytes(raw: bytes) -> str:
    """UTF-8 text (a BOM allowed), or BoundsError saying what the bytes are instead."""
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise BoundsError("the file is UTF-16 text (as Windows PowerShell's `>` writes it); save it as UTF-8")
    nul = raw.find(b"\x00")
    if nul >= 0:
        line = raw.count(b"\n", 0, nul) + 1
        raise BoundsError("this is a binary file (it contains NUL bytes), not a YAML or JSON config", line)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise BoundsError(f"the file is not UTF-8 text (byte 0x{raw[exc.start]:02x} cannot be read; save it as "
                          "UTF-8)", line, column) from None


# ------------------------------------------------------------------------------------------ YAML


class BoundedYamlError(yaml.MarkedYAMLError):
    """A YAML text refused for its depth or its aliases (a MarkedYAMLError, so every YAML error path reports it)."""


class BoundedSafeLoader(yaml.SafeLoader):
    """yaml.SafeLoader whose composer refuses nesting deeper than MAX_DEPTH, recursive aliases, and aliases that
    would add more than MAX_ALIAS_VALUES values once expanded.

    Counting is one pass over the events: each node records how many values it stands for with its aliases expanded,
    and an alias adds the count of the node it names; nothing is ever expanded to be counted.
    """

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0
        self._expanded = 0  # values so far, aliases expanded
        self._alias_values = 0  # of which aliases added
        self._sizes: dict[int, int] = {}  # id(finished anchored node) -> values it stands for

    def fetch_flow_collection_start(self, token_class: Any) -> None:
        # The scanner's simple-key bookkeeping costs its flow depth on every token: a 100,000-deep `[[[[` takes
        # seconds before the composer sees a node. Refuse at the scanner, where the depth is first known.
        if self.flow_level >= MAX_DEPTH:
            raise BoundedYamlError(None, None, f"nested more than {MAX_DEPTH} levels deep (a config has a few)",
                                   self.get_mark())
        super().fetch_flow_collection_start(token_class)

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            node = self.anchors.get(event.anchor)
            if node is not None:
                size = self._sizes.get(id(node))
                if size is None:  # registered under its anchor but not finished: the alias is inside it
                    raise BoundedYamlError(None, None, f"the alias *{event.anchor} refers to the value that "
                                           "contains it (a recursive structure no config can have)", event.start_mark)
                self._expanded += size
                self._alias_values += size
                if self._alias_values > MAX_ALIAS_VALUES:
                    raise BoundedYamlError(None, None, f"YAML aliases expand to more than {MAX_ALIAS_VALUES:,} "
                                           "values (an alias bomb?); no config needs that", event.start_mark)
            return super().compose_node(parent, index)
        event = self.peek_event()
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise BoundedYamlError(None, None, f"nested more than {MAX_DEPTH} levels deep (a config has a few)",
                                   event.start_mark)
        before = self._expanded
        self._expanded += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if getattr(event, "anchor", None) is not None:
            self._sizes[id(node)] = self._expanded - before
        return node


def yaml_problem_line(exc: yaml.MarkedYAMLError) -> tuple[int | None, int | None]:
    """The 1-based (line, column) a YAML error points at; (None, None) when it has no mark."""
    mark = exc.problem_mark or exc.context_mark
    return (mark.line + 1, mark.column + 1) if mark else (None, None)


# ------------------------------------------------------------------------------------------ JSON

# A string as one run of plain characters between escapes: `"(?:[^"\\]|\\.)*"` would cost the regex engine a saved
# state per character (about 130 bytes each: a 7 MB string took 900 MB and 0.8 s).
_JSON_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def json_too_deep(text: str, limit: int = MAX_DEPTH) -> int | None:
    """Index of the first '[' or '{' opened deeper than `limit` (strings skipped), or None. One pass."""
    depth = 0
    for m in _JSON_TOKEN.finditer(text):
        c = text[m.start()]
        if c in "[{":
            depth += 1
            if depth > limit:
                return m.start()
        elif c in "]}":
            depth -= 1
    return None


def line_column(text: str, index: int) -> tuple[int, int]:
    """The 1-based (line, column) of character `index` in `text`."""
    line = text.count("\n", 0, index) + 1
    return line, index - (text.rfind("\n", 0, index) + 1) + 1
