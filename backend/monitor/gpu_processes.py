"""Which processes hold a GPU, by what the installed NVML really exports, and how sure that answer is.

NVML's process lists come in three ABI versions and pynvml (nvidia-ml-py 12.535+) calls only the newest:
- `nvmlDeviceGet{Compute,Graphics}RunningProcesses_v3` exists from driver 510.39, was dropped again in 535.98
  (and later 535.x), and is back from 545. pynvml's unversioned call raises `NVMLLibraryMismatchError`, a plain
  Exception, wherever it is missing: we look the functions up by name instead and take the newest there is;
- on drivers 535.43 - 535.86 the `_v3` entries are 32 bytes (`usedGpuCcProtectedMemory` appended) while pynvml
  reads 24-byte ones, so its list comes back scrambled. Those drivers are the ones exporting
  `nvmlDeviceGetConfComputeMemSizeInfo` but not yet `nvmlDeviceGetRunningProcessDetailList`; there we read the
  entries ourselves with the 32-byte layout;
- `_v2` (24 bytes) before that, and the unversioned v1 (16 bytes) on drivers older still.

Every answer is one of three: nothing there, these PIDs, or cannot tell with the reason (NVML not open, the list
refused, PIDs from another PID namespace). "Cannot tell" is never read as "nothing there".
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from traindeck.backend.monitor.snapshots import GpuProcess, GpuSnapshot

if TYPE_CHECKING:
    from traindeck.backend.monitor.nvml import NvmlLibrary

_LISTS = (("nvmlDeviceGetComputeRunningProcesses", "compute"), ("nvmlDeviceGetGraphicsRunningProcesses", "graphics"))
_NOT_AVAILABLE = (1 << 64) - 1  # NVML_VALUE_NOT_AVAILABLE in usedGpuMemory (Windows WDDM)
_INIT_PID_NAMESPACE = "pid:[4026531836]"  # the kernel's initial PID namespace (PROC_PID_INIT_INO)


class _EntryV1(ctypes.Structure):  # nvmlProcessInfo_v1_t
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


class _EntryV2(ctypes.Structure):  # nvmlProcessInfo_v2_t (and _v3 outside 535.43-535.86)
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


class _EntryV3Cc(ctypes.Structure):  # nvmlProcessInfo_v3_t as drivers 535.43-535.86 fill it
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint),
                ("usedGpuCcProtectedMemory", ctypes.c_ulonglong)]


@dataclass(frozen=True, slots=True)
class ProcessApi:
    """The process-list functions this NVML exports: their suffix and the entry layout its driver writes."""

    suffix: str  # "_v3", "_v2" or "" (v1)
    entry: type[ctypes.Structure]

    @property
    def label(self) -> str:
        return f"{self.suffix.lstrip('_') or 'v1'} ({ctypes.sizeof(self.entry)}-byte entries)"


def choose_process_api(library: NvmlLibrary) -> ProcessApi | None:
    """Decided by which functions the library exports (never by trying a call and reading its failure)."""
    base = _LISTS[0][0]
    if library.has_function(base + "_v3"):
        wide = library.has_function("nvmlDeviceGetConfComputeMemSizeInfo") and not library.has_function(
            "nvmlDeviceGetRunningProcessDetailList")
        return ProcessApi("_v3", _EntryV3Cc if wide else _EntryV2)
    if library.has_function(base + "_v2"):
        return ProcessApi("_v2", _EntryV2)
    if library.has_function(base):
        return ProcessApi("", _EntryV1)
    return None


def host_pid_namespace() -> bool | None:
    """Whether this process sees the host's PIDs, which are the ones NVML reports; None where it cannot tell."""
    try:
        return os.readlink("/proc/self/ns/pid") == _INIT_PID_NAMESPACE
    except OSError:
        return None


@dataclass(frozen=True, slots=True)
class ProcessList:
    processes: tuple[GpuProcess, ...]
    unknown: str | None  # None: complete (and empty means none)


def list_processes(library: NvmlLibrary, index: int) -> ProcessList:
    """Compute and graphics processes of one GPU merged by PID, or why the list cannot be trusted."""
    api = library.process_api
    if api is None:
        return ProcessList((), "this NVML exports no process-list function")
    found: dict[int, GpuProcess] = {}
    for function, kind in _LISTS:
        try:
            entries = _read(library, index, function + api.suffix, api.entry)
        except Exception as exc:  # noqa: BLE001 - any failure of one list is that list's answer, nothing more
            return ProcessList(tuple(found[p] for p in sorted(found)), _refusal(library, index, exc))
        for pid, used in entries:
            seen = found.get(pid)
            if seen is not None:
                both = [v for v in (seen.used_memory_bytes, used) if v is not None]
                found[pid] = GpuProcess(pid, index, max(both) if both else None, f"{seen.kind}+{kind}")
            else:
                found[pid] = GpuProcess(pid, index, used, kind)
    processes = tuple(found[pid] for pid in sorted(found))
    if processes and library.host_pid_namespace is False:
        return ProcessList(processes, "NVML lists host PIDs and traindeck runs in another PID namespace "
                                      "(a container without --pid=host): they cannot be matched to processes here")
    return ProcessList(processes, None)


def _read(library: NvmlLibrary, index: int, function: str, entry: type[ctypes.Structure]) -> list[tuple[int, int | None]]:
    """NVML's two-call protocol (ask the count, then fill an oversized array) with the driver's own layout."""
    m = library.module
    handle = library.handle(index)
    if handle is None:
        raise RuntimeError(library.device_errors[index] or "no handle")
    fn = m._nvmlGetFunctionPointer(function)
    count = ctypes.c_uint(0)
    ret = fn(handle, ctypes.byref(count), None)
    if ret == m.NVML_SUCCESS:
        return []
    if ret != m.NVML_ERROR_INSUFFICIENT_SIZE:
        raise m.NVMLError(ret)
    count.value = count.value * 2 + 5  # room for processes started between the two calls
    array = (entry * count.value)()
    ret = fn(handle, ctypes.byref(count), array)
    if ret != m.NVML_SUCCESS:
        raise m.NVMLError(ret)
    out: list[tuple[int, int | None]] = []
    for i in range(min(count.value, len(array))):
        used = int(array[i].usedGpuMemory)
        out.append((int(array[i].pid), None if used == _NOT_AVAILABLE else used))
    return out


def _refusal(library: NvmlLibrary, index: int, exc: Exception) -> str:
    m = library.module
    code = getattr(exc, "value", None)
    if code == getattr(m, "NVML_ERROR_NO_PERMISSION", None):
        if library.mig_enabled(index):
            return "NVML lists a MIG-enabled GPU's processes only to root"
        return "NVML refused the process list (no permission)"
    if code == getattr(m, "NVML_ERROR_NOT_SUPPORTED", None):
        return "this GPU does not list its processes"
    if code == getattr(m, "NVML_ERROR_GPU_IS_LOST", None):
        return "the GPU is lost"
    return f"NVML could not list the processes: {describe(exc)}"


def describe(exc: BaseException) -> str:
    try:
        return str(exc) or type(exc).__name__
    except Exception:  # noqa: BLE001 - pynvml's __str__ calls back into the library, which may be the broken part
        return type(exc).__name__


def process_sm_percent(library: NvmlLibrary, index: int, since_s: float) -> dict[int, float] | None:
    """Each PID's SM utilisation on one GPU (the mean of NVML's samples newer than `since_s`, a Unix time); a PID
    with no sample ran no kernel there (0). None where this NVML or GPU gives no per-process samples."""
    m = library.module
    handle = library.handle(index)
    fn = getattr(m, "nvmlDeviceGetProcessUtilization", None)
    if handle is None or fn is None or not library.has_function("nvmlDeviceGetProcessUtilization"):
        return None
    try:
        samples = fn(handle, max(0, int(since_s * 1_000_000)))
    except Exception as exc:  # noqa: BLE001 - NVMLError: NOT_FOUND is "no sample since", anything else is "cannot"
        return {} if getattr(exc, "value", None) == getattr(m, "NVML_ERROR_NOT_FOUND", -1) else None
    sums: dict[int, list[float]] = {}
    for sample in samples:
        total = sums.setdefault(int(sample.pid), [0.0, 0.0])
        total[0] += min(100.0, float(sample.smUtil))
        total[1] += 1
    return {pid: total / count for pid, (total, count) in sums.items()}


def with_sm_percent(processes: tuple[GpuProcess, ...], sm: dict[int, float] | None) -> tuple[GpuProcess, ...]:
    """The listed processes with their SM use (0 for a listed one without a sample; None where NVML gives none)."""
    if sm is None:
        return processes
    return tuple(replace(p, sm_percent=sm.get(p.pid, 0.0)) for p in processes)


def gpu_use_by_pid(gpus: tuple[GpuSnapshot, ...]) -> dict[int, tuple[tuple[int, ...], float | None]]:
    """The GPUs each PID is listed on (GPUs whose lists are trusted) and its SM use summed over them (None when
    no GPU of its gave a figure)."""
    use: dict[int, tuple[tuple[int, ...], float | None]] = {}
    for gpu in gpus:
        if gpu.processes_unknown is not None:
            continue
        for proc in gpu.processes:
            indices, sm = use.get(proc.pid, ((), None))
            if proc.sm_percent is not None:
                sm = (sm or 0.0) + proc.sm_percent
            use[proc.pid] = ((*indices, gpu.index), sm)
    return use


def gpu_memory_by_pid(gpus: tuple[GpuSnapshot, ...]) -> dict[int, int]:
    """Bytes of GPU memory each PID holds over the GPUs whose lists are trusted (unknown use is left out)."""
    by_pid: dict[int, int] = {}
    for gpu in gpus:
        if gpu.processes_unknown is not None:
            continue
        for proc in gpu.processes:
            if proc.used_memory_bytes is not None:
                by_pid[proc.pid] = by_pid.get(proc.pid, 0) + proc.used_memory_bytes
    return by_pid


@dataclass(frozen=True, slots=True)
class GpuHolders:
    """Which of some PIDs GPUs list: `pids` (empty: none), or None with `unknown` saying why nobody can tell."""

    pids: frozenset[int] | None
    unknown: str | None = None

    @property
    def outcome(self) -> str:
        return "unknown" if self.pids is None else ("pids" if self.pids else "none")


def holders_in(gpus: tuple[GpuSnapshot, ...], error: str | None, pids: set[int]) -> GpuHolders:
    if error is not None:
        return GpuHolders(None, error)
    found = {p.pid for g in gpus for p in g.processes if p.pid in pids}
    unknown = [f"GPU {g.index}: {g.error or g.processes_unknown}" for g in gpus if g.error or g.processes_unknown]
    if found:
        return GpuHolders(frozenset(found))  # listed is listed, whatever the other GPUs could not say
    if unknown:
        return GpuHolders(None, "; ".join(unknown))
    return GpuHolders(frozenset())
