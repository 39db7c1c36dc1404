"""ConsoleFeed and tqdm bars: one line per bar, updated in place, whatever comes between its redraws. The output is
real tqdm's, made by running tqdm in a subprocess with its bar on a piped stdout and prints in between."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from traindeck.backend.logparse import Line
from traindeck.backend.logparse.tqdm_bar import looks_like_bar
from traindeck.backend.runs.control import console_feed
from traindeck.backend.runs.control.console_feed import ConsoleBatch, ConsoleFeed


def tqdm_output(body: str) -> bytes:
    """What `body` writes to a piped stdout; `bar(total, desc)` makes a tqdm bar there, redrawn on every update."""
    program = textwrap.dedent("""
        import sys
        from tqdm import tqdm

        def bar(total, desc):
            return tqdm(total=total, desc=desc, file=sys.stdout, mininterval=0, miniters=1, ncols=80)
    """) + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", program], check=True, capture_output=True, timeout=60).stdout


def torchrun_tee(outputs: dict[int, bytes]) -> bytes:
    """Ranks' outputs as `torchrun --tee` interleaves them: line by line, each line tagged with its rank (it reads
    the ranks' logs in text mode: a bar's "\r" ends a line too)."""
    split = {rank: re.split(rb"\r\n|\r|\n", data) for rank, data in outputs.items()}
    out = []
    for i in range(max(len(lines) for lines in split.values())):
        for rank, lines in split.items():
            if i < len(lines):
                out.append(b"[default%d]:%s\n" % (rank, lines[i]))
    return b"".join(out)


class View:
    """Applies batches the way the console widget does: appended lines, and earlier lines replaced in place."""

    def __init__(self, feed: ConsoleFeed) -> None:
        self.feed = feed
        self.lines: dict[int, Line] = {}
        self.replaced: set[int] = set()

    def take(self) -> ConsoleBatch:
        batch = self.feed.take()
        for number, (line, _text) in batch.replaced.items():
            if number in self.lines:
                self.lines[number] = line
                self.replaced.add(number)
        for offset, line in enumerate(batch.lines):
            self.lines[batch.start + offset] = line
        return batch

    def texts(self) -> list[str]:
        return [self.lines[n].text for n in sorted(self.lines)]

    def bars(self) -> list[tuple[int, Line]]:
        return [(n, line) for n, line in sorted(self.lines.items()) if looks_like_bar(line.text)]


def wait_for(predicate: Callable[[], object], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def show(log: Path, *chunks: tuple[bytes, str]) -> View:
    """Write each chunk into `log`, the view taking the feed's batches until it shows the chunk's `marker` line;
    then the run ends and the view takes the rest."""
    log.write_bytes(b"")
    feed = ConsoleFeed(log, poll_s=0.01).start()
    view = View(feed)
    try:
        for chunk, marker in chunks:
            with open(log, "ab") as handle:
                handle.write(chunk)
            wait_for(lambda m=marker: view.take() is not None and any(m in text for text in view.texts()))
        feed.run_ended()
        wait_for(lambda: view.take().ended)
    finally:
        feed.stop(timeout=5)
    return view


PRINTS_BETWEEN_REDRAWS = """
    b = bar(12, "Epoch 1")
    for i in range(12):
        b.update(1)
        if i % 4 == 3:
            print(f"[INFO] [logging.py:96:log_dist] [Rank 0] step={i}, skipped=0, lr=[0.0001]", flush=True)
    b.close()
    print("done")
"""


@pytest.mark.parametrize("newline", [False, True], ids=["glued", "own-line"])
def test_prints_between_redraws_leave_one_bar_line_updated_in_place(log: Path, newline: bool) -> None:
    """A print while the bar is on screen lands right after the bar; a logger that starts its record on a line of
    its own ends the bar's line first. Either way the bar is one line and every print a line."""
    output = tqdm_output(PRINTS_BETWEEN_REDRAWS.replace('print(f"', 'print(f"\\n' if newline else 'print(f"'))
    assert output.count(b"\rEpoch 1:") == 14  # tqdm's redraws
    assert (b"it/s]\n[INFO]" if newline else b"it/s][INFO]") in output
    half = output.index(b"step=7")
    view = show(log, (output[:half], "step=3"), (output[half:], "done"))
    bars = view.bars()
    assert len(bars) == 1, view.texts()
    number, bar = bars[0]
    assert "12/12" in bar.text and bar.text.startswith("Epoch 1: 100%|")
    assert number in view.replaced  # drawn first, then updated where it was (not appended again)
    assert view.texts()[1:] == [f"[INFO] [logging.py:96:log_dist] [Rank 0] step={i}, skipped=0, lr=[0.0001]"
                                for i in (3, 7, 11)] + ["done"]  # the glued prints, each a line of its own


def test_each_rank_keeps_one_bar_line_among_the_others_lines(log: Path) -> None:
    outputs = {rank: tqdm_output(PRINTS_BETWEEN_REDRAWS.replace("Rank 0", f"Rank {rank}")) for rank in (0, 1)}
    tee = torchrun_tee(outputs)
    assert tee.count(b"Epoch 1:") >= 2 * 13  # every redraw a tagged line of its own
    view = show(log, (tee, "done"))
    bars = view.bars()
    assert sorted(line.rank for _n, line in bars) == [0, 1], view.texts()
    assert all("12/12" in line.text for _n, line in bars)
    assert len(view.lines) == 2 + 2 * 4  # two bars, each rank's three log lines and its "done"


def test_a_bar_started_again_under_the_same_description_gets_a_new_line(log: Path) -> None:
    output = tqdm_output("""
        for epoch in range(2):
            b = bar(5, "eval")
            for i in range(5):
                b.update(1)
                print(f"batch {i}", flush=True)
            b.close()
    """)
    view = show(log, (output, ""))
    bars = [line.text for _n, line in view.bars()]
    assert len(bars) == 2 and all("5/5" in text for text in bars), view.texts()
    assert [t for t in view.texts() if t.startswith("batch")] == [f"batch {i}" for i in range(5)] * 2


def test_tqdm_write_keeps_the_bar_below_the_written_lines(log: Path) -> None:
    output = tqdm_output("""
        b = bar(6, "train")
        for i in range(6):
            b.update(1)
            tqdm.write(f"loss {i}", file=sys.stdout)
        b.close()
    """)
    view = show(log, (output, ""))
    assert view.texts()[:6] == [f"loss {i}" for i in range(6)]
    assert len(view.bars()) == 1 and "6/6" in view.texts()[-1]


def test_a_bar_far_up_is_drawn_again_at_the_newest_output(log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(console_feed, "BAR_REACH", 3)
    output = tqdm_output("""
        b = bar(4, "train")
        for i in range(4):
            b.update(1)
            for j in range((1, 1, 5, 0)[i]):
                print(f"line {i}.{j}", flush=True)
        b.close()
    """)
    view = show(log, (output, ""))
    texts = view.texts()
    bars = [i for i, text in enumerate(texts) if looks_like_bar(text)]
    # Three drawings within reach of the first one update its line; after five more lines the fourth is too far
    # below it and gets a line of its own, which the last drawing (close) updates.
    assert bars == [0, 8], texts
    assert "3/4" in texts[0] and "4/4" in texts[8]
