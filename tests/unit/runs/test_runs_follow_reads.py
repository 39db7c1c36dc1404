"""LogReader (the console's and `logs --follow`'s reader) on a real growing file: what each poll reads and
allocates."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from traindeck.backend.runs.record.log_follow import CHUNK, LogReader


def test_polling_a_growing_log_allocates_what_arrived_not_a_chunk(tmp_path: Path) -> None:
    """read(n) allocates n bytes before it knows how many there are: a console polling 4 times a second once
    churned two 1 MiB buffers a poll for a few KB of lines, and glibc's heap grew ~15 MB/h around them in a
    window left open (tests/perf/bench_gui_soak.py). 500 polls of a log growing by 5 lines each."""
    log = tmp_path / "output.log"
    log.write_bytes(b"")
    reader = LogReader(log)
    peaks, got = [], 0
    tracemalloc.start()
    try:
        with log.open("ab") as out:
            for poll in range(500):
                out.write(b"".join(b"{'loss': %d.25, 'learning_rate': 5e-05, 'epoch': 0.%d}\n" % (poll, i)
                                   for i in range(5)))
                out.flush()
                tracemalloc.reset_peak()
                before = tracemalloc.get_traced_memory()[0]
                got += len(reader.read_new())
                peaks.append(tracemalloc.get_traced_memory()[1] - before)
                if poll % 100 == 0:
                    reader.read_new()  # nothing new: reads nothing
    finally:
        tracemalloc.stop()
    assert got == 2500 and reader.at_end
    assert max(peaks) < 64 << 10, f"a poll of ~300 new bytes allocated up to {max(peaks):,} bytes"


def test_a_log_larger_than_a_chunk_is_read_whole_and_a_truncated_one_ends_quietly(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    line = b"x" * 99 + b"\n"
    count = 3 * CHUNK // len(line) + 7
    log.write_bytes(line * count)
    reader = LogReader(log)
    assert len(reader.read_new(8 * CHUNK)) == count and reader.at_end
    assert len(reader.read_new(CHUNK)) == 0 and reader.at_end
    log.write_bytes(line)  # truncated under the reader (a log rewritten): nothing to read, no error
    assert reader.read_new() == [] and reader.at_end
