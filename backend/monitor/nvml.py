"""GPUs through NVML (nvidia-ml-py's `pynvml`), imported only when a sampler opens.

`NvmlLibrary` is the only code that calls pynvml: tests hand it a stand-in module with the same functions and
structures, and everything above it (value conversion, the PCIe thread, process mapping) runs for real.

Rules taken from nvitop: a metric the device cannot report (NVML says NotSupported, NoPermission, a missing
function in an old driver...) is `None`, never an exception; no driver or no library at all gives an empty GPU
list with the reason, and the host and process samplers carry on without GPUs.
"""

from __future__ import annotations

import importlib
import threading
import time
from types import ModuleType
from typing import Any

from traindeck.backend.monitor.loop import Collector
from traindeck.backend.monitor.snapshots import GpuProcess, GpuReadout, GpuSnapshot

# NVML reports PCIe throughput in KB/s; nvidia-smi prints the same number, nvitop reads it as KiB/s.
_PCIE_UNIT_BYTES = 1024


class NvmlLibrary:
    """NVML opened once, with every call returning `None` instead of raising for a metric it cannot read.

    `module` is the `pynvml` module itself (imported on `open()` when not given) or a stand-in for tests.
    """

    def __init__(self, module: ModuleType | Any | None = None) -> None:
        self._module: Any = module
        self._handles: list[Any] = []
        self._open = False
        self._memory_v2: bool | None = None  # whether nvmlDeviceGetMemoryInfo_v2 works here; learned on first use
        self.error: str | None = None

    @property
    def module(self) -> Any:
        return self._module

    def open(self) -> str | None:
        """Initialise NVML and find the devices; returns None, or why GPUs cannot be read (also kept in `error`)."""
        if self._open:
            return None
        if self._module is None:
            try:
                self._module = importlib.import_module("pynvml")
            except ImportError as exc:
                self.error = f"nvidia-ml-py is not installed ({exc})"
                return self.error
        m = self._module
        try:
            m.nvmlInit()
        except m.NVMLError as exc:
            self.error = _open_failure(m, exc)
            return self.error
        self._open = True
        try:
            count = m.nvmlDeviceGetCount()
            self._handles = [m.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except m.NVMLError as exc:
            self.close()
            self.error = f"NVML could not list the GPUs: {_describe(exc)}"
            return self.error
        self.error = None
        return None

    def close(self) -> None:
        if not self._open:
            return
        self._open = False
        self._handles = []
        try:
            self._module.nvmlShutdown()
        except self._module.NVMLError:
            pass  # shutting down a driver that went away: nothing left to release

    @property
    def device_count(self) -> int:
        return len(self._handles)

    def call(self, function: str, *args: Any) -> Any | None:
        """`pynvml.<function>(*args)`, or None where NVML (or this version of it) cannot answer."""
        m = self._module
        fn = getattr(m, function, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except m.NVMLError:
            return None

    def device_call(self, index: int, function: str, *args: Any) -> Any | None:
        return self.call(function, self._handles[index], *args)

    # Typed readers: the conversions from NVML's units live here and nowhere else.

    def name(self, index: int) -> str | None:
        return _text(self.device_call(index, "nvmlDeviceGetName"))

    def uuid(self, index: int) -> str | None:
        return _text(self.device_call(index, "nvmlDeviceGetUUID"))

    def utilization_percent(self, index: int) -> float | None:
        rates = self.device_call(index, "nvmlDeviceGetUtilizationRates")  # nvmlUtilization_t {gpu, memory}
        return None if rates is None else float(rates.gpu)

    def memory(self, index: int) -> tuple[int, int] | None:
        """(used, total) bytes. Prefers nvmlMemory_v2_t, whose `used` leaves out the driver's reserved memory
        (what nvidia-smi shows since R510); falls back to nvmlMemory_t where the driver lacks v2."""
        version = getattr(self._module, "nvmlMemory_v2", None)  # absent from nvidia-ml-py before 11.510
        if self._memory_v2 is not False and version:
            info = self.device_call(index, "nvmlDeviceGetMemoryInfo", version)
            if info is not None:
                self._memory_v2 = True
                return int(info.used), int(info.total)
            if self._memory_v2 is None:
                self._memory_v2 = False
        info = self.device_call(index, "nvmlDeviceGetMemoryInfo")
        return None if info is None else (int(info.used), int(info.total))

    def power_w(self, index: int) -> float | None:
        milliwatts = self.device_call(index, "nvmlDeviceGetPowerUsage")
        return None if milliwatts is None else milliwatts / 1000.0

    def power_limit_w(self, index: int) -> float | None:
        milliwatts = self.device_call(index, "nvmlDeviceGetEnforcedPowerLimit")
        if milliwatts is None:
            milliwatts = self.device_call(index, "nvmlDeviceGetPowerManagementLimit")
        return None if milliwatts is None else milliwatts / 1000.0

    def temperature_c(self, index: int) -> float | None:
        value = self.device_call(index, "nvmlDeviceGetTemperature", self._module.NVML_TEMPERATURE_GPU)
        return None if value is None else float(value)

    def sm_clock_mhz(self, index: int) -> int | None:
        value = self.device_call(index, "nvmlDeviceGetClockInfo", self._module.NVML_CLOCK_SM)
        return None if value is None else int(value)

    def pcie_bytes_per_s(self, index: int) -> tuple[float | None, float | None]:
        """(host->device, device->host). Each NVML read blocks ~20 ms: call this off the sampling thread."""
        m = self._module
        rx = self.device_call(index, "nvmlDeviceGetPcieThroughput", m.NVML_PCIE_UTIL_RX_BYTES)
        tx = self.device_call(index, "nvmlDeviceGetPcieThroughput", m.NVML_PCIE_UTIL_TX_BYTES)
        return (
            None if rx is None else float(rx) * _PCIE_UNIT_BYTES,
            None if tx is None else float(tx) * _PCIE_UNIT_BYTES,
        )

    def processes(self, index: int) -> tuple[GpuProcess, ...]:
        """Compute and graphics processes merged by PID (one process in both lists is counted once)."""
        found: dict[int, GpuProcess] = {}
        for function, kind in (
            ("nvmlDeviceGetComputeRunningProcesses", "compute"),
            ("nvmlDeviceGetGraphicsRunningProcesses", "graphics"),
        ):
            for info in self.device_call(index, function) or ():  # nvmlProcessInfo_t {pid, usedGpuMemory, ...}
                pid = int(info.pid)
                used = info.usedGpuMemory
                used = None if used is None else int(used)
                seen = found.get(pid)
                if seen is not None:
                    both = [v for v in (seen.used_memory_bytes, used) if v is not None]
                    found[pid] = GpuProcess(pid, index, max(both) if both else None, f"{seen.kind}+{kind}")
                else:
                    found[pid] = GpuProcess(pid, index, used, kind)
        return tuple(found[pid] for pid in sorted(found))


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _describe(exc: Exception) -> str:
    try:
        return str(exc)
    except Exception:  # pynvml's __str__ calls back into the library, which may be the broken part
        return type(exc).__name__


def _open_failure(m: Any, exc: Exception) -> str:
    """A sentence for the person at the screen: why there are no GPUs here."""
    kind = type(exc).__name__
    if kind == "NVMLError_LibraryNotFound":
        return "no NVIDIA driver: the NVML library (libnvidia-ml.so.1) was not found"
    if kind == "NVMLError_DriverNotLoaded":
        return "the NVIDIA driver is installed but not loaded"
    if kind == "NVMLError_NoPermission":
        return "no permission to read the NVIDIA driver (NVML)"
    if kind == "NVMLError_LibRmVersionMismatch":
        return "the NVIDIA driver and its NVML library differ in version (reboot after a driver update)"
    return f"NVML could not start: {_describe(exc)}"


class _PcieCollector(Collector):
    """Reads every GPU's PCIe throughput on its own thread and keeps the latest (t, h2d, d2h) per GPU."""

    def __init__(self, library: NvmlLibrary, interval_s: float) -> None:
        super().__init__(interval_s, name="gpu-pcie")
        self._library = library
        self._lock = threading.Lock()
        self._latest: dict[int, tuple[float, float | None, float | None]] = {}
        self._first = threading.Event()

    def _prime(self) -> None:
        self._tick()

    def _tick(self) -> None:
        for index in range(self._library.device_count):
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
    """Samples every GPU on demand; PCIe throughput comes from a background reader started with the sampler.

    Use as `with GpuSampler() as gpus: readout = gpus.sample()` or `start()` / `stop()`. Without a driver,
    `sample()` returns no GPUs and the reason, and costs nothing.
    """

    def __init__(self, library: NvmlLibrary | None = None, *, pcie_interval_s: float = 1.0) -> None:
        self.library = library or NvmlLibrary()
        self._pcie_interval_s = pcie_interval_s
        self._pcie: _PcieCollector | None = None
        self._static: list[tuple[str | None, str | None]] = []
        self._started = False

    @property
    def error(self) -> str | None:
        return self.library.error

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        if self.library.open() is not None:
            return
        self._static = [(self.library.name(i), self.library.uuid(i)) for i in range(self.library.device_count)]
        if self.library.device_count:
            self._pcie = _PcieCollector(self.library, self._pcie_interval_s)
            self._pcie.start()

    def stop(self) -> None:
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
        """Block until the first PCIe reading is in (for one-shot use, such as `traindeck monitor --once`)."""
        return self._pcie is not None and self._pcie.wait_first(timeout)

    def sample(self) -> GpuReadout:
        now = time.time()
        if not self._started:
            self.start()
        if self.library.error is not None:
            return GpuReadout(now, (), self.library.error)
        lib = self.library
        gpus = []
        for index in range(lib.device_count):
            memory = lib.memory(index)
            pcie = self._pcie.latest(index) if self._pcie is not None else None
            name, uuid = self._static[index]
            gpus.append(
                GpuSnapshot(
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
                    processes=lib.processes(index),
                )
            )
        return GpuReadout(now, tuple(gpus), None)


def gpu_memory_by_pid(gpus: tuple[GpuSnapshot, ...]) -> dict[int, int]:
    """Bytes of GPU memory each PID holds, over all GPUs (PIDs whose use NVML cannot tell are left out)."""
    by_pid: dict[int, int] = {}
    for gpu in gpus:
        for proc in gpu.processes:
            if proc.used_memory_bytes is not None:
                by_pid[proc.pid] = by_pid.get(proc.pid, 0) + proc.used_memory_bytes
    return by_pid
