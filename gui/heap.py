"""The window's heap over days: glibc's malloc told to keep big short-lived buffers out of its heap.

glibc serves a request from its heap unless it is at least M_MMAP_THRESHOLD (128 KiB), then it maps pages of its
own and unmaps them on free. By default the threshold moves: freeing a mapped buffer raises it to that buffer's
size (up to 32 MiB), after which buffers of that size come from the heap. A window watching a run makes a few
such buffers a second (a chart's points, a series' copy), each short-lived, between long-lived small objects. In
tests/perf/bench_gui_soak.py glibc's heap grew its free space (+2 MB in 4 min on the Runs page, mallinfo2) while
its live data stayed flat. A fixed threshold (setting it turns the moving off) maps such buffers every time and
gives them back whole; a few mmap calls a second cost nothing a user would see. How much of the window's growth
this removes is not shown yet (README, the soak table).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_MMAP_THRESHOLD = -3  # glibc's mallopt() parameter number (malloc.h)
MMAP_THRESHOLD = 128 << 10  # glibc's own starting value, kept


def steady_heap() -> bool:
    """Fix glibc's mmap threshold for this process; False where there is no glibc (nothing to do there)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others: no mallopt, and no moving threshold either
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
