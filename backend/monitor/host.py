"""The host through psutil: CPU per core, RAM, swap, disk and network rates, and which disk holds a path."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

from traindeck.backend.monitor.snapshots import DiskRate, HostSnapshot

# Block devices that are not storage of their own: loop files, RAM disks, compressed swap in RAM, and devices
# stacked on other disks (device-mapper, md RAID), which would count the same bytes twice in a total.
_NOT_A_DISK = ("loop", "ram", "zram", "dm-", "md", "sr", "fd")


def whole_disks(names: Sequence[str]) -> list[str]:
    """The names that are physical whole disks (in /sys/block, not a partition, not stacked or virtual)."""
    sys_block = Path("/sys/block")
    if not sys_block.is_dir():  # not Linux: psutil already reports whole disks only
        return list(names)
    return [n for n in names if (sys_block / n).exists() and not n.startswith(_NOT_A_DISK)]


def block_device_for_path(path: str | os.PathLike[str]) -> str | None:
    """The block device (as named in /proc/diskstats, e.g. "nvme0n1p2" or "dm-0") holding `path`, or None.

    Path -> its mount (longest mount point containing it) -> the mount's device, following /dev/mapper and
    /dev/disk/by-* links; for mounts without a /dev device (overlay, btrfs subvolumes) the path's own st_dev is
    looked up in /sys/dev/block. A path that does not exist yet is resolved through its nearest existing parent.
    """
    target = Path(path).expanduser()
    while not target.exists() and target != target.parent:
        target = target.parent
    real = os.path.realpath(target)
    best: tuple[int, str] | None = None
    for part in psutil.disk_partitions(all=True):
        mount = part.mountpoint
        if real == mount or real.startswith(mount.rstrip("/") + "/"):
            if best is None or len(mount) > best[0]:
                best = (len(mount), part.device)
    if best is not None and best[1].startswith("/dev/"):
        name = os.path.basename(os.path.realpath(best[1]))
        if Path("/sys/class/block", name).exists():
            return name
    try:
        st_dev = os.stat(real).st_dev
    except OSError:
        return None
    link = Path(f"/sys/dev/block/{os.major(st_dev)}:{os.minor(st_dev)}")
    if link.exists():
        return os.path.basename(os.path.realpath(link))
    return None


class HostSampler:
    """Takes `HostSnapshot`s; rates (disk, network) and CPU % are over the time since the previous sample.

    `watch_paths` are folders whose disks are always listed in `disks` (for example a ZeRO-Infinity
    `nvme_path`), with the path -> device mapping in `watched_devices`.
    """

    def __init__(self, watch_paths: Sequence[str] = ()) -> None:
        self.watched_devices: tuple[tuple[str, str], ...] = tuple(
            (str(p), dev) for p in watch_paths if (dev := block_device_for_path(p)) is not None
        )
        self._disk_names: list[str] | None = None
        self._last: tuple[float, dict[str, tuple[int, int]], tuple[int, int]] | None = None

    def prime(self) -> None:
        """Take the first counter readings, so that the next `sample()` has rates and CPU %."""
        self.sample()

    def sample(self) -> HostSnapshot:
        now = time.time()
        per_core = psutil.cpu_percent(percpu=True)
        ram_total, ram_available, swap_total, swap_used = _memory()
        disk_counters = psutil.disk_io_counters(perdisk=True) or {}
        if self._disk_names is None:
            self._disk_names = whole_disks(list(disk_counters))
        shown = list(self._disk_names) + [d for _, d in self.watched_devices if d not in self._disk_names]
        disks_now = {n: (c.read_bytes, c.write_bytes) for n, c in disk_counters.items() if n in shown}
        net_now = _net_totals()

        first = self._last is None
        disks: list[DiskRate] = []
        read_total = write_total = net_rx = net_tx = None
        if self._last is not None:
            last_t, last_disks, last_net = self._last
            dt = max(now - last_t, 1e-6)
            for name in shown:
                if name in disks_now and name in last_disks:
                    r = max(0, disks_now[name][0] - last_disks[name][0]) / dt
                    w = max(0, disks_now[name][1] - last_disks[name][1]) / dt
                    disks.append(DiskRate(name, r, w))
            whole = [d for d in disks if d.device in self._disk_names]
            read_total = sum(d.read_bytes_per_s for d in whole)
            write_total = sum(d.write_bytes_per_s for d in whole)
            net_rx = max(0, net_now[0] - last_net[0]) / dt
            net_tx = max(0, net_now[1] - last_net[1]) / dt
        self._last = (now, disks_now, net_now)

        return HostSnapshot(
            t=now,
            # psutil's first reading compares against boot: not a measurement of now.
            cpu_percent=None if first else (sum(per_core) / len(per_core) if per_core else None),
            per_core_percent=tuple(per_core),
            ram_total_bytes=ram_total,
            ram_used_bytes=ram_total - ram_available,
            ram_available_bytes=ram_available,
            swap_total_bytes=swap_total,
            swap_used_bytes=swap_used,
            disk_read_bytes_per_s=read_total,
            disk_write_bytes_per_s=write_total,
            disks=tuple(disks),
            net_rx_bytes_per_s=net_rx,
            net_tx_bytes_per_s=net_tx,
            watched_devices=self.watched_devices,
        )


def _memory() -> tuple[int, int, int, int]:
    """(RAM total, RAM available, swap total, swap used) in bytes: one read of /proc/meminfo on Linux (psutil's
    virtual_memory + swap_memory read three files for the same figures), psutil elsewhere."""
    try:
        with open("/proc/meminfo", "rb") as handle:
            data = handle.read()
    except OSError:
        vm, swap = psutil.virtual_memory(), psutil.swap_memory()
        return vm.total, vm.available, swap.total, swap.used
    fields = {}
    for line in data.split(b"\n"):
        key, _, rest = line.partition(b":")
        if key in (b"MemTotal", b"MemAvailable", b"MemFree", b"SwapTotal", b"SwapFree"):
            fields[key] = int(rest.split()[0]) * 1024
    total = fields[b"MemTotal"]
    available = fields.get(b"MemAvailable", fields.get(b"MemFree", 0))  # MemAvailable: Linux 3.14 and later
    return total, available, fields.get(b"SwapTotal", 0), fields.get(b"SwapTotal", 0) - fields.get(b"SwapFree", 0)


def _net_totals() -> tuple[int, int]:
    """(received, sent) bytes over every interface but loopback (local rank traffic is not network)."""
    rx = tx = 0
    for name, counters in (psutil.net_io_counters(pernic=True) or {}).items():
        if name == "lo" or name.startswith("lo0"):
            continue
        rx += counters.bytes_recv
        tx += counters.bytes_sent
    return rx, tx
