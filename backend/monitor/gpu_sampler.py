"""`GpuSampler`: every GPU's readings, one placeholder per GPU that cannot be read, PCIe by the best means there is.

PCIe bytes: where a GPU keeps NVML's cumulative PCIe byte counters (NVML_FI_DEV_PCIE_COUNT_{RX,TX}_BYTES) the
rate is the counters' difference over the sample interval, so bytes per step are exact. Elsewhere NVML only
samples a ~20 ms window (`nvmlDeviceGetPcieThroughput`, blocking that long): read on its own thread at a
random offset within each interval, so periodic training steps do not alias with the sampling loop, and marked
"sampled" (an estimate) in every snapshot.
"""

from __future__ import annotations

import logging
import random
import threading
import time

from traindeck.backend.monitor.gpu_health import HealthReader
from traindeck.backend.monitor.gpu_processes import (
    describe,
    list_processes,
    process_sm_percent,
    with_sm_percent,
)
from traindeck.backend.monitor.loop import Collector
from traindeck.backend.monitor.nvml import NvmlLibrary
from traindeck.backend.monitor.snapshots import GpuHealth, GpuReadout, GpuSnapshot

logger = logging.getLogger(__name__)
SM_WINDOW_S = 2.0  # a GPU's first per-process SM reading covers this much of the past


class _PcieCollector(Collector):
    """Reads the sampled GPUs' PCIe throughput on its own thread, off the sampling loop's phase."""

    def __init__(self, library: NvmlLibrary, indexes: list[int], interval_s: float) -> None:
        super().__init__(interval_s, name="gpu-pcie")
        self._library = library
        self._indexes = indexes
        self._lock = threading.Lock()
        self._latest: dict[int, tuple[float, float | None, float | None]] = {}
        self._first = threading.Event()
        self._random = random.Random()

    def _prime(self) -> None:
        self._read()

    def _tick(self) -> None:
        # A random point within the interval: a fixed phase would keep hitting the same part of a periodic step.
        if self._stop_event.wait(self._random.uniform(0.0, self.interval_s * 0.5)):
            return
        self._read()

    def _read(self) -> None:
        for index in self._indexes:
            h2d, d2h = self._library.pcie_bytes_per_s(index)
            with self._lock:
                self._latest[index] = (time.time(), h2d, d2h)
        self._first.set()

    def latest(self, index: int) -> tuple[float, float | None, float | None] | None:
        with self._lock:
            return self._latest.get(index)

    def wait_first(self, timeout: float) -> bool:
        return self._first.wait(timeout)


class GpuSampler:
    """Samples every GPU on demand. Use as `with GpuSampler() as gpus: readout = gpus.sample()` or
    `start()` / `stop()`. Without a driver `sample()` returns no GPUs and the reason, and tries NVML again
    now and then (the library's `retry_every_s`)."""

    def __init__(self, library: NvmlLibrary | None = None, *, pcie_interval_s: float = 1.0) -> None:
        self.library = library or NvmlLibrary()
        self._pcie_interval_s = pcie_interval_s
        self._pcie: _PcieCollector | None = None
        self._static: list[tuple[str | None, str | None, str | None]] = []
        self._counters: dict[int, tuple[float, int, int]] = {}  # index -> (t, h2d bytes, d2h bytes) last read
        self._started = False
        self._health: HealthReader | None = None
        self._sm_since: dict[int, float] = {}  # index -> when its per-process SM use was last read

    @property
    def error(self) -> str | None:
        return self.library.error

    def start(self) -> None:
        self._started = True
        if self.library.is_open or self.library.open() is not None:
            return
        lib = self.library
        self._static = [(lib.name(i), lib.uuid(i), lib.pci_bus_id(i)) for i in range(lib.device_count)]
        self._health = HealthReader(lib)
        self._health.start()
        self._counters = {}
        sampled = []
        for index in range(lib.device_count):
            counters = lib.pcie_counters(index)
            if counters is None:
                sampled.append(index)
            else:
                self._counters[index] = (time.time(), *counters)
        if sampled and self._pcie is None:
            self._pcie = _PcieCollector(lib, sampled, self._pcie_interval_s)
            self._pcie.start()

    def stop(self) -> None:
        if self._health is not None:
            self._health.stop()
            self._health = None
        if self._pcie is not None:
            self._pcie.stop()
            self._pcie = None
        self.library.close()
        self._started = False

    def __enter__(self) -> GpuSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait_for_pcie(self, timeout: float = 1.0) -> bool:
        """Block until the first sampled PCIe reading is in (for one-shot use, such as `traindeck monitor --once`)."""
        if self._pcie is None:
            return bool(self._counters)
        return self._pcie.wait_first(timeout)

    def sample(self) -> GpuReadout:
        now = time.time()
        if not self.library.is_open:
            self.start()  # retried: the driver may have loaded since
        lib = self.library
        if not lib.is_open:
            return GpuReadout(now, (), lib.error or "NVML is not open")
        gpus = []
        for index in range(lib.device_count):
            try:
                gpu = self._read(index, now)
            except Exception as exc:  # noqa: BLE001 - one GPU's failure is that GPU's placeholder, nothing more
                logger.warning("GPU %d could not be read", index, exc_info=True)
                gpu = self._placeholder(index, now, f"could not be read: {describe(exc)}")
            gpus.append(gpu)
        return GpuReadout(now, tuple(gpus), None, dict(lib.versions))

    def _placeholder(self, index: int, now: float, error: str) -> GpuSnapshot:
        name, uuid, bus = self._static[index] if index < len(self._static) else (None, None, None)
        return GpuSnapshot(
            t=now, index=index, name=name, uuid=uuid, utilization_percent=None, memory_used_bytes=None,
            memory_total_bytes=None, power_w=None, power_limit_w=None, temperature_c=None, sm_clock_mhz=None,
            pcie_h2d_bytes_per_s=None, pcie_d2h_bytes_per_s=None, pcie_t=None, processes=(),
            processes_unknown=error, error=error, pci_bus_id=bus,
        )

    def _read(self, index: int, now: float) -> GpuSnapshot:
        lib = self.library
        if lib.device_errors[index] is not None:
            return self._placeholder(index, now, lib.device_errors[index] or "")
        memory = lib.memory(index)
        pcie, source = self._pcie_reading(index)
        listed = list_processes(lib, index)
        since = self._sm_since.get(index, now - SM_WINDOW_S)
        processes = with_sm_percent(listed.processes, process_sm_percent(lib, index, since))
        self._sm_since[index] = now
        name, uuid, bus = self._static[index]
        if lib.device_errors[index] is not None:  # lost during this very reading (Xid 79)
            return self._placeholder(index, now, lib.device_errors[index] or "")
        return GpuSnapshot(
            t=now,
            index=index,
            name=name,
            uuid=uuid,
            utilization_percent=lib.utilization_percent(index),
            memory_used_bytes=None if memory is None else memory[0],
            memory_total_bytes=None if memory is None else memory[1],
            power_w=lib.power_w(index),
            power_limit_w=lib.power_limit_w(index),
            temperature_c=lib.temperature_c(index),
            sm_clock_mhz=lib.sm_clock_mhz(index),
            pcie_h2d_bytes_per_s=None if pcie is None else pcie[1],
            pcie_d2h_bytes_per_s=None if pcie is None else pcie[2],
            pcie_t=None if pcie is None else pcie[0],
            processes=processes,
            processes_unknown=listed.unknown,
            pci_bus_id=bus,
            pcie_source=source,
            health=self._read_health(index, now),
        )

    def _read_health(self, index: int, now: float) -> GpuHealth | None:
        if self._health is None:
            return None
        try:
            return self._health.read(index, now)
        except Exception:  # noqa: BLE001 - health is an extra: a failure of it never costs the GPU's sample
            logger.warning("GPU %d's health could not be read", index, exc_info=True)
            return None

    def _pcie_reading(self, index: int) -> tuple[tuple[float, float | None, float | None] | None, str | None]:
        previous = self._counters.get(index)
        if previous is None:
            latest = self._pcie.latest(index) if self._pcie is not None else None
            return latest, "sampled" if latest is not None else None
        counters = self.library.pcie_counters(index)
        if counters is None:
            return None, "counter"
        t = time.time()
        self._counters[index] = (t, *counters)
        dt = t - previous[0]
        if dt <= 0:
            return None, "counter"
        return (t, max(0, counters[0] - previous[1]) / dt, max(0, counters[1] - previous[2]) / dt), "counter"
