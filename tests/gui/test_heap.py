"""gui/heap.py: freed heap memory goes back to the system (a real glibc heap, real RSS)."""

from __future__ import annotations

import sys

import pytest

from traindeck.gui.heap import HeapTrimmer, malloc_trim

pytestmark = pytest.mark.skipif(malloc_trim() is None, reason="no glibc malloc_trim here")


# Run in a bare process of its own, with malloc_trim's own source: in a process that loaded Qt, glibc's free lists
# hold small chunks, so the "pins" come from there instead of right after each block, the blocks join the heap's
# top and go back at free() already: the case the trim is for would not be set up.
SCENARIO = """
from __future__ import annotations
import ctypes, json, sys
from collections.abc import Callable
{malloc_trim}

def anonymous_kb():
    with open("/proc/self/smaps_rollup") as rollup:
        return next(int(line.split()[1]) for line in rollup if line.startswith("Anonymous:"))

libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
blocks, pins = [], []
for _ in range(384):
    block = libc.malloc(64 << 10)
    ctypes.memset(block, 1, 64 << 10)  # touched: resident
    blocks.append(block)
    pins.append(libc.malloc(64))  # live, after the block: the hole it leaves cannot join the heap's top
allocated = anonymous_kb()
for block in blocks:
    libc.free(block)
before = anonymous_kb()
TRIM = malloc_trim()
if TRIM:
    TRIM()
print(json.dumps({"allocated": allocated, "before": before, "after": anonymous_kb()}))
"""


def test_a_trim_gives_back_free_space_held_below_a_live_block():
    """The window's case: freed buffers between live small objects, which glibc never gives back by itself (it
    only trims the heap's top). 24 MB in 64 KiB blocks (under the mmap threshold, so from the heap), each followed
    by a small block kept live, are written and freed: without a trim the resident memory stays; with one it goes."""
    import inspect
    import json
    import subprocess

    scenario = SCENARIO.replace("{malloc_trim}", inspect.getsource(malloc_trim))
    for trims in (False, True):
        code = scenario if trims else scenario.replace("TRIM = malloc_trim()", "TRIM = None")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
        kb = json.loads(done.stdout)
        assert kb["allocated"] - kb["before"] < 4 << 10, f"glibc gave the blocks back at free: {kb}"
        if trims:
            assert kb["before"] - kb["after"] > 16 << 10, f"the trim gave back too little: {kb}"
        else:
            assert kb["before"] - kb["after"] < 1 << 10, f"memory went back without a trim: {kb}"


def test_the_window_trims_on_a_timer(qtbot, monkeypatch):
    monkeypatch.setenv("TRAINDECK_HEAP_TRIM_S", "0.05")
    from PySide6.QtWidgets import QWidget

    owner = QWidget()
    qtbot.addWidget(owner)
    trimmer = HeapTrimmer(owner)
    qtbot.waitUntil(lambda: trimmer.trims >= 2, timeout=3000)


def test_a_trim_interval_of_zero_turns_it_off(qtbot, monkeypatch):
    monkeypatch.setenv("TRAINDECK_HEAP_TRIM_S", "0")
    trimmer = HeapTrimmer()
    assert not trimmer.timer.isActive()
    monkeypatch.setenv("TRAINDECK_HEAP_TRIM_S", "soon")  # not a number: the default, not a crash
    assert HeapTrimmer().timer.interval() == 60_000


def test_the_main_window_has_one(qtbot):
    from traindeck.gui.app import create_window

    _app, window = create_window()
    qtbot.addWidget(window)
    assert window.heap_trimmer.timer.isActive() == sys.platform.startswith("linux")
