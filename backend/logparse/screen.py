"""Reader side: what a console shows. Transient lines (bar redraws) are replaced in place, not appended."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from .model import Line
from .report import REPORT_MARKER
from .tqdm_bar import bar_label, might_be_bar

_LOOKBACK = 16
REPORT_LINE = REPORT_MARKER + "{"
_SHAPE_CHARS = 24
_UNPARSED = "\0unparsed"  # add()'s default: the line's bar label is not known yet


def _shape(text: str) -> str:
    """The letters at the start of a line: what stays the same when a progress display is drawn again."""
    return "".join(c for c in text[:_SHAPE_CHARS] if c.isalpha())


def redraws(previous: str, following: str) -> bool:
    """Whether `following`, written after `previous` ended with a carriage return, draws `previous` again.

    Ranks under one launcher share one stream, and `print("a\nb")` leaves a process in two writes ("a\nb", then
    "\n"), so rank 0's bar ("\rtrain: 3%|...") can land between another rank's last line and its newline:
    "CUDA out of memory...\rtrain: 3%|...". A terminal would overwrite the error; a log reader must not (when the
    lines carry rank tags, each rank's lines are apart anyway).
    A line counts as redrawn when it is a bar or a spinner, or what follows it has its shape (the same words
    with new numbers) or continues it (a partial line shown while waiting, then completed).
    """
    return (following.startswith(previous) or len(previous.strip()) <= 3 or might_be_bar(previous)
            or _shape(previous) == _shape(following))


class ConsoleBuffer:
    """The last `maxlen` display lines of a run's output (all of them with maxlen=None).

    `add(line)` replaces the latest transient line of the same rank (searching the last few lines, so interleaved
    ranks each keep their own bar) when the new line draws it again (see `redraws`), or appends. With `fold_bars`
    (default), a tqdm bar that arrived as a normal line (torchrun `--tee` turns every redraw into a line) also
    replaces the previous drawing of the same bar (same rank and description) when nothing else of that rank came
    in between. With `hide_reports` (default) the reporting helper's `@traindeck {...}` lines are not shown (they
    stay in the log file).
    Returns the index replaced, or None when the line was appended (what a GUI needs to update a text view).
    """

    def __init__(self, maxlen: int | None = 10000, *, fold_bars: bool = True, hide_reports: bool = True) -> None:
        self.hide_reports = hide_reports
        self._lines: deque[Line] = deque(maxlen=maxlen)
        self._bars: deque[str | None] = deque(maxlen=maxlen)  # bar label per entry ("" unnamed), None: not a bar
        self.fold_bars = fold_bars
        self.version = 0  # bumped on every change

    def add(self, line: Line, bar: str | None = _UNPARSED) -> int | None:
        """`bar`: the line's bar label when the caller has parsed it already (None: not a bar)."""
        if self.hide_reports and line.text.startswith(REPORT_LINE):
            return None  # the reporting helper's machine-readable lines: parsed, not shown
        self.version += 1
        label = (bar_label(line.text) if bar is _UNPARSED else bar) if self.fold_bars else None
        lines, n = self._lines, len(self._lines)
        for back in range(1, min(_LOOKBACK, n) + 1):
            prev = lines[n - back]
            if prev.rank != line.rank:
                continue
            if (prev.transient and redraws(prev.text, line.text)) or (
                    label is not None and self._bars[n - back] == label):
                lines[n - back] = line
                self._bars[n - back] = label
                return n - back
            break  # the latest line of this rank is a permanent one: append
        lines.append(line)
        self._bars.append(label)
        return None

    def put(self, index: int, line: Line, bar: str | None = None) -> None:
        """Replace the line at `index` (0: the oldest kept) by `line`, a drawing of the bar labelled `bar` (None: not
        a bar): for a caller that tracks where lines are (a bar updated where it was first drawn)."""
        self._lines[index] = line
        self._bars[index] = bar
        self.version += 1

    def extend(self, lines: Iterable[Line]) -> None:
        for line in lines:
            self.add(line)

    def lines(self) -> list[Line]:
        return list(self._lines)

    def texts(self, *, rank: int | None = None, tag_ranks: bool = False) -> list[str]:
        """Display texts; `rank` keeps one rank's lines (untagged lines are kept too), `tag_ranks` prefixes
        `[N] ` to tagged lines."""
        out = []
        for ln in self._lines:
            if rank is not None and ln.rank is not None and ln.rank != rank:
                continue
            out.append(f"[{ln.rank}] {ln.text}" if tag_ranks and ln.rank is not None else ln.text)
        return out

    def __len__(self) -> int:
        return len(self._lines)

    def clear(self) -> None:
        self._lines.clear()
        self._bars.clear()
        self.version += 1


def collapse_transient(
    lines: Iterable[Line], *, maxlen: int | None = None, fold_bars: bool = True, hide_reports: bool = True
) -> list[Line]:
    """`lines` as a console would show them (each redraw replaces the previous one); the last `maxlen` if given."""
    buf = ConsoleBuffer(maxlen, fold_bars=fold_bars, hide_reports=hide_reports)
    buf.extend(lines)
    return buf.lines()
