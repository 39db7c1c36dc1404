"""The kernel log (/dev/kmsg) as records, and the XID lines NVIDIA's driver writes into it.

The driver logs each XID as `NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus.`: the GPU named
by its PCI bus id (domain:bus:device), the XID number, then the driver's words. NVML only reports XIDs to an event
set armed before they happen; the kernel log keeps them since boot (while its ring buffer holds them), so it names
an XID that struck before anyone watched, or where NVML's event set could not be armed.

/dev/kmsg gives one record per read ("priority,sequence,microseconds since boot,flags;message", then continuation
lines that start with a space); a regular file given in its place (a saved log) is read line by line the same way.
Many containers hide /dev/kmsg: every reader returns None then, never raises.
"""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KMSG = Path("/dev/kmsg")
MAX_RECORDS = 200_000  # the kernel's ring buffer holds far fewer: never an endless read

_XID = re.compile(r"NVRM: Xid \(PCI:(?P<bus>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.[0-7])?\): "
                  r"(?P<xid>\d+)(?:, (?P<rest>.*))?")
_PID = re.compile(r"\bpid='?(?P<pid>\d+)")
_BUS = re.compile(r"^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):(?P<device>[0-9a-fA-F]{1,2})"
                  r"(?:\.(?P<function>[0-7]))?$")


@dataclass(frozen=True, slots=True)
class KernelRecord:
    """One kernel log record: seconds since boot (None where the line carries no stamp) and its message."""

    boot_s: float | None
    message: str


def _record(text: str) -> KernelRecord | None:
    header, sep, message = text.partition(";")
    if not sep:
        return None
    parts = header.split(",")
    try:
        boot_s = int(parts[2]) / 1e6 if len(parts) > 2 else None
    except ValueError:
        boot_s = None
    return KernelRecord(boot_s, message.split("\n", 1)[0].rstrip())


def kernel_records(path: Path | str = KMSG, since_boot_s: float | None = None) -> list[KernelRecord] | None:
    """Every record of the kernel log at `path` (newer than `since_boot_s`, seconds since boot, when given), or
    None when it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
        records = list(_file_records(fd) if regular else _device_records(fd))
    finally:
        os.close(fd)
    return [r for r in records if since_boot_s is None or r.boot_s is None or r.boot_s >= since_boot_s]


def _device_records(fd: int) -> Iterator[KernelRecord]:
    for _ in range(MAX_RECORDS):
        try:
            chunk = os.read(fd, 8192)
        except BlockingIOError:  # the end of the log
            return
        except OSError:  # EPIPE: a record was overwritten while reading; carry on with the next
            continue
        if not chunk:
            return
        record = _record(chunk.decode("utf-8", "replace"))
        if record is not None:
            yield record


def _file_records(fd: int) -> Iterator[KernelRecord]:
    data = b""
    while chunk := os.read(fd, 1 << 20):
        data += chunk
    for line in data.decode("utf-8", "replace").splitlines():
        if line[:1].isspace():  # a continuation line of the record above (" SUBSYSTEM=pci")
            continue
        record = _record(line)
        if record is not None:
            yield record


class KernelLogTail:
    """The kernel log read as it grows: `read_new()` returns the records written since the last call (the first
    call: all that the log holds). `close()` when done."""

    def __init__(self, path: Path | str = KMSG) -> None:
        self.path = path
        self._fd: int | None = None
        self._opened = False

    def read_new(self) -> list[KernelRecord] | None:
        """New records, or None when the log cannot be read here."""
        if not self._opened:
            self._opened = True
            try:
                self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
            except OSError:
                self._fd = None
        if self._fd is None:
            return None
        if stat.S_ISREG(os.fstat(self._fd).st_mode):
            return list(_file_records(self._fd))  # a file's position moves on like the device's
        return list(_device_records(self._fd))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def parse_xid(message: str) -> dict[str, Any] | None:
    """An `NVRM: Xid` line as {"bus": "0000:3b:00", "xid": 79, "pid": int or None, "text": the driver's words}; None
    for any other line."""
    match = _XID.search(message)
    if match is None:
        return None
    rest = match["rest"] or ""
    pid = _PID.search(rest)
    return {"bus": match["bus"].lower(), "xid": int(match["xid"]), "pid": int(pid["pid"]) if pid else None,
            "text": message[match.start():].strip()}


def bus_key(bus_id: str | None) -> tuple[int, int, int] | None:
    """(domain, bus, device) of a PCI bus id as NVML writes it ("00000000:3B:00.0") or the driver's log does
    ("0000:3b:00"), so that the two compare; None when it is neither."""
    if not bus_id:
        return None
    match = _BUS.match(bus_id.strip())
    if match is None:
        return None
    return int(match["domain"] or "0", 16), int(match["bus"], 16), int(match["device"], 16)


def gpu_of_bus(bus: str, bus_ids: Mapping[int, str | None]) -> int | str:
    """The GPU index whose NVML bus id is `bus`, else the bus id itself (a GPU NVML does not list, or lost)."""
    key = bus_key(bus)
    for index, known in sorted(bus_ids.items()):
        if key is not None and bus_key(known) == key:
            return index
    return bus


def boot_seconds_now() -> float | None:
    """Seconds since boot at this moment (kmsg stamps count from boot), or None where /proc/uptime is unreadable."""
    try:
        return float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def xid_events(records: list[KernelRecord], bus_ids: Mapping[int, str | None],
               now: float | None = None) -> list[dict[str, Any]]:
    """The XID lines among `records`, each {"gpu": index (or bus id), "xid", "t": wall-clock time (now where the
    record has no stamp), "bus", "pid", "text", "source": "kernel"}."""
    now = time.time() if now is None else now
    uptime = boot_seconds_now()
    out = []
    for record in records:
        found = parse_xid(record.message)
        if found is None:
            continue
        t = now - (uptime - record.boot_s) if uptime is not None and record.boot_s is not None else now
        out.append({"gpu": gpu_of_bus(found["bus"], bus_ids), "xid": found["xid"], "t": t, "bus": found["bus"],
                    "pid": found["pid"], "text": found["text"], "source": "kernel"})
    return out


def kernel_xids(bus_ids: Mapping[int, str | None], path: Path | str = KMSG,
                since_boot_s: float | None = None) -> list[dict[str, Any]] | None:
    """The XIDs in the kernel log at `path` (see xid_events), or None when it cannot be read."""
    records = kernel_records(path, since_boot_s)
    return None if records is None else xid_events(records, bus_ids)


__all__ = ["KMSG", "KernelLogTail", "KernelRecord", "boot_seconds_now", "bus_key", "gpu_of_bus", "kernel_records",
           "kernel_xids", "parse_xid", "xid_events"]
