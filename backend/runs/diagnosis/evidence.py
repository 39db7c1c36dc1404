"""Reading what the system can tell about how a run's processes ended: OOM-kill counters and kernel messages (OOM
kills, the GPU driver's XID lines), the tail of the log. Each reader returns None / empty when the machine does not let us see (containers often
hide /dev/kmsg); diagnosis works with whatever is there.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from traindeck.backend.logparse import LineAssembler, collapse_transient
from traindeck.backend.monitor.kernel_log import kernel_records, kernel_xids
from traindeck.backend.runs.diagnosis.cgroups import counter_field


def oom_kill_counters() -> dict[str, int]:
    """Kernel OOM-kill counters that are readable here: {"vmstat": n, "cgroup": n}.

    /proc/vmstat's oom_kill counts every OOM kill on the host (Linux 4.13+); the cgroup counter (v2 memory.events
    or v1 memory.oom_control) counts kills inside this container's memory limit, which /proc/vmstat may miss.
    """
    counters: dict[str, int] = {}
    value = counter_field(Path("/proc/vmstat"), "oom_kill")
    if value is not None:
        counters["vmstat"] = value
    cgroup = _cgroup_oom_kills()
    if cgroup is not None:
        counters["cgroup"] = cgroup
    return counters


def _cgroup_oom_kills() -> int | None:
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _id, controllers, path = line.split(":", 2)
        if controllers == "":
            found = counter_field(Path("/sys/fs/cgroup") / path.lstrip("/") / "memory.events", "oom_kill")
            if found is not None:
                return found
        elif "memory" in controllers.split(","):
            for base in (Path("/sys/fs/cgroup/memory") / path.lstrip("/"), Path("/sys/fs/cgroup/memory")):
                found = counter_field(base / "memory.oom_control", "oom_kill")
                if found is not None:
                    return found
    return None


KMSG_PATH = Path("/dev/kmsg")  # the kernel log: the readers below take another file in its place (a saved log)
_KMSG_KILLED = re.compile(r"(?:Killed process (?P<pid1>\d+)|oom-kill:.*?[ ,]pid=(?P<pid2>\d+))")
_KMSG_MEMCG = re.compile(r"constraint=CONSTRAINT_MEMCG.*?oom_memcg=(?P<memcg>[^,\s]+)")


def kernel_oom_kills(since_boot_s: float | None = None, kmsg: Path | str | None = None) -> dict[int, str] | None:
    """{pid: kernel message} for OOM kills in the kernel log (`kmsg`, /dev/kmsg by default), or None when it cannot
    be read.

    The message is the "Killed process" line ("Out of memory: ..." for the host, "Memory cgroup out of memory: ..."
    at a cgroup's limit), with " [oom_memcg=PATH]" added when the kernel named the cgroup whose limit was hit.
    `since_boot_s` skips older messages (kmsg stamps are seconds since boot).
    """
    records = kernel_records(kmsg or KMSG_PATH, since_boot_s)
    if records is None:
        return None
    found: dict[int, str] = {}
    memcg: dict[int, str] = {}
    for record in records:
        match = _KMSG_KILLED.search(record.message)
        if match:
            pid = int(match["pid1"] or match["pid2"])
            line = record.message.strip()
            cgroup = _KMSG_MEMCG.search(line)
            if cgroup:
                memcg[pid] = cgroup["memcg"]
            if match["pid1"] or pid not in found:  # the "Killed process" line says it best
                found[pid] = line
    return {pid: text + (f" [oom_memcg={memcg[pid]}]" if pid in memcg and "oom_memcg=" not in text else "")
            for pid, text in found.items()}


def kernel_gpu_xids(bus_ids: Mapping[int, str | None], since_boot_s: float | None = None,
                    kmsg: Path | str | None = None) -> list[dict[str, Any]] | None:
    """The XID errors NVIDIA's driver wrote to the kernel log (`kmsg`, /dev/kmsg by default) since `since_boot_s`:
    [{"gpu": the GPU index whose NVML bus id (`bus_ids`) the line names, else that bus id, "xid", "t", "bus", "pid",
    "text", "source": "kernel"}], or None when the log cannot be read. NVML reports an XID only to an event set
    armed before it; the kernel log has it either way."""
    return kernel_xids(bus_ids, kmsg or KMSG_PATH, since_boot_s)


def log_tail(path: Path, max_bytes: int = 256 * 1024, max_lines: int = 400) -> list[str]:
    """The last lines of a run's output as a reader would see them: redraws collapsed, colours removed."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            handle.seek(max(0, size - max_bytes))
            data = handle.read()
    except OSError:
        return []
    if size > max_bytes:
        data = data[data.find(b"\n") + 1:]  # drop the partial first line
    assembler = LineAssembler()
    shown = collapse_transient([*assembler.feed(data), *assembler.flush()], maxlen=max_lines)
    return [f"[rank{line.rank}]: {line.text}" if line.rank is not None else line.text for line in shown]


TAIL_FOR_FULL = 2000  # lines of the log's end searched for the paths of full disks


def free_space_of(lines: list[str]) -> dict[str, int]:
    """Free bytes now of the disks that the log's "No space left on device: 'PATH'" errors name, by that path (the
    nearest folder that still exists is asked)."""
    from traindeck.backend.core.paths import free_bytes
    from traindeck.backend.runs.diagnosis.failures import full_path

    found: dict[str, int] = {}
    for line in lines[-TAIL_FOR_FULL:]:
        path = full_path(line)
        if path and path not in found and len(found) < 8:
            free = free_bytes(path)
            if free >= 0:
                found[path] = free
    return found


def boot_time_offset() -> float:
    """Seconds since boot at this moment (to compare with kmsg stamps)."""
    try:
        return float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0


_DS_SPAWNED = re.compile(rb"\] process (\d+) spawned with command: \[.*?'--local_rank=(\d+)'")
_DS_NODES = re.compile(rb"\] nnodes=(\d+), num_local_procs=\d+, node_rank=(\d+)")


def launcher_spawned_ranks(path: Path, max_bytes: int = 256 * 1024) -> dict[int, int | None]:
    """{pid: rank} of the ranks DeepSpeed's launch.py says it started ("process N spawned with command: [...]").

    The supervisor names ranks by their RANK variable, which it can only read while a rank is alive; a rank that
    dies within a scan (or before its exec is visible) is still named here. The rank is the local rank on a
    one-node run; with several nodes the global number is not in that line, so it is None.
    """
    try:
        with open(path, "rb") as handle:
            head = handle.read(max_bytes)  # the launcher writes these lines before any rank's output
    except OSError:
        return {}
    nodes = _DS_NODES.search(head)
    one_node = nodes is None or nodes.group(1) == b"1"
    # Lines of other nodes come through pdsh as "HOST: [..." and name pids of those machines: not ours.
    return {int(m.group(1)): int(m.group(2)) if one_node else None for m in _DS_SPAWNED.finditer(head)
            if head[head.rfind(b"\n", 0, m.start()) + 1:][:1] == b"["}
