"""Small, fast reads of Linux /proc, shared by the run supervisor (which scans the run's processes 4x a second) and
the resource monitor (which samples them every second). os.read on a raw descriptor is several times cheaper than
psutil or a buffered open for these tiny files, which is what both budgets need."""

from __future__ import annotations

import os

# /proc/PID/task/PID/children lists a thread's children (Linux >= 3.5 with CONFIG_PROC_CHILDREN).
HAS_CHILDREN_FILE = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def read_small(path: str) -> bytes:
    """A small /proc file in one read (raises OSError when it is gone)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = [os.read(fd, 4096)]
        while len(chunks[-1]) == 4096:
            chunks.append(os.read(fd, 4096))
        return b"".join(chunks)
    finally:
        os.close(fd)


def stat_fields(pid: int) -> list[bytes]:
    """/proc/PID/stat after the command name: field n of proc(5) is [n - 3] (state is [0], ppid [1]).

    The name may hold spaces and ")", so the split starts after the last ")". Raises OSError when gone."""
    data = read_small(f"/proc/{pid}/stat")
    return data[data.rfind(b")") + 2:].split()


def children(pid: int) -> list[int]:
    """The children of `pid`'s main thread ([] when gone or unreadable; children forked by other threads are not
    listed: parent_map() finds those)."""
    try:
        return [int(x) for x in read_small(f"/proc/{pid}/task/{pid}/children").split()]
    except (OSError, ValueError):
        return []


def parent_map() -> dict[int, int]:
    """PID -> parent PID for every process on the host."""
    parents: dict[int, int] = {}
    try:
        entries = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return parents
    for pid in entries:
        try:
            parents[pid] = int(stat_fields(pid)[1])
        except (OSError, IndexError, ValueError):
            continue
    return parents


def descendants(root: int, thorough: bool = False) -> list[int]:
    """PIDs below `root`: a walk over the children files (a few small reads), or with `thorough` (or without
    children files) from the parent of every process, which also finds children forked by other threads."""
    found: list[int] = []
    if HAS_CHILDREN_FILE and not thorough:
        stack = [root]
        while stack:
            for child in children(stack.pop()):
                found.append(child)
                stack.append(child)
        return found
    below: dict[int, list[int]] = {}
    for pid, parent in parent_map().items():
        below.setdefault(parent, []).append(pid)
    stack = [root]
    while stack:
        for child in below.get(stack.pop(), ()):
            found.append(child)
            stack.append(child)
    return found
