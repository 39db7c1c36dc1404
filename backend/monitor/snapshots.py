"""What the samplers return: frozen, timestamped values. `None` means "this device or process cannot tell us".

Times are wall-clock seconds (time.time()) so that samples line up with log lines and step timestamps; byte
counts are bytes, rates are bytes per second, power is watts, temperatures are degrees Celsius.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """One process holding memory on one GPU (NVML's compute and graphics lists merged by PID)."""

    pid: int
    gpu_index: int
    used_memory_bytes: int | None  # None where the driver cannot tell (e.g. Windows WDDM)
    kind: str  # "compute", "graphics" or "compute+graphics"
    # Its share of the GPU's time running kernels (nvitop's %SM) since the previous reading, from NVML's
    # per-process utilisation samples; None where this NVML or GPU gives none.
    sm_percent: float | None = None


# nvml.h's clock-event reason bits, by nvidia-smi's names for them.
REASONS = {
    "gpu_idle": 0x1, "applications_clocks_setting": 0x2, "sw_power_cap": 0x4, "hw_slowdown": 0x8, "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20, "hw_thermal_slowdown": 0x40, "hw_power_brake_slowdown": 0x80,
    "display_clocks_setting": 0x100,
}
THROTTLING = ("sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
REASON_WORDS = {
    "sw_power_cap": "power cap", "hw_slowdown": "hardware slowdown", "sw_thermal_slowdown": "thermal (driver)",
    "hw_thermal_slowdown": "thermal (hardware)", "hw_power_brake_slowdown": "power brake",
}
BUSY_PERCENT = 30.0  # utilisation from which a link below its maximum counts: an idle link downclocks by design


@dataclass(frozen=True, slots=True)
class GpuHealth:
    """One GPU's health at one sample (`traindeck monitor --json`'s per-GPU "health")."""

    throttle: tuple[str, ...] = ()  # the active clock-event reasons (nvidia-smi's names); () when none
    throttle_known: bool = False  # False: neither reasons call answered
    pcie: dict[str, int] | None = None  # {"gen", "max_gen", "width", "max_width"}
    pcie_replays: int | None = None
    ecc: dict[str, Any] | None = None  # {"enabled", "volatile_corrected", "volatile_uncorrected", "remapped_rows"}
    # [{"xid": 79, "t": ..., "source": "nvml" | "kernel"}]: NVML's since the session began, the kernel log's since boot
    xid: tuple[dict[str, Any], ...] = field(default_factory=tuple)

    def throttled(self) -> tuple[str, ...]:
        """The reasons that slow the GPU down under load (not idle, not application clocks)."""
        return tuple(r for r in self.throttle if r in THROTTLING)

    def problems(self, utilization_percent: float | None) -> list[str]:
        """What is wrong now, in words ([] when nothing): the GPU's `utilization_percent` says whether a slow link
        matters (only while busy)."""
        found = []
        throttled = self.throttled()
        if throttled:
            found.append("throttled: " + ", ".join(REASON_WORDS.get(r, r) for r in throttled))
        link = self.pcie
        if link and (utilization_percent or 0) >= BUSY_PERCENT and (
                link["gen"] < link["max_gen"] or link["width"] < link["max_width"]):
            found.append(f"PCIe link at Gen{link['gen']} x{link['width']} of Gen{link['max_gen']} "
                         f"x{link['max_width']} while busy")
        if self.pcie_replays:
            found.append(f"{self.pcie_replays} PCIe replays")
        ecc = self.ecc or {}
        if ecc.get("volatile_uncorrected"):
            found.append(f"{ecc['volatile_uncorrected']} uncorrected ECC errors")
        rows = ecc.get("remapped_rows") or {}
        if rows.get("failure"):
            found.append("row remapping failed")
        elif rows.get("pending"):
            found.append("a row remap is pending (reset the GPU)")
        found += [f"XID {xid}" for xid in dict.fromkeys(int(event["xid"]) for event in self.xid)]
        return found

    def text(self, utilization_percent: float | None) -> str:
        """One line for a table cell: what is wrong, else "ok" with the link as it runs now."""
        problems = self.problems(utilization_percent)
        if problems:
            return "; ".join(problems)
        link = self.pcie
        if link is None:
            return "ok" if self.throttle_known else "-"
        idle = f" (GPU under {BUSY_PERCENT:.0f} % busy: a lower link is not counted)" if (
            utilization_percent or 0) < BUSY_PERCENT and (
            link["gen"] < link["max_gen"] or link["width"] < link["max_width"]) else ""
        return f"ok · Gen{link['gen']} x{link['width']} of Gen{link['max_gen']} x{link['max_width']}{idle}"



@dataclass(frozen=True, slots=True)
class GpuSnapshot:
    t: float
    index: int
    name: str | None
    uuid: str | None
    utilization_percent: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    power_w: float | None
    power_limit_w: float | None
    temperature_c: float | None
    sm_clock_mhz: int | None
    # PCIe is read on its own thread (each NVML read blocks ~20 ms), so it carries its own timestamp.
    pcie_h2d_bytes_per_s: float | None  # NVML "RX": received by the GPU
    pcie_d2h_bytes_per_s: float | None  # NVML "TX": sent by the GPU
    pcie_t: float | None
    processes: tuple[GpuProcess, ...] = ()
    # Why `processes` is not known to be the whole list (NVML closed, the list refused, PIDs of another PID
    # namespace); None: the list is complete, and empty means nothing runs there.
    processes_unknown: str | None = None
    error: str | None = None  # the GPU could not be read at all (no permission, lost): a placeholder
    pci_bus_id: str | None = None
    pcie_source: str | None = None  # "counter": NVML's cumulative byte counters; "sampled": a 20 ms window (estimate)
    health: GpuHealth | None = None  # throttling, the PCIe link, ECC, XID (gpu_health.py); None: not read


@dataclass(frozen=True, slots=True)
class GpuReadout:
    """All GPUs at one moment, or none with the reason (no driver, no library, no permission)."""

    t: float
    gpus: tuple[GpuSnapshot, ...]
    error: str | None
    versions: dict[str, str | None] = dataclasses.field(default_factory=dict)  # driver, cuda, nvml


@dataclass(frozen=True, slots=True)
class DiskRate:
    device: str  # the name in /proc/diskstats, e.g. "nvme0n1" or "nvme0n1p2"
    read_bytes_per_s: float
    write_bytes_per_s: float


@dataclass(frozen=True, slots=True)
class HostSnapshot:
    t: float
    cpu_percent: float | None  # all cores together, 0-100; None on the very first reading
    per_core_percent: tuple[float, ...]
    ram_total_bytes: int
    ram_used_bytes: int  # total - available: what new allocations cannot have (page cache not counted)
    ram_available_bytes: int  # the kernel's MemAvailable: what can be allocated before swapping or an OOM kill
    swap_total_bytes: int
    swap_used_bytes: int
    disk_read_bytes_per_s: float | None  # whole disks only (partitions and stacked devices would count twice)
    disk_write_bytes_per_s: float | None
    disks: tuple[DiskRate, ...]  # every whole disk plus the devices holding watched paths
    net_rx_bytes_per_s: float | None  # all interfaces but loopback
    net_tx_bytes_per_s: float | None
    watched_devices: tuple[tuple[str, str], ...] = ()  # (path, device) for paths such as an NVMe offload folder

    def disk(self, device: str) -> DiskRate | None:
        return next((d for d in self.disks if d.device == device), None)


@dataclass(frozen=True, slots=True)
class RunProcess:
    """One process of a run: a rank, the launcher (the tree's root) or a helper (anything else in the tree)."""

    pid: int
    ppid: int | None
    name: str
    cmdline: str  # shortened for display
    role: str  # "launcher", "rank" or "helper"
    rank: int | None
    local_rank: int | None
    cpu_percent: float | None  # of one core (a busy 4-thread process shows up to 400)
    rss_bytes: int | None
    locked_bytes: int | None  # VmLck: mlock()ed / pinned host memory where the allocator locks it
    read_bytes: int | None  # cumulative storage I/O since the process started
    write_bytes: int | None
    gpu_memory_bytes: int | None = None  # over all GPUs, from NVML's process lists
    cuda_visible_devices: str | None = None  # as found in the environment (None: not set)
    cuda_device_order: str | None = None


# The launchers traindeck starts (and their console scripts): they start the ranks and train nothing themselves.
LAUNCHER_MODULES = frozenset({"accelerate.commands.launch", "accelerate.commands.accelerate_cli",
                              "torch.distributed.run", "torch.distributed.launch", "deepspeed.launcher.runner",
                              "deepspeed.launcher.launch"})
LAUNCHER_PROGRAMS = frozenset({"accelerate", "torchrun", "deepspeed", "mpirun", "srun"})


def is_launcher_program(cmdline: str) -> bool:
    """Whether a command line runs a launcher (`python -m torch.distributed.run ...`, `accelerate launch ...`)
    rather than a training script."""
    words = cmdline.split()
    if "-m" in words[:-1]:
        return words[words.index("-m") + 1] in LAUNCHER_MODULES
    programs = [os.path.basename(w) for w in words[:2]]
    if programs and programs[0].startswith("python") and len(programs) > 1:
        return programs[1] in LAUNCHER_PROGRAMS  # a console script run by its interpreter
    return bool(programs) and programs[0] in LAUNCHER_PROGRAMS


@dataclass(frozen=True, slots=True)
class RunSnapshot:
    t: float
    root_pid: int
    processes: tuple[RunProcess, ...]
    run_id: str | None = None  # the run the tree belongs to, where the sampler was told (ResourceSampler's runs)

    @property
    def ranks(self) -> tuple[RunProcess, ...]:
        """Processes with a RANK. A run whose processes carry none counts what is not a launcher: a plain `python
        train.py` (the script and its workers), a one-process `accelerate launch` (the script, not accelerate), and
        nothing while a launcher has not started its ranks yet."""
        ranked = tuple(p for p in self.processes if p.role == "rank")
        return ranked or tuple(p for p in self.processes if not is_launcher_program(p.cmdline))

    @property
    def launchers(self) -> tuple[RunProcess, ...]:
        """The launcher processes (the tree's root when it is a launcher, and a launcher it started), never ranks."""
        return tuple(p for p in self.processes if p.role != "rank" and is_launcher_program(p.cmdline))

    @property
    def launcher_rss_bytes(self) -> int | None:
        """RSS of the launcher processes, said beside the ranks' (None: the run has no launcher process)."""
        return sum(p.rss_bytes or 0 for p in self.launchers) if self.launchers else None

    @property
    def ranks_rss_bytes(self) -> int:
        return sum(p.rss_bytes or 0 for p in self.ranks)

    @property
    def max_rank_rss_bytes(self) -> int | None:
        return max((p.rss_bytes for p in self.ranks if p.rss_bytes is not None), default=None)

    @property
    def ranks_cpu_percent(self) -> float:
        return sum(p.cpu_percent or 0.0 for p in self.ranks)

    @property
    def ranks_locked_bytes(self) -> int | None:
        known = [p.locked_bytes for p in self.ranks if p.locked_bytes is not None]
        return sum(known) if known else None

    @property
    def ranks_gpu_memory_bytes(self) -> int | None:
        known = [p.gpu_memory_bytes for p in self.ranks if p.gpu_memory_bytes is not None]
        return sum(known) if known else None

    @property
    def tree_rss_bytes(self) -> int:
        return sum(p.rss_bytes or 0 for p in self.processes)


@dataclass(frozen=True, slots=True)
class MachineProcess:
    """One process of the whole machine, as htop lists it (see machine.py)."""

    pid: int
    ppid: int
    user: str
    name: str
    cmdline: str  # one line, shortened for display
    cpu_percent: float | None  # of one core (a busy 4-thread process shows up to 400); None at its first snapshot
    rss_bytes: int | None  # None: unknown (a zombie, or a process that is exiting)
    gpu_memory_bytes: int | None  # over all GPUs, from NVML's process lists; None: holds none, or NVML cannot tell
    run_id: str | None  # the traindeck run it belongs to (TRAINDECK_RUN_ID in its environment)
    command: str = ""  # the program's basename and its arguments (what a table shows); "" : show cmdline
    zombie: bool = False  # ended, not yet reaped by its parent: it holds no memory (rss_bytes is None)
    uid: int | None = None  # its real user id (None: unknown)
    gpu_indices: tuple[int, ...] = ()  # the GPUs whose NVML process lists hold it
    gpu_sm_percent: float | None = None  # its SM use summed over those GPUs (100 = one GPU); None: unknown
    started_at: float | None = None  # Unix time it started (None: unknown)


@dataclass(frozen=True, slots=True)
class MachineSnapshot:
    """Every user-space process at one moment, and what the snapshot cost (`took_s`, wall seconds)."""

    t: float
    processes: tuple[MachineProcess, ...]
    cpu_count: int
    gpu_memory_known: bool  # NVML's process lists were read: a None GPU memory means "holds none"
    took_s: float


@dataclass(frozen=True, slots=True)
class ResourceSample:
    """Host, GPUs and (when a run is watched) its processes, taken together."""

    t: float
    host: HostSnapshot
    gpus: tuple[GpuSnapshot, ...]
    gpu_error: str | None
    run: RunSnapshot | None = None
    run_gpus: tuple[str, ...] | None = None  # UUIDs of the GPUs the run uses; None: cannot tell (all count)
    gpu_versions: dict[str, str | None] = dataclasses.field(default_factory=dict)
    machine: MachineSnapshot | None = None  # the whole machine's processes, in the samples a viewer asked them for
    runs: tuple[RunSnapshot, ...] = ()  # every live run's processes, when the sampler was given its runs (run_id set)

    def to_json_dict(self) -> dict[str, Any]:
        """The `traindeck monitor --json` shape: host, gpus (possibly empty), gpu_error, and processes with a run."""
        out: dict[str, Any] = {
            "t": self.t,
            "host": dataclasses.asdict(self.host),
            "gpus": [dataclasses.asdict(g) for g in self.gpus],
            "gpu_error": self.gpu_error,
            "gpu_versions": self.gpu_versions,
            "run_gpus": None if self.run_gpus is None else list(self.run_gpus),
        }
        if self.run is not None:
            out["root_pid"] = self.run.root_pid
            out["processes"] = [dataclasses.asdict(p) for p in self.run.processes]
        if self.runs:
            out["runs"] = [{"run_id": r.run_id, "root_pid": r.root_pid,
                            "processes": [dataclasses.asdict(p) for p in r.processes]} for r in self.runs]
        if self.machine is not None:
            out["machine_processes"] = [dataclasses.asdict(p) for p in self.machine.processes]
        return out
