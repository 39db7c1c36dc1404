"""A run's output.log as a live console: read on a thread of its own, handed out in batches a view applies at once.

The dashboard's console must keep up with a flood (100k lines/s) without its UI thread reading files or
assembling lines. `ConsoleFeed` reads the log from the start on a background thread (`LogReader`: UTF-8, "\\r"
redraws, ANSI removal, rank tags) and keeps the last `max_lines` display lines in a `ConsoleBuffer` (bar redraws
replace the previous drawing instead of piling up). A view calls `take()` on a timer and gets what changed since
its last call as one `ConsoleBatch`: lines appended (with absolute line numbers, stable while lines are replaced)
and lines replaced in place (a bar redrawn). Between two calls the feed coalesces: a bar redrawn a thousand times
is one replacement, and a backlog longer than `max_lines` keeps only its newest `max_lines` (a view shows no more;
the whole log stays on disk). Far behind a flood (MAX_LAG_BYTES), it jumps to the newest output and says so in
the console. No Qt here: any front end (and the tests) can use it.

A tqdm bar keeps one line even when other lines come between its redraws (DeepSpeed's log lines, other ranks, a
`print` glued onto the bar): each bar is known by its rank, node and description ("Epoch 1" in "Epoch 1:  3%|"),
and a drawing of a bar already shown updates that line in place. Text glued after a bar's closing bracket (a print
while the bar was on screen) becomes a line of its own. A bar starts a new line when its counter goes back (the next
epoch's bar under the same description), when its line was overwritten (tqdm.write clears the bar, prints, and
draws it again below), or when its line is more than BAR_REACH lines up: the bar then moves to the newest output
instead of updating a line nobody following the run sees.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from traindeck.backend.logparse import ConsoleBuffer, Line, might_be_bar, parse_bar
from traindeck.backend.runs.record.log_follow import LogReader

READ_BYTES = 1 << 20  # per read: a slice small enough that the view's take() never waits long for the lock
ADD_SLICE = 2048  # lines added to the buffer per lock hold
# Fallen this far behind the log (a flood faster than we can assemble lines), jump to its last KEEP_BYTES: the
# view shows the newest output and says what it skipped; output.log keeps everything.
MAX_LAG_BYTES = 8 << 20
KEEP_BYTES = 2 << 20
FLOOD_REST = 0.5  # after each slice read in a flood, rest this fraction of its time (the UI thread needs the GIL)
PARTIAL_AFTER_S = 0.25  # show an unterminated last line (the current bar) once the log was quiet this long
# A bar redrawn within this many display lines of its line updates it there; further up it gets a new line at the
# newest output. Half the console's usual height (about 24 lines shown): someone following the run always has the
# bar in sight (at 30 it sat just above the view).
BAR_REACH = 12

BarKey = tuple[str | None, int | None, str]  # (node, rank, description) of a tqdm bar


def bar_parts(line: Line) -> list[tuple[Line, BarKey | None, int]]:
    """`line` as (line, bar key, bar counter) pieces: one piece (key None) when it is no bar; the bar and, as a
    line of its own, any text glued after the bar's closing bracket (a print while the bar was on screen)."""
    text = line.text
    bar = parse_bar(text) if might_be_bar(text) else None
    if bar is None:
        return [(line, None, 0)]
    key = (line.node, line.rank, bar.label)
    tail = text[bar.end:]
    if not tail.strip() or text[bar.end - 1] != "]":
        return [(line, key, bar.current)]
    return [(Line(text[:bar.end], line.rank, False, line.node), key, bar.current),
            (Line(tail, line.rank, line.transient, line.node), None, 0)]


@dataclass
class ConsoleBatch:
    """What changed since the previous take(). Line numbers are absolute: the n-th display line ever kept."""

    start: int = 0  # number of lines[0]
    lines: list[Line] = field(default_factory=list)  # appended, in order
    texts: list[str] = field(default_factory=list)  # lines as the view shows them (the feed's `render`)
    replaced: dict[int, tuple[Line, str]] = field(default_factory=dict)  # earlier line number -> (line, text)
    total: int = 0  # display lines so far (the next one will be number `total`)
    skipped: int = 0  # appended lines never delivered (a backlog beyond max_lines): a view has a gap before start
    ranks: tuple[int, ...] = ()  # every rank seen in the log's rank tags so far
    ended: bool = False  # the run ended and the whole log has been read

    @property
    def empty(self) -> bool:
        return not self.lines and not self.replaced and not self.skipped


class ConsoleFeed:
    """Reads `path` on a daemon thread (start()) until stop(); `run_ended()` lets it read the rest and finish.

    `render` turns a line into the text a view shows; it runs on the reading thread, so a view's UI thread does
    not spend a flood's worth of string formatting in one go.
    """

    def __init__(self, path: Path | str, max_lines: int = 20_000, poll_s: float = 0.05,
                 render: Callable[[Line], str] | None = None) -> None:
        self.path = Path(path)
        self.render: Callable[[Line], str] = render or (lambda line: line.text)
        self.max_lines = max(16, int(max_lines))
        self.poll_s = poll_s
        self._reader = LogReader(self.path)
        self._buffer = ConsoleBuffer(self.max_lines)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._run_ended = threading.Event()
        self._caught_up = threading.Event()  # set whenever a read found nothing new (the feed is at the log's end)
        self._thread: threading.Thread | None = None
        # Guarded by _lock: the part of the buffer not yet handed out.
        self._total = 0
        self._pending: list[Line] = []
        self._pending_texts: list[str] = []
        self._pending_start = 0
        self._replaced: dict[int, tuple[Line, str]] = {}
        self._skipped = 0
        self._ranks: set[int] = set()
        self._ended = False
        self._bar_lines: dict[BarKey, tuple[int, int]] = {}  # a bar's (line number, counter) as last drawn
        self._bar_at: dict[int, BarKey] = {}  # ... and the other way round: which bar a line number shows
        self.lines_read = 0  # assembled lines read from the log (before bar folding), for benchmarks
        self.skipped_bytes = 0  # output jumped over to catch up with a flood
        self.error: str | None = None

    # ---- life cycle -------------------------------------------------------------------------------------------
    def start(self) -> ConsoleFeed:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=f"console-feed {self.path.parent.name}",
                                            daemon=True)
            self._thread.start()
        return self

    def run_ended(self) -> None:
        """The run is over: read what is left (its last unterminated line included), then stop."""
        self._run_ended.set()
        self._wake.set()

    def stop(self, timeout: float | None = None) -> None:
        """Stop reading. Returns at once unless `timeout` is given (then waits that long for the thread)."""
        self._stopping.set()
        self._wake.set()
        if self._thread is None:
            self._reader.close()
        elif timeout is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def wait_caught_up(self, timeout: float) -> bool:
        """Block until the feed has read everything written so far (demos and tests; never on a UI thread in use)."""
        return self._caught_up.wait(timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # ---- the view's side --------------------------------------------------------------------------------------
    def take(self) -> ConsoleBatch:
        """Everything that changed since the last take() (or snapshot()); cheap: swaps lists under a lock."""
        with self._lock:
            batch = ConsoleBatch(self._pending_start, self._pending, self._pending_texts, self._replaced,
                                 self._total, self._skipped, tuple(sorted(self._ranks)), self._ended)
            self._pending, self._pending_texts, self._replaced, self._skipped = [], [], {}, 0
            self._pending_start = self._total
        return batch

    def snapshot(self) -> ConsoleBatch:
        """All lines kept (the last max_lines), as one batch starting a fresh view; resets what take() owes."""
        with self._lock:
            lines = self._buffer.lines()
            start = self._total - len(lines)
            batch = ConsoleBatch(start, lines, [], {}, self._total, 0, tuple(sorted(self._ranks)), self._ended)
            self._pending, self._pending_texts, self._replaced, self._skipped = [], [], {}, 0
            self._pending_start = self._total
        batch.texts = [self.render(line) for line in lines]  # outside the lock: the reader goes on meanwhile
        return batch

    @property
    def total(self) -> int:
        return self._total

    # ---- the reading thread -----------------------------------------------------------------------------------
    def _loop(self) -> None:
        quiet_since: float | None = None
        shown_partial: Line | None = None
        try:
            while not self._stopping.is_set():
                if self._reader.unread_bytes() > MAX_LAG_BYTES:
                    skipped = self._reader.skip_to_tail(KEEP_BYTES)
                    if skipped:
                        self.skipped_bytes += skipped
                        self._add([Line(f"… {skipped / 2**20:,.1f} MiB of output skipped: the console shows the "
                                        "newest (output.log has all of it) …")], count=False)
                started = time.perf_counter()
                lines = self._reader.read_new(READ_BYTES)
                if lines:
                    self._caught_up.clear()
                    self._add(lines)
                    quiet_since, shown_partial = None, None
                    # In a flood, rest half as long as the last slice took: the UI thread then gets the GIL at
                    # least a third of the time (a flood beyond what is left gets skipped, see MAX_LAG_BYTES).
                    self._stopping.wait(min(0.05, (time.perf_counter() - started) * FLOOD_REST))
                    continue
                self._caught_up.set()
                if self._run_ended.is_set():
                    self._add(self._reader.finish())
                    with self._lock:
                        self._ended = True
                    self._caught_up.set()
                    return
                now = time.monotonic()
                if quiet_since is None:
                    quiet_since = now
                elif now - quiet_since >= PARTIAL_AFTER_S:
                    partial = self._reader.partial()
                    if partial is not None and partial != shown_partial:
                        # Shown as a transient line: the completed line (or the next redraw) replaces it.
                        self._add([partial], count=False)
                        shown_partial = partial
                self._wake.wait(self.poll_s)
                self._wake.clear()
        except Exception as exc:  # a view shows it; the run itself is never affected by its console
            self.error = f"reading {self.path} failed: {exc}"
        finally:
            self._reader.close()

    def _add(self, lines: list[Line], count: bool = True) -> None:
        if count:
            self.lines_read += len(lines)
        render = self.render
        for begin in range(0, len(lines), ADD_SLICE):
            pieces: list[tuple[Line, BarKey | None, int]] = []
            for line in lines[begin:begin + ADD_SLICE]:
                if " [" in line.text:  # every tqdm bar has one (might_be_bar): most lines go no further
                    pieces.extend(bar_parts(line))
                else:
                    pieces.append((line, None, 0))
            texts = [render(piece[0]) for piece in pieces]  # before taking the lock
            with self._lock:
                buffer, pending, pending_texts, ranks = self._buffer, self._pending, self._pending_texts, self._ranks
                for (line, key, current), text in zip(pieces, texts, strict=True):
                    if key is not None:
                        self._add_bar(line, key, current, text)
                        continue
                    # Any other line, inline (a flood is 100k lines/s).
                    version = buffer.version
                    index = buffer.add(line, None)
                    if buffer.version == version:
                        continue  # not shown (the reporting helper's machine-readable lines)
                    if line.rank is not None:
                        ranks.add(line.rank)
                    if index is None:
                        pending.append(line)
                        pending_texts.append(text)
                        self._total += 1
                    else:
                        number = self._total - len(buffer) + index
                        self._changed(number, line, text)
                        if number in self._bar_at:  # a bar's line overwritten (by tqdm.write's print, say)
                            self._forget(number)
                if len(self._pending) > self.max_lines:
                    drop = len(self._pending) - self.max_lines
                    del self._pending[:drop]
                    del self._pending_texts[:drop]
                    self._pending_start += drop
                    self._skipped += drop
                    self._replaced.clear()  # they belonged to lines the view will drop anyway
            time.sleep(0)  # let the UI thread take the GIL between slices: a flood must not stall it

    def _add_bar(self, line: Line, key: BarKey, current: int, text: str) -> None:
        """A drawing of a bar (the lock held): where the bar is already shown, within reach, or added."""
        buffer = self._buffer
        first = self._total - len(buffer)  # number of the oldest line kept
        shown = self._bar_lines.get(key)
        if shown is not None:
            number, counter = shown
            if number >= first and self._total - number <= BAR_REACH and current >= counter:
                buffer.put(number - first, line, key[2])
                self._bar_lines[key] = (number, current)
                self._changed(number, line, text)
                return
            self._forget(number)  # a new line for this bar (restarted, or out of reach)
        version = buffer.version
        index = buffer.add(line, key[2])
        if buffer.version == version:
            return
        if line.rank is not None:
            self._ranks.add(line.rank)
        if index is None:
            number = self._total
            self._pending.append(line)
            self._pending_texts.append(text)
            self._total += 1
        else:
            number = first + index
            self._changed(number, line, text)
            if number in self._bar_at:  # a bar redrawn over another one's transient line
                self._forget(number)
        self._bar_lines[key] = (number, current)
        self._bar_at[number] = key
        for gone in [n for n in self._bar_at if self._total - n > BAR_REACH]:
            self._forget(gone)  # out of reach: their next drawing gets a new line anyway

    def _forget(self, number: int) -> None:
        """Line `number` no longer shows the bar it showed."""
        key = self._bar_at.pop(number, None)
        if key is not None and self._bar_lines.get(key, (None, 0))[0] == number:
            del self._bar_lines[key]

    def _changed(self, number: int, line: Line, text: str) -> None:
        """Line `number` shows `line` now: in the pending part, or as a replacement of a line handed out."""
        offset = number - self._pending_start
        if offset >= 0:
            self._pending[offset] = line
            self._pending_texts[offset] = text
        else:
            self._replaced[number] = (line, text)
