"""gui/heap.py: the window's process keeps big short-lived buffers out of glibc's heap."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import pytest

PROBE = r"""
import ctypes, sys
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Info
if sys.argv[1] == "steady":
    from traindeck.gui.heap import steady_heap
    assert steady_heap()
mapped = []
for size in (1 << 20, 300 << 10, 200 << 10):
    buffer = ctypes.create_string_buffer(size)  # malloc'd; freed when dropped
    del buffer
    held = ctypes.create_string_buffer(size)    # the same size again, after one was freed
    mapped.append(libc.mallinfo2().hblkhd >= size)
    del held
print(all(mapped))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator only")
def test_a_big_buffer_freed_does_not_pull_the_next_ones_into_the_heap() -> None:
    """By default glibc raises its mmap threshold to the size of a mapped buffer freed, and later buffers of
    that size come from the heap, whose free space grew in a window left open (gui/heap.py). Each probe runs in a fresh
    interpreter: once fixed, a process's threshold stays fixed."""
    try:
        ctypes.CDLL("libc.so.6").mallinfo2  # noqa: B018 (glibc 2.33+)
    except (OSError, AttributeError):
        pytest.skip("no glibc mallinfo2 here")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_TUNABLES"))}
    default = subprocess.run([sys.executable, "-c", PROBE, "default"], capture_output=True, text=True, timeout=60,
                             env=env)
    steady = subprocess.run([sys.executable, "-c", PROBE, "steady"], capture_output=True, text=True, timeout=60,
                            env=env)
    assert default.returncode == 0 and steady.returncode == 0, default.stderr + steady.stderr
    assert default.stdout.strip() == "False"  # glibc's moving threshold: what the test would not see otherwise
    assert steady.stdout.strip() == "True"
