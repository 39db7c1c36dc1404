"""The window's heap over days: what glibc's malloc keeps after it is freed is given back to the system.

Without trimming, a 30 min soak (tests/perf/bench_gui_soak.py --diag, glibc's mallinfo2 every minute) shows why:
once the console and the series reach their bounds, the memory in use stays flat (glibc's live bytes 38.8-39.5 MB,
Python's blocks and objects flat, tracemalloc flat), yet the heap grows ~4.5 MB/h: the free space inside it
(5.7 -> 7.4 MB). The page's short-lived buffers (a batch of lines, a chart's points) leave holes between
long-lived small objects, and glibc only gives back free space at the heap's very top, which a live object almost
always holds.

malloc_trim(0) also gives back the whole free pages inside the heap and every thread's arena (madvise), so the
resident memory follows the memory in use. Once a minute: a trim walks the free lists (well under a millisecond
for this window's ~45 MB) and a page given back costs one page fault if it is used again. Where there is no
glibc (musl, macOS, Windows) there is nothing to call and nothing is done. `TRAINDECK_HEAP_TRIM_S` sets the
interval (0: never), for the soak benchmark's comparisons.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer

TRIM_S = 60.0


def malloc_trim() -> Callable[[], bool] | None:
    """glibc's malloc_trim(0) as a callable returning whether memory was given back; None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        # The C library the process already has: no find_library, which runs ldconfig in a subprocess.
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # musl: no malloc_trim (and its allocator returns memory itself)
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: bool(trim(0))


def trim_interval_s() -> float:
    """Seconds between trims: TRAINDECK_HEAP_TRIM_S when it is a number (0: never), else TRIM_S."""
    try:
        return max(0.0, float(os.environ.get("TRAINDECK_HEAP_TRIM_S", TRIM_S)))
    except ValueError:
        return TRIM_S


class HeapTrimmer(QObject):
    """Gives the heap's free pages back every `interval_s` seconds while the window lives."""

    def __init__(self, parent: QObject | None = None, interval_s: float | None = None):
        super().__init__(parent)
        self.trim = malloc_trim()
        self.trims = 0
        interval = trim_interval_s() if interval_s is None else interval_s
        self.timer = QTimer(self)
        self.timer.setInterval(int(interval * 1000))
        self.timer.timeout.connect(self.trim_now)
        if self.trim is not None and interval > 0:
            self.timer.start()

    def trim_now(self) -> None:
        if self.trim is not None:
            self.trim()
            self.trims += 1
