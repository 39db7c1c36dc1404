"""A memory cgroup of our own for tests that run a job under a memory limit (cgroup v1 or v2, whichever holds
the memory controller here). `make_memory_cgroup` says why not (a string) where this machine does not allow it:
not root, cgroupfs read-only, no memory controller delegated."""

from __future__ import annotations

import os
import time
from pathlib import Path

from traindeck.backend.runs.diagnosis.cgroups import CGROUP_ROOT, process_cgroup


def make_memory_cgroup(name: str, limit_bytes: int) -> Path | str:
    """A new child of this process's memory cgroup limited to limit_bytes (its directory), or why it cannot be."""
    found = process_cgroup()
    if found is None:
        return "this process's memory cgroup cannot be read (/proc/self/cgroup)"
    version, path = found
    parent = (CGROUP_ROOT / "memory" if version == 1 else CGROUP_ROOT) / path.strip("/")
    child = parent / f"{name}-{os.getpid()}"
    try:
        child.mkdir()
    except OSError as exc:
        return f"cannot create a cgroup under {parent}: {exc.strerror}"
    try:
        if version == 2:
            if "memory" not in (child / "cgroup.controllers").read_text().split():
                raise OSError(0, "the memory controller is not delegated to it")
            (child / "memory.max").write_text(str(limit_bytes))
            if (child / "memory.swap.max").exists():  # else the limit only pushes the job into swap
                (child / "memory.swap.max").write_text("0")
        else:
            (child / "memory.limit_in_bytes").write_text(str(limit_bytes))
    except OSError as exc:
        remove_cgroup(child)
        return f"cannot limit memory in {child}: {exc.strerror}"
    return child


def remove_cgroup(directory: Path) -> None:
    """Remove a cgroup made by make_memory_cgroup once its processes are gone (waits a little for them)."""
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        try:
            directory.rmdir()
            return
        except OSError:
            time.sleep(0.2)
