"""The log console: a run's output, all ranks, live, with a rank filter, search, wrap and follow.

Reading and line assembly happen on the `ConsoleFeed`'s thread (backend); this widget only applies the batches the
feed hands out, on a timer, to a `LogView` that draws just the visible lines, so a flood costs the UI thread a
few milliseconds per tick whatever the line rate. The view keeps the last `max_lines` lines; the whole log stays in
output.log, which the "Open output.log" button opens.

Search is incremental: the first match is selected as the user types (after SEARCH_DELAY_MS without a key), the
bar says which match of how many ("3 of 17"), Enter / F3 go to the next, Shift+Enter / Shift+F3 to the previous.
"Wrap" wraps long lines instead of scrolling sideways; the page remembers the choice (`wrap_changed`).
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QTimer, QUrl, Signal, SignalInstance
from PySide6.QtGui import QDesktopServices, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from traindeck.backend.logparse import Line
from traindeck.backend.runs import ConsoleBatch, ConsoleFeed
from traindeck.gui.widgets.log_view import LogView

DEFAULT_MAX_LINES = 20_000
TICK_MS = 80  # how often batches are applied: often enough to look live, rarely enough to batch a flood
# ... while lines keep coming (every tick has some): a stream scrolls by faster than anyone reads it, and each
# apply is a repaint; at TICK_MS a window watching a run for days spends most of its CPU here
# (tests/perf/bench_gui_soak.py). 1 s: at 500 ms the console's applies and repaints are a quarter of the window's
# CPU on the Runs page at 50 lines/s (py-spy on the soak); a flood still moves every second, like `top`.
STREAM_TICK_MS = 1000
FEED_POLL_S = 0.25  # how often the feed's thread looks for new output when the log is quiet
PAUSED_POLL_S = 1.0  # the feed's reading pace while the console is paused
# ... and how often its batches still go into the view then: a hidden view costs no repaint, and lines left pending
# in the feed instead would be a second copy of up to max_lines texts (~4 MB at 20,000 lines), grown each time the
# page is hidden (the Monitor page in front: +37 MB/h in tests/perf/bench_gui_soak.py; flat when applied)
PAUSED_TICK_MS = 2_000
MAX_LINE_CHARS = 4_000  # longer lines are cut for display (the whole line is in output.log)
SEARCH_DELAY_MS = 250  # incremental search: looks once typing pauses this long (20,000 lines take a few ms)


def display_text(line: Line) -> str:
    """A line as the console shows it: tabs expanded, cut at MAX_LINE_CHARS, rank and node in front."""
    text = line.text
    if "\t" in text:
        text = text.expandtabs(8)  # the view places characters by column
    if len(text) > MAX_LINE_CHARS:
        text = f"{text[:MAX_LINE_CHARS]} … ({len(text) - MAX_LINE_CHARS:,} more characters in output.log)"
    text = f"[{line.rank}] {text}" if line.rank is not None else text
    return f"{line.node}: {text}" if line.node else text  # multi-node runs: the node pdsh named


def _tool_button(text: str, tip: str) -> QToolButton:
    button = QToolButton()
    button.setText(text)
    button.setToolTip(tip)
    return button


class LogConsole(QWidget):
    """Shows a ConsoleFeed. `open_log(path)` starts following a log, `run_ended()` lets it finish reading."""

    follow_changed = Signal(bool)
    wrap_changed = Signal(bool)  # the user turned wrapping on or off (the page keeps it in the settings)

    def __init__(self, max_lines: int = DEFAULT_MAX_LINES, parent: QWidget | None = None):
        super().__init__(parent)
        self.max_lines = max_lines
        self.feed: ConsoleFeed | None = None
        self.log_path: Path | None = None
        self._rank: int | None = None
        self._ranks: tuple[int, ...] = ()
        self._next: int | None = None  # the line number the next appended batch should start at
        self._following = True
        self._adjusting = False  # our own scroll changes: not the user scrolling away from the end
        self.lines_inserted = 0  # display lines put into the document (benchmarks, tests)
        self.total_lines = 0  # display lines of the log so far (the feed's count)
        self.ended = False
        self.paused = False
        self._feed_poll_s = 0.05

        self.view = LogView(max_lines)
        self.view.setObjectName("console")
        self.view.verticalScrollBar().valueChanged.connect(self._scrolled)
        # The view got shorter (a banner appeared) or the text longer: stay at the end while following.
        self.view.verticalScrollBar().rangeChanged.connect(self._range_changed)

        self.rank_box = QComboBox()
        self.rank_box.setToolTip("Show the lines of one rank (lines without a rank tag are always shown)")
        self.rank_box.addItem("All ranks", None)
        self.rank_box.currentIndexChanged.connect(self._rank_chosen)
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search (Ctrl+F)")
        self.search.setClearButtonEnabled(True)
        self.search.setToolTip("Find text in the console as you type: Enter or F3 finds the next match, "
                               "Shift+Enter or Shift+F3 the previous one")
        self.search.returnPressed.connect(self._return_pressed)
        self.search.textEdited.connect(self._search_edited)
        self._search_timer = QTimer(self)
        self._search_timer.setSingleShot(True)
        self._search_timer.setInterval(SEARCH_DELAY_MS)
        self._search_timer.timeout.connect(self._search_typed)
        self.prev_button = _tool_button("▲", "Previous match (Shift+Enter, Shift+F3)")
        self.prev_button.clicked.connect(lambda: self.find_next(backward=True))
        self.next_button = _tool_button("▼", "Next match (Enter, F3)")
        self.next_button.clicked.connect(lambda: self.find_next())
        self.search_state = QLabel()
        self.search_state.setObjectName("searchState")
        self.wrap_button = _tool_button("Wrap", "Wrap long lines instead of scrolling sideways")
        self.wrap_button.setCheckable(True)
        self.wrap_button.toggled.connect(self._wrap_toggled)
        self.follow_button = _tool_button("Follow", "Keep the newest output in view; scrolling up pauses this, "
                                                    "scrolling to the end resumes it")
        self.follow_button.setCheckable(True)
        self.follow_button.setChecked(True)
        self.follow_button.toggled.connect(self.set_follow)
        self.open_button = _tool_button("Open output.log", "Open the whole log file in your text viewer")
        self.open_button.clicked.connect(self.open_log_file)
        self.open_button.setEnabled(False)
        self.earlier_label = QLabel()
        self.earlier_label.setObjectName("earlierLines")
        self.earlier_label.setVisible(False)

        bar = QHBoxLayout()
        bar.setContentsMargins(0, 0, 0, 0)
        bar.addWidget(self.rank_box)
        bar.addWidget(self.search, 1)
        bar.addWidget(self.prev_button)
        bar.addWidget(self.next_button)
        bar.addWidget(self.search_state)
        bar.addStretch(0)
        bar.addWidget(self.earlier_label)
        bar.addWidget(self.wrap_button)
        bar.addWidget(self.open_button)
        bar.addWidget(self.follow_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(bar)
        layout.addWidget(self.view, 1)

        find = QShortcut(QKeySequence.StandardKey.Find, self, self.focus_search)
        find.setContext(find.context().WidgetWithChildrenShortcut)
        for keys, backward in ((QKeySequence.StandardKey.FindNext, False), (QKeySequence.StandardKey.FindPrevious, True),
                               (QKeySequence("Shift+Return"), True)):
            shortcut = QShortcut(keys, self, lambda b=backward: self.find_next(backward=b))
            shortcut.setContext(shortcut.context().WidgetWithChildrenShortcut)

        self.timer = QTimer(self)
        self.timer.setInterval(TICK_MS)
        self.timer.timeout.connect(self.drain)
        self._clock: SignalInstance | None = None  # see follow_clock()
        self._on_clock = False  # a stream is applied on the clock's ticks (our own timer is stopped meanwhile)

    def follow_clock(self, tick: SignalInstance) -> None:
        """Apply a stream (lines in every tick) on `tick` (a page's 1 s clock) instead of our own STREAM_TICK_MS
        timer: the console's repaint then shares the clock's repaint cycle instead of adding one of its own (each
        cycle repaints parents and siblings too). Quiet again, our own quick timer takes over."""
        if self._clock is not None:
            self._clock.disconnect(self._clock_tick)
        self._clock = tick
        tick.connect(self._clock_tick)

    def _clock_tick(self) -> None:
        if self._on_clock:
            self.drain()

    # ---- the log ----------------------------------------------------------------------------------------------
    def open_log(self, path: Path | str, *, ended: bool = False) -> None:
        """Show this log from its start and keep following it (until run_ended() when `ended` is False)."""
        self.close_log()
        self.log_path = Path(path)
        self.feed = ConsoleFeed(self.log_path, max_lines=self.max_lines, render=display_text,
                                poll_s=FEED_POLL_S).start()
        self._feed_poll_s = self.feed.poll_s
        if self.paused:
            self.feed.poll_s = PAUSED_POLL_S
        if ended:
            self.feed.run_ended()
        self.open_button.setEnabled(True)
        self.timer.setInterval(PAUSED_TICK_MS if self.paused else TICK_MS)
        self.timer.start()

    def set_paused(self, paused: bool) -> None:
        """Apply batches rarely while nobody sees the console (hidden page, minimised window): every
        PAUSED_TICK_MS into the view, which draws nothing while hidden; resuming applies what is left at once."""
        if paused == self.paused:
            return
        self.paused = paused
        # No repaints while paused: a minimised window's widgets still count as visible, and some platforms
        # (offscreen, some compositors) paint them; enabling updates again repaints the view once.
        self.view.setUpdatesEnabled(not paused)
        if self.feed is not None:
            self.feed.poll_s = PAUSED_POLL_S if paused else self._feed_poll_s
        if paused:
            self._on_clock = False
            self.timer.setInterval(PAUSED_TICK_MS)
            if self.feed is not None and not self.ended:
                self.timer.start()
        elif self.feed is not None and not self.ended:
            self.drain()
            if not self.ended and not self._on_clock:
                self.timer.start()

    def catch_up(self, timeout_s: float = 2.0) -> None:
        """Wait (blocking, at most timeout_s) until the log read so far is on screen: for demos and screenshots,
        which are grabbed right away; live use leaves this to the timer."""
        if self.feed is not None:
            self.feed.wait_caught_up(timeout_s)
            self.drain()

    def run_ended(self) -> None:
        if self.feed is not None:
            self.feed.run_ended()

    def close_log(self) -> None:
        """Stop reading (never waits for the reading thread) and empty the view."""
        self.timer.stop()
        self._on_clock = False
        if self.feed is not None:
            self.feed.stop()
            self.feed = None
        self.log_path = None
        self._ranks = ()
        self._set_rank_items(())
        self._clear_view()
        self._next = None
        self.total_lines = 0
        self.ended = False
        self.earlier_label.setVisible(False)
        self.open_button.setEnabled(False)
        self.set_follow(True)

    def open_log_file(self) -> None:
        if self.log_path is not None:
            QDesktopServices.openUrl(QUrl.fromLocalFile(str(self.log_path)))

    # ---- applying batches -------------------------------------------------------------------------------------
    def drain(self) -> None:
        """Apply what the feed has for us (the timer does this every TICK_MS; tests may call it directly)."""
        feed = self.feed
        if feed is None:
            return
        batch = feed.take()
        self._apply(batch)
        # A stream: apply it in fewer, larger batches (on the clock when there is one); quiet again: the next line
        # shows within TICK_MS.
        interval = PAUSED_TICK_MS if self.paused else TICK_MS if batch.empty else STREAM_TICK_MS
        on_clock = interval == STREAM_TICK_MS and self._clock is not None
        if on_clock != self._on_clock:
            self._on_clock = on_clock
            if not on_clock:
                self.timer.start()
        if on_clock:
            self.timer.stop()
        elif self.timer.interval() != interval:
            self.timer.setInterval(interval)
        if feed.error:
            self.earlier_label.setText(feed.error)
            self.earlier_label.setVisible(True)
        if self.ended or (not feed.running and feed.error):
            self.timer.stop()  # nothing more will come
            self._on_clock = False

    def _apply(self, batch: ConsoleBatch) -> None:
        if batch.ranks != self._ranks:
            self._ranks = batch.ranks
            self._set_rank_items(batch.ranks)
        self.total_lines = batch.total
        if batch.ended:
            self.ended = True
        truncated = batch.total > self.max_lines
        if truncated != self.earlier_label.isVisible() and not (self.feed and self.feed.error):
            self.earlier_label.setText(f"Showing the last {self.max_lines:,} lines; earlier ones are in output.log")
            self.earlier_label.setVisible(truncated)
        if batch.empty:
            return
        rank = self._rank
        if batch.skipped or (self._next is not None and batch.start > self._next):
            self._clear_view()  # a gap (the view fell a whole screenful behind): start over from this batch
        else:
            for number, (line, text) in batch.replaced.items():
                if rank is None or line.rank is None or line.rank == rank:
                    self.view.replace(number, text)
        self._next = batch.start + len(batch.lines)
        if rank is None:
            numbers: list[int] = list(range(batch.start, batch.start + len(batch.lines)))
            texts = batch.texts
        else:
            kept = [i for i, ln in enumerate(batch.lines) if ln.rank is None or ln.rank == rank]
            numbers = [batch.start + i for i in kept]
            texts = [batch.texts[i] for i in kept]
        if len(texts) > self.max_lines:
            numbers, texts = numbers[-self.max_lines:], texts[-self.max_lines:]
        if texts:
            self._append(numbers, texts)
        if self.search_state.text():
            self._show_count()  # new lines, new matches

    def _append(self, numbers: list[int], texts: list[str]) -> None:
        view, bar = self.view, self.view.verticalScrollBar()
        position = bar.value()
        self._adjusting = True
        try:
            dropped = view.append(numbers, texts)
            self.lines_inserted += len(texts)
            if self._following:
                view.scroll_to_end()
            elif dropped:
                bar.setValue(max(0, position - dropped))  # keep the lines the user is reading in place
        finally:
            self._adjusting = False

    def _clear_view(self) -> None:
        self._adjusting = True
        try:
            self.view.clear()
        finally:
            self._adjusting = False

    # ---- rank filter ------------------------------------------------------------------------------------------
    @property
    def rank_filter(self) -> int | None:
        return self._rank

    def set_rank_filter(self, rank: int | None) -> None:
        """Show one rank's lines (and untagged ones), or all with None. Rebuilt from the lines the feed keeps."""
        index = self.rank_box.findData(rank)
        if index >= 0 and index != self.rank_box.currentIndex():
            self.rank_box.setCurrentIndex(index)  # calls back here through _rank_chosen
            return
        if rank == self._rank:
            return
        self._rank = rank
        self._clear_view()
        if self.feed is not None:
            self._next = None
            self._apply(self.feed.snapshot())

    def _rank_chosen(self, index: int) -> None:
        self.set_rank_filter(self.rank_box.itemData(index))

    def _set_rank_items(self, ranks: tuple[int, ...]) -> None:
        box = self.rank_box
        box.blockSignals(True)
        try:
            while box.count() > 1:
                box.removeItem(1)
            for rank in ranks:
                box.addItem(f"Rank {rank}", rank)
            index = box.findData(self._rank)
            box.setCurrentIndex(max(0, index))
        finally:
            box.blockSignals(False)
        if self._rank is not None and box.findData(self._rank) < 0:
            self._rank = None
        box.setEnabled(len(ranks) > 1 or self._rank is not None)

    # ---- search -----------------------------------------------------------------------------------------------
    def focus_search(self) -> None:
        self.search.setFocus()
        self.search.selectAll()

    def find_next(self, text: str | None = None, backward: bool = False, again: bool = False) -> bool:
        """Select the next (or previous) match, wrapping around; pauses following so the match stays in view.
        `again`: the match at the selection if it still matches (the search text grew), else the next."""
        self._search_timer.stop()
        if text is not None:
            self.search.setText(text)
        needle = self.search.text()
        if not needle:
            self._show_count()
            return False
        found = self.view.find_text(needle, backward=backward, again=again)
        if found:
            self.set_follow(False)
        self._show_count()
        return found

    def _search_edited(self, _text: str) -> None:
        self._search_timer.start()  # restarted by every key: looks once typing pauses

    def _search_typed(self) -> None:
        if self.search.text():
            self.find_next(again=True)
        else:
            self.view.set_selection(None, None)
            self._show_count()

    def _return_pressed(self) -> None:
        # Typed and Enter at once: the first match of what was typed; then the next one.
        self.find_next(again=self._search_timer.isActive())

    def match_count(self) -> tuple[int | None, int]:
        """(the selected match's number from 1, or None; how many matches the console shows)."""
        return self.view.match_count(self.search.text())

    def _show_count(self) -> None:
        needle = self.search.text()
        if not needle:
            self.search_state.setText("")
            self.search_state.setStyleSheet("")
            return
        current, total = self.view.match_count(needle)
        if not total:
            self.search_state.setText("not found")
            self.search_state.setStyleSheet("color: #d93025;")
            return
        self.search_state.setText(f"{current:,} of {total:,}" if current is not None else
                                  f"{total:,} match{'es' if total != 1 else ''}")
        self.search_state.setStyleSheet("")

    # ---- wrap -------------------------------------------------------------------------------------------------
    @property
    def wrap(self) -> bool:
        return self.view.wrap

    def set_wrap(self, wrap: bool) -> None:
        """Wrap long lines (or scroll them sideways); the wrap button shows it. Says nothing (wrap_changed is
        the user's choice)."""
        self.wrap_button.blockSignals(True)
        self.wrap_button.setChecked(wrap)
        self.wrap_button.blockSignals(False)
        self._set_view_wrap(wrap)

    def _wrap_toggled(self, wrap: bool) -> None:
        self._set_view_wrap(wrap)
        self.wrap_changed.emit(wrap)

    def _set_view_wrap(self, wrap: bool) -> None:
        self._adjusting = True
        try:
            self.view.set_wrap(wrap)
            if self._following:
                self.view.scroll_to_end()
        finally:
            self._adjusting = False

    # ---- follow -----------------------------------------------------------------------------------------------
    @property
    def following(self) -> bool:
        return self._following

    def set_follow(self, follow: bool) -> None:
        changed = follow != self._following
        self._following = follow
        if self.follow_button.isChecked() != follow:
            self.follow_button.setChecked(follow)  # calls back here with the same value: nothing changes
        if follow:
            self._adjusting = True
            try:
                self.view.scroll_to_end()
            finally:
                self._adjusting = False
        if changed:
            self.follow_changed.emit(follow)

    def _range_changed(self, _minimum: int, maximum: int) -> None:
        if self._following:
            self._adjusting = True
            try:
                self.view.verticalScrollBar().setValue(maximum)
            finally:
                self._adjusting = False

    def _scrolled(self, value: int) -> None:
        if self._adjusting:
            return
        at_end = value >= self.view.verticalScrollBar().maximum()
        if at_end != self._following:
            self.set_follow(at_end)

    # ---- for tests and the page -------------------------------------------------------------------------------
    def text(self) -> str:
        return self.view.text()

    def shown_lines(self) -> list[str]:
        return self.view.lines()
