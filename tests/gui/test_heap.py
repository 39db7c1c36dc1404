"""gui/heap.py: freed heap memory goes back to the system (a real glibc heap, real RSS)."""

from __future__ import annotations

import ctypes
import sys

import pytest

from traindeck.gui.heap import HeapTrimmer, malloc_trim

pytestmark = pytest.mark.skipif(malloc_trim() is None, reason="no glibc malloc_trim here")


def _anonymous_kb() -> int:
    with open("/proc/self/smaps_rollup") as rollup:
        for line in rollup:
            if line.startswith("Anonymous:"):
                return int(line.split()[1])
    raise AssertionError("no Anonymous line")


def test_a_trim_gives_back_free_space_held_below_a_live_block():
    """The window's case: freed buffers between live small objects, which glibc never gives back by itself (it
    only trims the heap's top). 24 MB in 64 KiB blocks (under the mmap threshold, so from the heap), each followed
    by a small block kept live, are written and freed: without a trim the resident memory stays; with one it goes."""
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
    for block in blocks:
        libc.free(block)
    before = _anonymous_kb()
    trim = malloc_trim()
    assert trim is not None
    trim()
    after = _anonymous_kb()
    for pin in pins:
        libc.free(pin)
    assert before - after > 16 << 10, f"anonymous memory {before} kB before the trim, {after} kB after"


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
