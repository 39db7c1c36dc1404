"""ConsoleFeed: a log read on its own thread into batches a console view applies (no Qt, real files and threads)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support.growing_log import append

from traindeck.backend.logparse import Line
from traindeck.backend.runs.control.console_feed import ConsoleBatch, ConsoleFeed


def wait_for(predicate: Callable[[], object], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


class View:
    """The smallest console: applies batches the way the GUI widget does (appends + in-place replacements)."""

    def __init__(self, feed: ConsoleFeed) -> None:
        self.feed = feed
        self.lines: dict[int, Line] = {}
        self.batches: list[ConsoleBatch] = []

    def take(self) -> ConsoleBatch:
        batch = self.feed.take()
        self.batches.append(batch)
        if batch.skipped:
            self.lines.clear()
        for number, (line, _text) in batch.replaced.items():
            if number in self.lines:
                self.lines[number] = line
        for offset, line in enumerate(batch.lines):
            self.lines[batch.start + offset] = line
        return batch

    def texts(self) -> list[str]:
        return [self.lines[n].text for n in sorted(self.lines)]


def test_bar_redraws_become_one_line_replaced_in_place_across_batches(log: Path) -> None:
    feed = ConsoleFeed(log, poll_s=0.01).start()
    view = View(feed)
    try:
        append(log, b"start\n" + b"".join(b"\rtrain: %3d%%| %d/10 [00:0%d<00:00, 1.00it/s]" % (i * 10, i, i)
                                          for i in range(1, 4)))
        # The newest drawing has no terminator yet: it is shown once the log has been quiet for a moment.
        wait_for(lambda: view.take() and "3/10" in "".join(view.texts()[-1:]))
        assert view.texts() == ["start", "train:  30%| 3/10 [00:03<00:00, 1.00it/s]"]
        bar_number = max(view.lines)
        append(log, b"".join(b"\rtrain: %3d%%| %d/10 [00:0%d<00:00, 1.00it/s]" % (i * 10, i, i)
                             for i in range(4, 10)))
        wait_for(lambda: view.take() and "9/10" in view.lines[bar_number].text)
        assert len(view.lines) == 2  # 9 drawings, one line
        assert any(bar_number in b.replaced for b in view.batches)  # updated in place, not appended
        append(log, b"\rtrain: 100%| 10/10 [00:10<00:00, 1.00it/s]\ndone\n")
        wait_for(lambda: view.take() and view.texts()[-1:] == ["done"])
        assert view.texts() == ["start", "train: 100%| 10/10 [00:10<00:00, 1.00it/s]", "done"]
    finally:
        feed.stop(timeout=5)


def test_ranks_are_collected_and_report_lines_are_not_shown(log: Path) -> None:
    append(log, b"[default0]:hello\n[default1]:world\n@traindeck {\"progress\": 1}\n[rank3]: Traceback\n")
    feed = ConsoleFeed(log, poll_s=0.01, render=lambda ln: f"<{ln.rank}> {ln.text}").start()
    feed.run_ended()
    try:
        wait_for(lambda: feed.take().ended if not feed.running else False)
        batch = feed.snapshot()
        assert batch.ranks == (0, 1, 3)
        assert [(ln.rank, ln.text) for ln in batch.lines] == [(0, "hello"), (1, "world"), (3, "Traceback")]
        assert batch.texts == ["<0> hello", "<1> world", "<3> Traceback"]  # rendered for the view
    finally:
        feed.stop(timeout=5)


def test_run_end_reads_the_unterminated_last_line_and_ends(log: Path) -> None:
    append(log, b"one\nno newline at the end")
    feed = ConsoleFeed(log, poll_s=0.01).start()
    view = View(feed)
    feed.run_ended()
    wait_for(lambda: view.take().ended)
    assert view.texts() == ["one", "no newline at the end"]
    assert not feed.running


def test_a_backlog_beyond_max_lines_keeps_the_newest_and_says_how_many_were_skipped(log: Path) -> None:
    append(log, b"".join(b"line %05d\n" % i for i in range(1000)))
    feed = ConsoleFeed(log, max_lines=100, poll_s=0.01).start()
    feed.run_ended()
    wait_for(lambda: not feed.running)
    batch = feed.take()
    assert batch.total == 1000 and batch.skipped == 900 and batch.start == 900
    assert [ln.text for ln in batch.lines] == [f"line {i:05d}" for i in range(900, 1000)]
    snapshot = feed.snapshot()  # what a rebuilt view (another rank filter) starts from: the same last 100
    assert snapshot.start == 900 and len(snapshot.lines) == 100
    assert feed.take().empty  # the snapshot consumed everything


def test_take_hands_out_each_line_once_while_the_log_grows(log: Path) -> None:
    feed = ConsoleFeed(log, poll_s=0.005).start()
    view = View(feed)
    try:
        for chunk in range(20):
            append(log, b"".join(b"c%02d l%03d\n" % (chunk, i) for i in range(250)))
            view.take()
            time.sleep(0.005)
        wait_for(lambda: view.take() is not None and len(view.lines) == 5000)
        assert view.texts() == [f"c{c:02d} l{i:03d}" for c in range(20) for i in range(250)]
        numbers = [n for b in view.batches for n in range(b.start, b.start + len(b.lines))]
        assert numbers == list(range(5000))  # contiguous, no line twice
    finally:
        feed.stop(timeout=5)


def test_a_missing_log_is_waited_for(tmp_path: Path) -> None:
    path = tmp_path / "later.log"
    feed = ConsoleFeed(path, poll_s=0.01).start()
    try:
        time.sleep(0.1)
        assert feed.take().empty and feed.error is None
        path.write_bytes(b"now it exists\n")
        wait_for(lambda: feed.total == 1)
        assert [ln.text for ln in feed.take().lines] == ["now it exists"]
    finally:
        feed.stop(timeout=5)


def test_far_behind_a_flood_it_jumps_to_the_newest_output_and_says_so(log: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from traindeck.backend.runs.control import console_feed

    monkeypatch.setattr(console_feed, "MAX_LAG_BYTES", 64 << 10)
    monkeypatch.setattr(console_feed, "KEEP_BYTES", 16 << 10)
    append(log, b"".join(b"line %06d of a flood nobody can read as it goes by\n" % i for i in range(20_000)))
    feed = ConsoleFeed(log, poll_s=0.01).start()
    feed.run_ended()
    wait_for(lambda: not feed.running)
    texts = [line.text for line in feed.snapshot().lines]
    assert texts[0].startswith("… ") and "MiB of output skipped" in texts[0] and "output.log" in texts[0]
    assert texts[-1] == "line 019999 of a flood nobody can read as it goes by"
    numbers = [int(t.split()[1]) for t in texts[1:]]
    assert numbers == list(range(numbers[0], 20_000))  # whole lines, in order, up to the newest
    assert 200 < len(numbers) < 1000  # about the last 16 KiB
    assert feed.skipped_bytes + len(numbers) * 53 == log.stat().st_size
