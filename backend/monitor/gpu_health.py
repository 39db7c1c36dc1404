"""Whether a GPU is slowed or failing for reasons of its own, read from the NVML session the sampler keeps: the
clock-event (throttle) reasons, the PCIe link's generation and width against its maximum, the PCIe replay counter,
ECC error counts and remapped rows, and XID errors: NVML's event set ("source": "nvml") and the driver's lines in
the kernel log where it is readable ("source": "kernel", kernel_log.py; those since boot, each at its own time).

A user with a throttled or downgraded GPU sees only "slow": nvtop shows the link's current generation, not its
maximum; XID errors reach no common tool. What is flagged:
- throttling: the reasons that lower clocks under load (power cap, thermal, hardware slowdown, power brake); the GPU
  being idle, application clocks, sync boost and display clocks are not throttling;
- a PCIe link below its maximum generation or width, only while the GPU is busy (an idle link downclocks to Gen1
  by design: the dual RTX A5000 recording shows Gen1 of Gen4 at rest);
- replays, uncorrected ECC errors, rows pending remap or failed, any XID.
Drivers before R535 only have the older "throttle reasons" call; both are asked for, the new one first. A call
this GPU or driver does not support gives None for its part, never an error.
"""

from __future__ import annotations

import ctypes
import time
from typing import Any

from traindeck.backend.monitor import kernel_log
from traindeck.backend.monitor.nvml import NvmlLibrary
from traindeck.backend.monitor.snapshots import BUSY_PERCENT, REASON_WORDS, REASONS, THROTTLING, GpuHealth

SLOW_EVERY_S = 10.0  # ECC counts and remapped rows change rarely: read this often
XID_CRITICAL = 0x8  # nvmlEventTypeXidCriticalError


class HealthReader:
    """Reads each GPU's health from an open NvmlLibrary; `start()` after the library opens, `stop()` before it
    closes (the XID event set and the kernel log's reader live between the two). `kernel_log_path` is the kernel
    log read for XID lines (kernel_log.KMSG when None)."""

    def __init__(self, library: NvmlLibrary, kernel_log_path: str | None = None) -> None:
        self.library = library
        self.kernel_log_path = kernel_log_path
        self._event_set: Any = None
        self._kernel: kernel_log.KernelLogTail | None = None
        self._bus_ids: dict[int, str | None] = {}
        self._xids: dict[int, list[dict[str, Any]]] = {}
        self._slow: dict[int, tuple[float, int | None, dict[str, Any] | None]] = {}
        self._max_link: dict[int, tuple[int | None, int | None]] = {}

    def start(self) -> None:
        lib = self.library
        self._xids = {i: [] for i in range(lib.device_count)}
        self._slow, self._max_link = {}, {}
        self._bus_ids = {i: lib.pci_bus_id(i) for i in range(lib.device_count)}
        self._kernel = kernel_log.KernelLogTail(self.kernel_log_path or kernel_log.KMSG)
        event_set = lib.call("nvmlEventSetCreate")
        if event_set is None:
            return
        register = getattr(lib.module, "nvmlDeviceRegisterEvents", None)
        registered = False
        for index in range(lib.device_count):
            handle = lib.handle(index)
            if handle is None or register is None:
                continue
            try:
                register(handle, XID_CRITICAL, event_set)
                registered = True
            except Exception:  # noqa: BLE001 - NVMLError: this GPU or driver reports no XID events
                continue
        self._event_set = event_set if registered else None
        if not registered:
            lib.call("nvmlEventSetFree", event_set)

    def stop(self) -> None:
        if self._kernel is not None:
            self._kernel.close()
            self._kernel = None
        if self._event_set is not None:
            self.library.call("nvmlEventSetFree", self._event_set)
            self._event_set = None

    def read(self, index: int, now: float | None = None) -> GpuHealth:
        lib = self.library
        now = time.time() if now is None else now
        self._drain_xids(now)
        mask = lib.device_call(index, "nvmlDeviceGetCurrentClocksEventReasons")
        if mask is None:
            mask = lib.device_call(index, "nvmlDeviceGetCurrentClocksThrottleReasons")
        throttle = () if mask is None else tuple(name for name, bit in REASONS.items() if int(mask) & bit)
        if index not in self._max_link:
            self._max_link[index] = (lib.device_call(index, "nvmlDeviceGetMaxPcieLinkGeneration"),
                                     lib.device_call(index, "nvmlDeviceGetMaxPcieLinkWidth"))
        max_gen, max_width = self._max_link[index]
        gen = lib.device_call(index, "nvmlDeviceGetCurrPcieLinkGeneration")
        width = lib.device_call(index, "nvmlDeviceGetCurrPcieLinkWidth")
        pcie = None
        if gen is not None and width is not None and max_gen is not None and max_width is not None:
            pcie = {"gen": int(gen), "max_gen": int(max_gen), "width": int(width), "max_width": int(max_width)}
        slow = self._slow.get(index)
        if slow is None or now - slow[0] >= SLOW_EVERY_S:
            slow = (now, lib.device_call(index, "nvmlDeviceGetPcieReplayCounter"), self._ecc(index))
            self._slow[index] = slow
        return GpuHealth(throttle=throttle, throttle_known=mask is not None, pcie=pcie,
                         pcie_replays=None if slow[1] is None else int(slow[1]), ecc=slow[2],
                         xid=tuple(self._xids.get(index, ())))

    def _ecc(self, index: int) -> dict[str, Any] | None:
        lib = self.library
        mode = lib.device_call(index, "nvmlDeviceGetEccMode")
        rows = lib.device_call(index, "nvmlDeviceGetRemappedRows")
        if mode is None and rows is None:
            return None
        enabled = bool(mode[0]) if mode is not None else None
        ecc: dict[str, Any] = {"enabled": enabled, "volatile_corrected": None, "volatile_uncorrected": None,
                               "remapped_rows": None}
        if enabled:
            module = lib.module
            for key, kind in (("volatile_corrected", "NVML_MEMORY_ERROR_TYPE_CORRECTED"),
                              ("volatile_uncorrected", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED")):
                value = lib.device_call(index, "nvmlDeviceGetTotalEccErrors", getattr(module, kind, 0),
                                        getattr(module, "NVML_VOLATILE_ECC", 0))
                ecc[key] = None if value is None else int(value)
        if rows is not None:
            ecc["remapped_rows"] = {"corrected": int(rows[0]), "uncorrected": int(rows[1]),
                                    "pending": bool(rows[2]), "failure": bool(rows[3])}
        return ecc

    def _drain_xids(self, now: float) -> None:
        if self._kernel is not None:
            records = self._kernel.read_new()
            for event in kernel_log.xid_events(records or [], self._bus_ids, now):
                if isinstance(event["gpu"], int):  # a bus NVML does not list has no GPU here to show it on
                    self._xids.setdefault(event["gpu"], []).append(
                        {"xid": float(event["xid"]), "t": event["t"], "source": "kernel"})
        if self._event_set is None:
            return
        lib = self.library
        handles = {i: lib.handle(i) for i in range(lib.device_count)}
        addresses = {ctypes.cast(h, ctypes.c_void_p).value: i for i, h in handles.items() if h is not None}
        for _ in range(64):  # what arrived since the last sample, never an endless loop
            data = lib.call("nvmlEventSetWait_v2", self._event_set, 0)
            if data is None:
                return
            index = addresses.get(ctypes.cast(data.device, ctypes.c_void_p).value)
            if index is not None and int(data.eventType) & XID_CRITICAL:
                self._xids.setdefault(index, []).append({"xid": float(data.eventData), "t": now, "source": "nvml"})




def health_during(changes: list[tuple[int, float, dict[str, Any]]], windows: list[tuple[float, float]],
                  min_share: float = 0.05) -> list[str]:
    """What slowed the run's GPUs during the given time windows (its steps: start, end), in words: each GPU
    throttled for at least `min_share` of the windows' time (and why), a PCIe link below its maximum while busy,
    replays that grew, XIDs. `changes` are read_gpu_health's rows (a row holds until the GPU's next one)."""
    total = sum(max(0.0, end - start) for start, end in windows)
    by_gpu: dict[int, list[tuple[float, dict[str, Any]]]] = {}
    for gpu, t, health in changes:
        by_gpu.setdefault(gpu, []).append((t, health))
    said: list[str] = []
    for gpu, rows in sorted(by_gpu.items()):
        spans = [(t, rows[i + 1][0] if i + 1 < len(rows) else float("inf"), h) for i, (t, h) in enumerate(rows)]
        if total > 0:
            throttled = 0.0
            reasons: set[str] = set()
            for t0, t1, health in spans:
                active = [r for r in health.get("throttle") or () if r in THROTTLING]
                if not active:
                    continue
                reasons.update(active)
                throttled += sum(max(0.0, min(t1, end) - max(t0, start)) for start, end in windows)
            if throttled / total >= min_share:
                words = ", ".join(REASON_WORDS.get(r, r) for r in sorted(reasons))
                said.append(f"GPU {gpu} was throttled ({words}) for {throttled / total:.0%} of the timed steps")
        slow = [h["pcie"] for _t0, _t1, h in spans if h.get("pcie") and (h.get("util") or 0) >= BUSY_PERCENT
                and (h["pcie"]["gen"] < h["pcie"]["max_gen"] or h["pcie"]["width"] < h["pcie"]["max_width"])]
        if slow:
            link = slow[-1]
            said.append(f"GPU {gpu}'s PCIe link ran at Gen{link['gen']} x{link['width']} of Gen{link['max_gen']} "
                        f"x{link['max_width']} while busy")
        replays = [int(h["pcie_replays"]) for _t, h in rows if h.get("pcie_replays") is not None]
        if replays and replays[-1] > replays[0]:
            said.append(f"GPU {gpu} counted {replays[-1] - replays[0]} PCIe replays during the run")
        # The kernel log's XIDs reach back to boot: only those from the recording's (or the steps') start count.
        since = min([rows[0][0], *(start for start, _end in windows)])
        xids = sorted({int(e["xid"]) for _t, h in rows for e in h.get("xid") or () if float(e["t"]) >= since})
        if xids:
            said.append(f"GPU {gpu} reported XID {', '.join(map(str, xids))}")
    return said


__all__ = ["HealthReader", "health_during"]
