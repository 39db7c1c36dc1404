"""Where a process's memory is, for the soak benchmark's `--diag`: glibc's arenas, Python's blocks, each mapping.

A growing RSS alone does not say who grows. This snapshot separates:
  glibc     mallinfo2(): bytes in use (uordblks) against free space kept (fordblks), over every arena, and
            malloc_info()'s per-arena figures (a thread's arena grows apart from the main heap)
  python    sys.getallocatedblocks() (live Python objects' blocks) and gc's object count
  maps      each mapping's anonymous kB from /proc/self/smaps, keyed by what it is: [heap], a named file, or an
            unnamed mapping by its start address (thread arenas, Python's 1 MiB arenas, Qt's and numpy's big blocks)
Linux and glibc only; each part is left out where the system lacks it.
"""

from __future__ import annotations

import ctypes
import gc
import os
import re
import sys
import tempfile


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def glibc() -> dict:
    libc = _libc()
    if libc is None or not hasattr(libc, "mallinfo2"):
        return {}
    libc.mallinfo2.restype = _Mallinfo2
    info = libc.mallinfo2()
    out = {"arena_kb": info.arena // 1024, "in_use_kb": info.uordblks // 1024, "free_kb": info.fordblks // 1024,
           "mmapped_kb": info.hblkhd // 1024, "top_free_kb": info.keepcost // 1024}
    fd, path = tempfile.mkstemp(prefix="malloc-info-")
    os.close(fd)
    try:
        libc.fopen.restype = ctypes.c_void_p
        libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
        libc.fclose.argtypes = [ctypes.c_void_p]
        handle = libc.fopen(path.encode(), b"w")
        if handle:
            libc.malloc_info(0, handle)
            libc.fclose(handle)
            xml = open(path).read()
            heaps = re.findall(r'<heap nr="(\d+)">.*?<total type="rest" count="\d+" size="(\d+)"/>.*?'
                               r'<system type="current" size="(\d+)"/>', xml, re.S)
            out["heaps"] = {nr: {"free_kb": int(free) // 1024, "system_kb": int(system) // 1024}
                            for nr, free, system in heaps}
    finally:
        os.unlink(path)
    return out


def python() -> dict:
    return {"blocks": sys.getallocatedblocks(), "gc_objects": len(gc.get_objects())}


def maps() -> dict[str, int]:
    """Anonymous kB per mapping (only those with any)."""
    out: dict[str, int] = {}
    key = ""
    try:
        with open("/proc/self/smaps") as smaps:
            for line in smaps:
                first = line.split(maxsplit=5)
                if "-" in first[0] and len(first) >= 5 and not first[0].endswith(":"):
                    path = first[5].strip() if len(first) > 5 else ""
                    key = path or "anon@" + first[0].split("-")[0]
                elif line.startswith("Anonymous:"):
                    kb = int(line.split()[1])
                    if kb:
                        out[key] = out.get(key, 0) + kb
    except OSError:
        pass
    return out


_baseline = None


def traced(compare: bool) -> dict:
    """With tracemalloc on (`python -X tracemalloc`): bytes traced, and once `compare` turns true, the lines whose
    allocations grew most since the first snapshot taken with it."""
    import tracemalloc

    global _baseline
    if not tracemalloc.is_tracing():
        return {}
    out: dict = {"traced_kb": tracemalloc.get_traced_memory()[0] // 1024}
    if compare:
        now = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
        if _baseline is None:
            _baseline = now
        else:
            out["grew"] = [(str(stat.traceback), stat.size_diff // 1024, stat.count_diff)
                           for stat in now.compare_to(_baseline, "lineno")[:12]]
    return out


def snapshot(compare: bool = False) -> dict:
    return {"glibc": glibc(), "python": python() | traced(compare), "maps": maps()}
