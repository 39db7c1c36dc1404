"""Reading a run's output.log as lines, from the start and then as it grows (`traindeck logs --follow`, the run
console). The log is a plain file, so any number of readers can do this at any time, also after a restart.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from traindeck.backend.logparse import Line, LineAssembler

CHUNK = 1 << 20


def run_hosts(run_dir: Path) -> tuple[str, ...]:
    """The hosts of a multi-node run (their `HOST: ` prefixes are node tags in its log); () for one machine."""
    from traindeck.backend.nodes.node_plan import read_nodes

    doc = read_nodes(run_dir)
    return tuple(str(h.get("host")) for h in doc["hosts"] if isinstance(h, dict)) if doc else ()


class LogReader:
    """Non-blocking: each read_new() returns the lines completed since the last call (transient ones included)."""

    def __init__(self, path: Path, start_at_end: bool = False) -> None:
        self.path = Path(path)
        self._handle: Any = None
        self.hosts = run_hosts(self.path.parent)
        self._assembler = LineAssembler(hosts=self.hosts)
        self._start_at_end = start_at_end
        self.at_end = False

    def _open(self) -> bool:
        if self._handle is None:
            try:
                self._handle = open(self.path, "rb")
            except FileNotFoundError:
                return False
            if self._start_at_end:
                self._handle.seek(0, 2)
        return True

    def read_new(self, max_bytes: int = 8 * CHUNK) -> list[Line]:
        """The lines completed since the last call, reading at most `max_bytes`; `at_end` says whether the end
        was reached."""
        self.at_end = False
        if not self._open():
            self.at_end = True
            return []
        lines: list[Line] = []
        budget = max_bytes
        while budget > 0:
            # Ask for what the file has, not a whole chunk: read(n) allocates n bytes before it knows how many
            # there are. A console polling a log 4 times a second that way churns two 1 MiB buffers per poll
            # (8 GB in 11 min) for a few KB of lines, and glibc's heap around them grows ~15 MB/h in a window
            # left open (tests/perf/bench_gui_soak.py).
            available = os.fstat(self._handle.fileno()).st_size - self._handle.tell()
            chunk = self._handle.read(min(CHUNK, budget, available)) if available > 0 else b""
            if not chunk:
                self.at_end = True
                break
            budget -= len(chunk)
            lines.extend(self._assembler.feed(chunk))
        return lines

    def unread_bytes(self) -> int:
        """How far the log has grown beyond what was read (0 before the file exists)."""
        if not self._open():
            return 0
        return max(0, os.fstat(self._handle.fileno()).st_size - self._handle.tell())

    def skip_to_tail(self, keep_bytes: int) -> int:
        """Go on reading from the first line that starts within the last `keep_bytes` of the file, dropping what
        was not read before it (a console that fell far behind a flood shows the newest output; the file keeps
        everything). Returns the number of bytes skipped."""
        if not self._open():
            return 0
        start = self._handle.tell()
        offset = os.fstat(self._handle.fileno()).st_size - keep_bytes
        if offset <= start:
            return 0
        self._handle.seek(offset)
        self._handle.readline()  # the rest of a line cut in the middle
        self._assembler = LineAssembler(hosts=self.hosts)
        return int(self._handle.tell() - start)

    def partial(self) -> Line | None:
        """The unterminated last line so far (e.g. the current tqdm bar) as a transient Line; nothing consumed."""
        return self._assembler.partial()

    def finish(self) -> list[Line]:
        """Everything left, the last unterminated line included (call once the run has ended)."""
        lines = self.read_new()
        while not self.at_end:
            lines.extend(self.read_new())
        lines.extend(self._assembler.flush())
        return lines

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def follow_lines(path: Path, *, follow: bool, finished: Callable[[], bool] | None = None,
                 poll_s: float = 0.1) -> Iterator[Line]:
    """Every line of the log; with `follow`, keeps waiting for more until `finished()` returns True."""
    reader = LogReader(path)
    try:
        while True:
            lines = reader.read_new()
            yield from lines
            if lines:
                continue
            if not follow or finished is None or finished():
                yield from reader.finish()
                return
            time.sleep(poll_s)
    finally:
        reader.close()
