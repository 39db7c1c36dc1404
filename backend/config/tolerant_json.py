"""Reading JSON as people paste it: trailing and missing commas, Python's True/False/None, single quotes, unquoted
keys, // # and /* */ comments, numbers like .5 or 1.

`TolerantJsonReader(text).read()` gives the repair tree (repair_tree.KeyMap) and records, for each place that is
not strict JSON, both the edit that makes it strict (`edits`, for `config fix`) and what is wrong there in the
checker's words (`problems`, for `config check`, which names every such place instead of only the first).

One pass: tokens from one regular expression, positions from a table of line starts; nesting deeper than
bounded.MAX_DEPTH is refused, so no input makes it recurse without bound.
"""

from __future__ import annotations

import ast
import bisect
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from traindeck.backend.config.bounded import MAX_DEPTH, json_too_deep
from traindeck.backend.config.messages import PathT
from traindeck.backend.config.repair_tree import Entry, KeyMap, Unparseable, plain

Edit = tuple[int, int, str, str]  # (start, end, replacement, "line N: what was done")


@dataclass(slots=True)
class Tok:
    kind: str  # "{", "}", "[", "]", ":", ",", "str", "num", "word", "eof"
    start: int
    end: int
    text: str


# Strings as runs of plain characters between escapes: `"(?:[^"\\\n]|\\.)*"` would cost the regex engine a saved state
# per character (a 7 MB string value took over 900 MB).
_TOKEN = re.compile(
    r"""[ \t\r\n\ufeff]*
    (?:   (?P<punct>[{}\[\]:,])
      | (?P<line_comment>//[^\n]*|\#[^\n]*)
      | (?P<block_comment>/\*.*?\*/)
      | (?P<str>"[^"\\\n]*(?:\\.[^"\\\n]*)*"|'[^'\\\n]*(?:\\.[^'\\\n]*)*')
      | (?P<num>-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)
      | (?P<word>[A-Za-z_$][A-Za-z0-9_$.-]*|-?Infinity)
      | (?P<eof>\Z) )""",
    re.VERBOSE | re.DOTALL,
)
# One strict entry with a plain value, then a comma and the next key's quote (not taken): text values without
# escapes or line breaks, strict numbers, true/false/null.
_PLAIN_ENTRY = re.compile(
    r"""[ \t\r\n]*("[^"\\\n]*")[ \t\r\n]*:[ \t\r\n]*
    ("[^"\\\n]*"|-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?|true\b|false\b|null\b)
    [ \t\r\n]*,(?=[ \t\r\n]*")""",
    re.VERBOSE,
)
_STRICT_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?")
_LITERALS = {"true": True, "false": False, "null": None, "NaN": float("nan"), "Infinity": float("inf"),
             "-Infinity": float("-inf")}
_PYTHON = {"True": ("true", True), "False": ("false", False), "None": ("null", None)}
_DECODER = json.JSONDecoder()
_STRICT_TRIES = 16
_PAIRS_DECODER = json.JSONDecoder(object_pairs_hook=lambda pairs: _Pairs(pairs))


class _Pairs(list):
    """A JSON object as decoded for _strict_object: its (key, value) pairs, duplicates kept."""


def _tree(pairs: _Pairs, line: int, path: PathT) -> KeyMap:
    out = KeyMap()
    entries = out.entries
    for key, value in pairs:
        here = path + (key,)
        if isinstance(value, _Pairs):
            value = _tree(value, line, here)
            empty = not value.entries
        elif isinstance(value, list):
            value = _plain_list(value)
            empty = False
        else:
            empty = value is None
        # Entry(key, value, line, key_span, value_span, quote, empty, origin), positionally: one per key of a
        # mapping of any size.
        entries.append(Entry(key, value, line, None, None, None, empty, here))
    return out


def _plain_list(items: list[Any]) -> list[Any]:
    return [plain(_tree(item, 0, ())) if isinstance(item, _Pairs) else _plain_list(item) if isinstance(item, list)
            else item for item in items]



class TolerantJsonReader:
    """Reads JSON as people paste it, recording the edits that make it strict JSON and the problems they fix."""

    def __init__(self, text: str, plain_below: Callable[[PathT], bool] | None = None) -> None:
        """`plain_below(path)`: True where nothing below `path` will be edited in place (no description knows
        it): a mapping there that is strict JSON already is read by json's C decoder in one call."""
        self.text = text
        self.plain_below = plain_below
        # json's error for a miss counts the lines from the start of the text: a few misses are cheap, one per
        # entry of a long section with a slip in each would make reading quadratic. After this many, no more tries.
        self._strict_misses = 0
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.edits: list[Edit] = []
        # (index, what is wrong there): the checker's message for each place that is not strict JSON.
        self.problems: list[tuple[int, str]] = []
        self._ahead: Tok | None = None  # the one token looked at but not taken
        self.pos = 0  # where the next token is read from

    # -- positions

    def line_of(self, index: int) -> int:
        return bisect.bisect_right(self.line_starts, index)

    def column_of(self, index: int) -> int:
        return index - self.line_starts[self.line_of(index) - 1] + 1

    def _edit(self, start: int, end: int, replacement: str, what: str, problem: str, at: int | None = None) -> None:
        self.edits.append((start, end, replacement, f"line {self.line_of(start)}: {what}"))
        self.problems.append((start if at is None else at, problem))

    # -- tokens

    def _lex(self) -> Tok:
        """The next token from self.pos on (comments are removed on the way); tokens are read as the parser asks
        for them, so a text refused early (too deep) is not read to the end, and a list can be read at once."""
        text, match = self.text, _TOKEN.match
        while True:
            m = match(text, self.pos)
            if m is None:
                i = self.pos
                while text[i] in " \t\r\n\ufeff":
                    i += 1
                self._bad_character(i)
            kind, end = m.lastgroup, m.end()  # type: ignore[union-attr]
            self.pos = end
            if kind == "punct":  # the commonest: one character, just before the end
                c = text[end - 1]
                return Tok(c, end - 1, end, c)
            word = m.group(kind)  # type: ignore[union-attr,arg-type]
            start = end - len(word)
            if kind == "eof":
                self.pos = start
                return Tok("eof", start, start, "")
            if kind == "line_comment":
                self._remove_comment(start, end, "// comment" if text[start] == "/" else "# comment")
            elif kind == "block_comment":
                self._remove_comment(start, end, "/* */ comment")
            else:
                return Tok(kind, start, end, word)  # type: ignore[arg-type]

    def _bad_character(self, i: int) -> None:
        c = self.text[i]
        if self.text.startswith("/*", i):
            raise Unparseable("a /* comment is never closed", self.line_of(i), self.column_of(i))
        if c in "\"'":
            raise Unparseable("a text value is not closed on its line (missing quote)", self.line_of(i),
                              self.column_of(i))
        raise Unparseable(f"unexpected character {c!r}", self.line_of(i), self.column_of(i))

    def _remove_comment(self, start: int, end: int, what: str) -> None:
        problem = (f"a {what.split()[0]} comment: JSON has none (DeepSpeed skips it, but accelerate and the HF "
                   "Trainer read the file with json and refuse it; `traindeck config fix` removes it)")
        line_start = self.line_starts[self.line_of(start) - 1]
        line_end = self.text.find("\n", end)
        line_end = len(self.text) if line_end < 0 else line_end
        before = self.text[line_start:start]
        after = self.text[end:line_end]
        if not before.strip() and not after.strip():
            # The comment is all there is on its line(s): remove the line(s).
            self._edit(line_start, min(line_end + 1, len(self.text)), "", f"removed a {what}", problem, start)
            return
        lead = len(before) - len(before.rstrip(" \t"))
        self._edit(start - lead, end, "", f"removed a {what}", problem, start)

    # -- parsing

    def _peek(self) -> Tok:
        if self._ahead is None:
            self._ahead = self._lex()
        return self._ahead

    def _next(self) -> Tok:
        tok = self._peek()
        self._ahead = None
        return tok

    def _fail(self, tok: Tok, message: str) -> Unparseable:
        return Unparseable(f"JSON syntax: {message}", self.line_of(tok.start), self.column_of(tok.start))

    def read(self) -> KeyMap:
        tok = self._peek()
        if tok.kind != "{":
            raise self._fail(tok, "expected '{' at the start of a DeepSpeed JSON config")
        value, _ = self._value(())
        tok = self._peek()
        if tok.kind == ",":
            self._next()
            self._edit(tok.start, tok.end, "", "removed a comma after the closing '}'",
                       "a comma after the closing '}' (`traindeck config fix` removes it)")
            tok = self._peek()
        if tok.kind != "eof":
            raise self._fail(tok, "text after the end of the config")
        return value

    def _value(self, path: PathT) -> tuple[Any, Tok]:
        """(value, its last token)."""
        tok = self._next()
        if tok.kind in "{[" and len(path) >= MAX_DEPTH:
            raise Unparseable(f"JSON refused: nested more than {MAX_DEPTH} levels deep (a config has a few)",
                              self.line_of(tok.start), self.column_of(tok.start))
        if tok.kind == "{":
            if self.plain_below is not None and path and self.plain_below(path):
                strict_map = self._strict_object(tok, path)
                if strict_map is not None:
                    return strict_map
            return self._object(path, tok)
        if tok.kind == "[":
            strict = self._strict_list(tok, path)
            if strict is not None:
                return strict
            return self._array(path, tok)
        if tok.kind == "str":
            return self._string(tok), tok
        if tok.kind == "num":
            return self._number(tok), tok
        if tok.kind == "word":
            if tok.text in _LITERALS:
                return _LITERALS[tok.text], tok
            if tok.text in _PYTHON:
                spelled, value = _PYTHON[tok.text]
                self._edit(tok.start, tok.end, spelled, f"{tok.text} -> {spelled} (JSON spelling)",
                           f"'{tok.text}' is Python; JSON writes true, false or null")
                return value, tok
            raise self._fail(tok, f"{tok.text!r} is not a JSON value (text must be in double quotes)")
        raise self._fail(tok, f"expected a value, found {tok.text or 'the end of the text'!r}")

    def _strict_object(self, open_tok: Tok, path: PathT) -> tuple[KeyMap, Tok] | None:
        """A mapping no description covers that is strict JSON already, read in one call (duplicate keys kept);
        its keys all get the line of its opening brace and no text spans (nothing below it is edited in place)."""
        if self._ahead is not None:
            return None
        if self._strict_misses >= _STRICT_TRIES:
            return None
        try:
            pairs, end = _PAIRS_DECODER.raw_decode(self.text, open_tok.start)
        except (ValueError, RecursionError):
            self._strict_misses += 1
            return None
        nested = self.text.count("[", open_tok.start, end) + self.text.count("{", open_tok.start + 1, end)
        if nested >= MAX_DEPTH - len(path) and \
                json_too_deep(self.text[open_tok.start:end], MAX_DEPTH - len(path)) is not None:
            return None
        self.pos = end
        return _tree(pairs, self.line_of(open_tok.start), path), Tok("}", end - 1, end, "}")

    def _strict_list(self, open_tok: Tok, path: PathT) -> tuple[list[Any], Tok] | None:
        """A list that is strict JSON already, read by json's C decoder in one call: repairs never edit inside
        lists, so a long one (a generated config's per-layer table) costs no token-by-token reading. None when it
        needs the lenient reading (a comma, comment or quote to fix inside) or is nested too deep for json."""
        if self._ahead is not None:
            return None
        if self._strict_misses >= _STRICT_TRIES:
            return None
        try:
            value, end = _DECODER.raw_decode(self.text, open_tok.start)
        except (ValueError, RecursionError):
            self._strict_misses += 1
            return None
        nested = self.text.count("[", open_tok.start + 1, end) + self.text.count("{", open_tok.start, end)
        if nested >= MAX_DEPTH - len(path) and \
                json_too_deep(self.text[open_tok.start:end], MAX_DEPTH - len(path)) is not None:
            return None  # the lenient reading refuses it at the place it gets too deep
        self.pos = end
        return value, Tok("]", end - 1, end, "]")

    def _number(self, tok: Tok) -> int | float:
        text = tok.text
        fixed = text
        if not _STRICT_NUMBER.fullmatch(text):
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
                self._edit(tok.start, tok.end, fixed, f"{text} -> {fixed} (JSON number spelling)",
                           f"{text} is not a JSON number: write {fixed}")
        if "." in fixed or "e" in fixed or "E" in fixed:
            return float(fixed)
        return int(fixed)

    def _string(self, tok: Tok) -> str:
        if tok.text.startswith('"'):
            if "\\" not in tok.text:
                return tok.text[1:-1]
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
            self._edit(tok.start, tok.end, spelled, f"{tok.text} -> {spelled} (JSON needs double quotes)",
                       "keys must use double quotes in JSON, not single quotes" if self._peek().kind == ":"
                       else "text must use double quotes in JSON, not single quotes")
        return value

    def _object(self, path: PathT, open_tok: Tok) -> tuple[KeyMap, Tok]:
        out = KeyMap()
        if self._peek().kind == "}":
            return out, self._next()
        while True:
            if self._plain_entry(path, out):
                continue
            tok = self._next()
            if tok.kind == "str":
                key = self._string(tok)
            elif tok.kind in ("word", "num"):
                key = tok.text
                self._edit(tok.start, tok.end, json.dumps(key), f"quoted the key {key} (JSON needs double quotes)",
                           f"the key {key} must be in double quotes")
            else:
                raise self._fail(tok, f"expected a key in double quotes, found {tok.text or 'the end of the text'!r}")
            colon = self._next()
            if colon.kind != ":":
                raise self._fail(colon, f"expected ':' after the key \"{key}\"")
            value_tok = self._peek()
            value, last = self._value(path + (key,))
            entry = Entry(key=key, value=value, line=self.line_of(tok.start), key_span=(tok.start, tok.end),
                          origin=path + (key,))
            if not isinstance(value, (KeyMap, list)):
                entry.value_span = (value_tok.start, last.end)
                entry.quote = '"' if value_tok.kind == "str" else None
            entry.empty = value is None or (isinstance(value, KeyMap) and not value.entries)
            out.entries.append(entry)
            after = self._peek()
            if after.kind == ",":
                self._next()
                if self._peek().kind == "}":
                    self._edit(after.start, after.end, "", "removed a trailing comma before '}'", _TRAILING)
                    return out, self._next()
                continue
            if after.kind == "}":
                return out, self._next()
            if after.kind in ("str", "word"):
                self._edit(last.end, last.end, ",", f"added a missing comma after the value of \"{key}\"",
                           _MISSING, after.start)
                continue
            if after.kind == "eof":
                raise self._fail(open_tok, "this '{' is never closed")
            raise self._fail(after, f"expected ',' or '}}' after the value of \"{key}\"")

    def _plain_entry(self, path: PathT, out: KeyMap) -> bool:
        """Take the next entry at once when it is strict JSON with a plain value (`"key": 1,`), the commonest
        shape, followed by another key: the same Entry the token-by-token reading makes, at a fraction of the
        cost. False (nothing taken) for anything else, which the token-by-token reading then reads."""
        ahead = self._ahead
        if ahead is not None:
            if ahead.kind != "str":
                return False
            self.pos, self._ahead = ahead.start, None  # read again from the key: nothing before it is skipped twice
        m = _PLAIN_ENTRY.match(self.text, self.pos)
        if m is None:
            if ahead is not None:
                self.pos, self._ahead = ahead.end, ahead
            return False
        key_start, key_end = m.span(1)
        key = self.text[key_start + 1:key_end - 1]
        spelled = m.group(2)
        value: Any
        if spelled[0] == '"':
            value = spelled[1:-1]
        elif spelled in _LITERALS:
            value = _LITERALS[spelled]
        else:
            value = float(spelled) if "." in spelled or "e" in spelled or "E" in spelled else int(spelled)
        out.entries.append(Entry(key=key, value=value, line=self.line_of(key_start), key_span=(key_start, key_end),
                                 origin=path + (key,), value_span=m.span(2), quote='"' if spelled[0] == '"' else None,
                                 empty=value is None))
        self.pos = m.end()
        return True

    def _array(self, path: PathT, open_tok: Tok) -> tuple[list[Any], Tok]:
        out: list[Any] = []
        if self._peek().kind == "]":
            return out, self._next()
        while True:
            value, last = self._value(path + (len(out),))
            out.append(plain(value))
            after = self._peek()
            if after.kind == ",":
                self._next()
                if self._peek().kind == "]":
                    self._edit(after.start, after.end, "", "removed a trailing comma before ']'", _TRAILING)
                    return out, self._next()
                continue
            if after.kind == "]":
                return out, self._next()
            if after.kind in ("str", "num", "word", "{", "["):
                self._edit(last.end, last.end, ",", "added a missing comma between two list items", _MISSING,
                           after.start)
                continue
            if after.kind == "eof":
                raise self._fail(open_tok, "this '[' is never closed")
            raise self._fail(after, "expected ',' or ']' in a list")


# The checker's words (source.py's json-error wording, kept identical so each place reads the same either way).
_TRAILING = "a trailing comma before ']' or '}' (JSON allows none; `traindeck config fix` removes it)"
_MISSING = "a missing comma between two entries (`traindeck config fix` adds it)"


def apply_edits(text: str, edits: list[tuple[int, int, str]]) -> str:
    """`text` with each (start, end, replacement) applied; edits do not overlap. One pass, whatever their number."""
    pieces: list[str] = []
    at = 0
    for start, end, replacement in sorted(edits, key=lambda e: (e[0], e[1])):
        pieces.append(text[at:start])
        pieces.append(replacement)
        at = max(at, end)
    pieces.append(text[at:])
    return "".join(pieces)
