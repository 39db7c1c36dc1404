"""The memory limit a run's processes live under: their cgroup's limit and its OOM-kill counter, and who set it.

A run inside a container, a Slurm job or a systemd unit can be killed at that cgroup's limit while the host has
plenty of RAM left; telling the two apart decides the advice (raise the limit / ask the scheduler for more memory,
not "add RAM"). Reads /proc/PID/cgroup and the cgroup filesystem (v2: memory.max, memory.events; v1:
memory.limit_in_bytes, memory.oom_control); every reader returns None where the machine does not let us see.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

CGROUP_ROOT = Path("/sys/fs/cgroup")
UNLIMITED = 1 << 62  # v1 reports "no limit" as a huge page-rounded number (9223372036854771712)


@dataclass(frozen=True)
class MemoryLimit:
    cgroup: str  # the process's memory cgroup, as /proc/PID/cgroup names it
    version: int  # 1 or 2
    limit_bytes: int | None  # the smallest limit on the way up to the root; None = no limit
    set_by: str  # the cgroup whose limit that is ("" when none)
    owner: str  # who set it, in words: "Slurm job 42", "systemd unit x.service", "the container", "cgroup /a/b"
    oom_kills: int | None  # the cgroup's OOM-kill counter now (None = not readable)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def process_cgroup(pid: int | str = "self") -> tuple[int, str] | None:
    """(version, path) of the memory cgroup of a process, from /proc/PID/cgroup; None when unreadable.

    On a hybrid host (v1 controllers and a v2 tree side by side) memory is accounted where the v1 memory
    controller is mounted, so a "memory" v1 line wins over the v2 "0::" line."""
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None
    return parse_proc_cgroup(text)


def parse_proc_cgroup(text: str) -> tuple[int, str] | None:
    unified = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _hierarchy, controllers, path = parts
        if "memory" in controllers.split(","):
            return 1, path
        if controllers == "":
            unified = path
    return (2, unified) if unified is not None else None


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max":
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return None if value >= UNLIMITED else value


def counter_field(path: Path, name: str) -> int | None:
    """The number after `name` in a "key value" file (memory.events, memory.oom_control, /proc/vmstat); None when
    unreadable or absent."""
    try:
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == name:
                return int(value.strip())
    except (OSError, ValueError):
        return None
    return None


def _directory(version: int, path: str, root: Path) -> Path:
    base = root if version == 2 else root / "memory"
    return base / path.strip("/") if path.strip("/") else base


def memory_limit(version: int, path: str, root: Path = CGROUP_ROOT) -> MemoryLimit | None:
    """The limit over a cgroup (its own or an ancestor's, whichever is smallest) and its OOM-kill counter.

    None when the cgroup's directory cannot be read (not mounted, or another mount namespace)."""
    here = _directory(version, path, root)
    if not here.is_dir():
        return None
    limit_file, counter = ("memory.max", ("memory.events", "oom_kill")) if version == 2 else \
        ("memory.limit_in_bytes", ("memory.oom_control", "oom_kill"))
    best: tuple[int, str] | None = None
    parts = [p for p in path.strip("/").split("/") if p]
    for depth in range(len(parts), -1, -1):
        sub = "/" + "/".join(parts[:depth])
        limit = _read_int(_directory(version, sub, root) / limit_file)
        if limit is not None and (best is None or limit < best[0]):
            best = (limit, sub)
    # The counter counts the cgroups below too: a cgroup without the memory controller (a run's own cgroup, see
    # supervisor/run_cgroup.py) reports the kills of its nearest ancestor that has it.
    oom = None
    for depth in range(len(parts), -1, -1):
        oom = counter_field(_directory(version, "/" + "/".join(parts[:depth]), root) / counter[0], counter[1])
        if oom is not None:
            break
    return MemoryLimit(cgroup=path, version=version, limit_bytes=best[0] if best else None,
                       set_by=best[1] if best else "", owner=owner_of(best[1]) if best else "", oom_kills=oom)


_SLURM_JOB = re.compile(r"slurm[^/]*/(?:.*/)?job_(\d+)")
_CONTAINER = re.compile(r"(docker|containerd|kubepods|libpod|podman|lxc|crio|actions_job)[-/_.]?([0-9a-f]{12})?")


def owner_of(path: str) -> str:
    """Who set a limit, from the cgroup's path: a Slurm job, a container, a systemd unit, else the path itself."""
    job = _SLURM_JOB.search(path)
    if job:
        return f"Slurm job {job.group(1)}"
    container = _CONTAINER.search(path)
    if container:
        kind = "Kubernetes pod" if container.group(1) == "kubepods" else "container"
        return f"the {kind}" + (f" {container.group(2)}" if container.group(2) else "")
    units = [part for part in path.split("/") if part.endswith((".service", ".scope"))]
    if units:
        return f"systemd unit {units[-1]}"
    if path.strip("/") == "":
        return "the container or VM this runs in"  # a limit at the root of what we can see: a cgroup namespace
    return f"cgroup {path}"
