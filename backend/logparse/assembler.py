"""Raw launcher bytes (any chunking) -> display lines: UTF-8 decoding, "\\r" redraws, ANSI removal, rank tags.

Line endings: "\\n" and "\\r\\n" end a line. A "\\r" followed by more text ends a *transient* line (a progress-bar
redraw: tqdm writes "\\r" + bar each time). Text that is followed by "\\r" and then directly by "\\n" is a normal
line ("progress\\r" then "\\n" leaves the last state on screen, like a terminal). A line that ends by moving the
cursor back up (tqdm's nested bars write "bar" + ESC[A) is transient too. Blank transient lines (tqdm's
"\\r<spaces>\\r" erasures) are dropped; lines that came out of a "\\r" redraw lose their trailing padding spaces.

The result never depends on where the chunks were cut: a "\\r" at the very end of a chunk is held until the next
byte shows whether a "\\n" follows; a multi-byte character or an escape sequence split across chunks stays whole.

Rank tags removed from the start of a line (and the rank kept in `Line.rank`):
  `[default0]:`              torchrun / `accelerate launch` with `--tee 3` (role name "default"; more via `roles`)
  `[rank0]: ` / `[rank0]:`   torch.distributed's excepthook and torch._logging
  `[1,0]<stdout>:`           Open MPI `--tag-output`
  `0: `                      srun --label / `--log-line-prefix-template` style; opt-in (`numeric_prefix=True`)
                             because ordinary text starts like that too.
Before those, on a multi-node run, pdsh's `HOST: ` in front of every line of a node (kept in `Line.node`); only
for the hosts given (`hosts=`), because "Epoch: 3" starts like that too. pdsh prefixes lines, not "\r" redraws.
torchrun's `--tee` reads each rank's log file in text mode, so a bar redraw can be glued to the next tagged line
("...it/s][default1]:hello"); ranks sharing one pipe do the same ("...it/s][rank1]: hello": rank 0's bar has no
newline). Once lines have started with a kind of tag, that tag inside a line splits it.
"""

from __future__ import annotations

import codecs
import re

from .model import Line

# C0 controls except \t \n \r, DEL, and the C1 controls (U+0080-U+009F: some terminals read U+009B as ESC [).
# ESC (0x1b) is in the set, so one test tells whether a chunk needs cleaning. As bytes: the C0 set, and 0xC2, the
# first byte of every C1 control in UTF-8 (also of printable U+00A0-U+00BF, which then take the slower path).
_CTRL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_CTRL_BYTES = bytes(range(0x00, 0x09)) + b"\x0b\x0c" + bytes(range(0x0E, 0x20)) + b"\x7f\xc2"
# CSI (colours, cursor moves, erase), OSC (titles, hyperlinks; BEL or ST terminated), DCS/SOS/PM/APC strings,
# two-byte escapes (ESC 7, ESC M, charset selection ESC ( B ...).
_ANSI = re.compile(
    r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[PX^_][^\x1b]*(?:\x1b\\)?|[ -/]+[0-~]|[0-~])"
)
# The same sequences in their 8-bit form: CSI (U+009B), OSC (U+009D) and DCS/SOS/PM/APC strings, ended by ST (U+009C).
_ANSI8 = re.compile(r"\x9b[0-?]*[ -/]*[@-~]|\x9d[^\x07\x9c\x1b]*(?:\x07|\x9c)?|[\x90\x98\x9e\x9f][^\x9c\x1b]*\x9c?")
_C1_INTRODUCERS = "\x9b\x9d\x90\x98\x9e\x9f"
_CURSOR_UP_AT_END = re.compile(r"\x1b\[\d*[AF]\s*$")
_INCOMPLETE_ESC_AT_END = re.compile(r"\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b]*|[ -/]*)$")
_NUMERIC_TAG = re.compile(r"\s{0,4}(\d{1,5}): ")
_MPI_TAG = re.compile(r"\[\d+,(\d+)\]<std(?:out|err|diag)>:")

DEFAULT_ROLES = ("default", "rank", "trainer", "worker")
DEFAULT_MAX_LINE_CHARS = 8 << 20


def strip_ansi(text: str) -> str:
    """`text` without escape sequences (7-bit and 8-bit) and control characters (tab kept)."""
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    if any(c in text for c in _C1_INTRODUCERS):
        text = _ANSI8.sub("", text)
    return _CTRL.sub("", text)


class LineAssembler:
    """Feed raw bytes as they come (`feed`), get complete lines back; `flush` at end of stream.

    `partial()` shows the unterminated tail (e.g. the current tqdm bar, which is only terminated by the next
    redraw) without consuming it: a console can display it after a quiet moment; do not parse it, the same text
    comes out of `feed`/`flush` later.
    """

    def __init__(
        self,
        *,
        roles: tuple[str, ...] = DEFAULT_ROLES,
        numeric_prefix: bool = False,
        max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
        hosts: tuple[str, ...] = (),
    ) -> None:
        self._host_tag = re.compile("(" + "|".join(re.escape(h) for h in hosts) + "): ") if hosts else None
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pend: list[str] = []
        self._pend_len = 0
        self._pend_cr = False  # the pending text ends with "\r": the next byte decides what it was
        self._pend_dirty = False  # the pending text contains control characters / escape sequences
        self._split_c2 = False  # the last chunk ended with 0xC2, the first byte of a C1 control in UTF-8
        self._numeric = numeric_prefix
        self.max_line_chars = max(1024, max_line_chars)
        names = "|".join(re.escape(r) for r in roles)
        self._role_tag = re.compile(rf"\[({names})(\d+)\]:")
        self._embedded_tee: re.Pattern[str] | None = None  # built once a line has started with a tag
        self._tee_roles: set[str] = set()
        self._dirty = False
        self.bytes_in = 0
        self.lines_out = 0

    # ---- public API -------------------------------------------------------------------------------------------
    def feed(self, chunk: bytes) -> list[Line]:
        self.bytes_in += len(chunk)
        split_c2, self._split_c2 = self._split_c2, chunk.endswith(b"\xc2")  # a C1 control's second byte comes next
        text = self._decoder.decode(chunk)
        if not text:
            return []
        # Control bytes never occur inside UTF-8 multi-byte sequences, so the raw chunk tells (6x faster than a
        # regex over the decoded text).
        dirty = len(chunk.translate(None, _CTRL_BYTES)) != len(chunk) or split_c2
        if not self._pend_cr and "\n" not in text and "\r" not in text:
            # No terminator: keep the piece (a list, so a huge unterminated line costs no quadratic copying).
            self._pend.append(text)
            self._pend_len += len(text)
            self._pend_dirty = self._pend_dirty or dirty
            if self._pend_len > self.max_line_chars:
                return self._overflow()
            return []
        if self._pend:
            self._pend.append(text)
            text = "".join(self._pend)
            self._pend.clear()
            self._pend_len = 0
            dirty = dirty or self._pend_dirty
        out = self._process(text, dirty)
        self.lines_out += len(out)
        return out

    def flush(self) -> list[Line]:
        """The unterminated tail at end of stream (a tail that ended with "\\r" comes out transient)."""
        text = "".join(self._pend) + self._decoder.decode(b"", final=True)
        self._pend.clear()
        self._pend_len = 0
        self._pend_cr = False
        self._pend_dirty = False
        self._split_c2 = False
        self._decoder.reset()
        if not text:
            return []
        out: list[Line] = []
        self._dirty = _CTRL.search(text) is not None
        if "\r" not in text:
            self._emit(text, False, out, False)
        else:
            segs = text.split("\r")
            last = len(segs) - 1
            k = last
            while k > 0 and segs[k] == "":
                k -= 1
            for i in range(k + 1):
                if segs[i]:
                    self._emit(segs[i], i < last, out, True)
        self.lines_out += len(out)
        return out

    def partial(self) -> Line | None:
        """The current unterminated line as a transient Line (None when there is none); nothing is consumed."""
        if not self._pend:
            return None
        if len(self._pend) > 1:
            self._pend[:] = ["".join(self._pend)]
        text = self._pend[0].rstrip("\r")
        text = text[text.rfind("\r") + 1:]
        if "\x1b" in text:
            text = _INCOMPLETE_ESC_AT_END.sub("", text)
        out: list[Line] = []
        self._dirty = _CTRL.search(text) is not None
        self._emit(text, True, out, True)
        return out[-1] if out else None

    # ---- internals --------------------------------------------------------------------------------------------
    def _process(self, text: str, dirty: bool) -> list[Line]:
        out: list[Line] = []
        self._dirty = dirty
        parts = text.split("\n")
        tail = parts.pop()
        emit = self._emit
        if "\r" not in text:
            if dirty or self._numeric or self._host_tag is not None:
                for p in parts:
                    emit(p, False, out, False)
            else:
                append = out.append
                for p in parts:
                    # Only "[<letter>" (role tags) and "[<digit>,<digit>]<std" (MPI) can be tags; "[2026-..." of a
                    # log line is not, so the common DeepSpeed/logging lines skip the tag matching.
                    if p[:1] == "[" and (p[1:2].isalpha() or "]<std" in p[:24]):
                        emit(p, False, out, False)
                    else:
                        append(Line(p, None, False))
        else:
            for p in parts:
                if "\r" in p:
                    self._emit_redrawn(p, out)
                else:
                    emit(p, False, out, False)
            if "\r" in tail:
                core = tail.rstrip("\r")
                j = core.rfind("\r")
                if j > 0:
                    # Every segment before the last "\r" that is followed by text is a finished redraw.
                    for s in core[:j].split("\r"):
                        if s:
                            emit(s, True, out, True)
                    tail = tail[j:]  # keeps its "\r": what follows is a redraw, whatever the chunking
        if tail:
            self._pend.append(tail)
            self._pend_len = len(tail)
            self._pend_cr = tail[-1] == "\r"
            self._pend_dirty = dirty and _CTRL.search(tail) is not None
        else:
            self._pend_cr = False
            self._pend_dirty = False
        return out

    def _emit_redrawn(self, p: str, out: list[Line]) -> None:
        """A "\\n"-terminated piece that contains "\\r": every segment but the last non-empty one is a redraw."""
        segs = p.split("\r")
        k = len(segs) - 1
        while k > 0 and segs[k] == "":  # "text\r\n", "bar\r\r\n": the text stays as a normal line
            k -= 1
        for i in range(k):
            if segs[i]:
                self._emit(segs[i], True, out, True)
        self._emit(segs[k], False, out, True)

    def _emit(self, s: str, transient: bool, out: list[Line], redrawn: bool) -> None:
        if self._dirty:
            if "\x1b" in s:
                if not transient and _CURSOR_UP_AT_END.search(s):
                    transient = True  # nested tqdm bars: draw, then move the cursor back up to redraw later
                s = _ANSI.sub("", s)
            if any(c in s for c in _C1_INTRODUCERS):
                s = _ANSI8.sub("", s)
            if not s.isprintable():  # a fast C scan; false for tabs too, then the regex finds nothing
                s = _CTRL.sub("", s)
        if redrawn or transient:
            if s and not s.strip():
                return  # a redraw of spaces erases the line (tqdm's clear()); nothing to show
            s = s.rstrip(" ")
        node = None
        if self._host_tag is not None:
            m = self._host_tag.match(s)
            if m:
                node, s = m.group(1), s[m.end():]
        c = s[:1]
        if c == "[" or (self._numeric and c != "" and (c.isdigit() or c == " ")):
            self._emit_tagged(s, transient, out, node)
        else:
            out.append(Line(s, None, transient, node))

    def _emit_tagged(self, s: str, transient: bool, out: list[Line], node: str | None = None) -> None:
        rank: int | None = None
        tee = False
        for _ in range(2):  # "[default1]:[rank1]: Traceback ..." carries two tags
            m = self._role_tag.match(s)
            if m:
                role = m.group(1)
                rank = int(m.group(2))
                s = s[m.end():]
                if role not in self._tee_roles:
                    self._tee_roles.add(role)
                    names = "|".join(re.escape(r) for r in sorted(self._tee_roles))
                    self._embedded_tee = re.compile(rf"\[(?:{names})\d+\]:")
                if role == "rank":
                    if s[:1] == " ":
                        s = s[1:]
                    continue
                tee = True
                continue
            m = _MPI_TAG.match(s)
            if m:
                rank = int(m.group(1))
                s = s[m.end():]
                continue
            if self._numeric and rank is None:
                m = _NUMERIC_TAG.match(s)
                if m:
                    rank = int(m.group(1))
                    s = s[m.end():]
                    continue
            break
        if self._embedded_tee is not None and "[" in s:
            m = self._embedded_tee.search(s)
            if m and m.start() > 0:
                head = s[: m.start()].rstrip(" ")
                if head.strip():
                    out.append(Line(head, rank, False, node))
                self._emit_tagged(s[m.start():], transient, out, node)
                return
        if not s.strip() and (transient or tee):
            # torchrun --tee reads the rank's log in text mode, turning each "\r" of a redraw into a line break:
            # the empty tagged lines between bar drawings are those "\r"s, not output.
            return
        out.append(Line(s, rank, transient, node))

    def _overflow(self) -> list[Line]:
        """An unterminated line longer than max_line_chars: hand it out as it is, so memory stays bounded."""
        text = "".join(self._pend)
        self._pend.clear()
        self._pend_len = 0
        self._pend_dirty = False
        out: list[Line] = []
        self._dirty = _CTRL.search(text) is not None
        redrawn = text[:1] == "\r"
        self._emit(text[1:] if redrawn else text, False, out, redrawn)
        self.lines_out += len(out)
        return out
