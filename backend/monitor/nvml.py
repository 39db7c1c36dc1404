"""GPUs through NVML (nvidia-ml-py's `pynvml`), imported only when a sampler opens.

`NvmlLibrary` is the only code that calls pynvml. Tests give it a private copy of the real pynvml module whose
C library is a fake driver (tests/fixtures/nvml/fake_driver.py): pynvml's wrappers, struct layouts and error
handling all run for real.

Rules (from reading nvitop, gpustat and pynvml): a metric the device cannot report is `None`, never an exception,
and no exception of any kind (pynvml also raises plain Exceptions, such as NVMLLibraryMismatchError) leaves a call;
versioned functions are chosen by whether the library exports them; each GPU has its own handle and error, so one
GPU this job may not open (Slurm's cgroup isolation) or one that fell off the bus does not hide the others; a
failed start is retried (a dashboard opened before the driver loads sees the GPUs once it does).
"""

from __future__ import annotations

import importlib
import time
from types import ModuleType
from typing import Any

from traindeck.backend.monitor.gpu_processes import (
    GpuHolders,
    ProcessApi,
    choose_process_api,
    describe,
    holders_in,
    host_pid_namespace,
    list_processes,
)
from traindeck.backend.monitor.snapshots import GpuSnapshot

# NVML reports PCIe throughput in KB/s; nvidia-smi prints the same number, nvitop reads it as KiB/s.
_PCIE_UNIT_BYTES = 1024
_NO_DRIVER = ("NVMLError_LibraryNotFound", "NVMLError_DriverNotLoaded")


class NvmlLibrary:
    """One NVML session: devices opened one by one, every call returning `None` instead of raising.

    `module` is the `pynvml` module itself (imported on `open()` when not given) or a copy of it over a fake
    driver in tests. `host_pid_namespace`: whether NVML's PIDs are ours (None: find out from /proc).
    `retry_every_s`: how soon `open()` tries again after NVML could not start.
    """

    def __init__(
        self,
        module: ModuleType | Any | None = None,
        *,
        host_pid_namespace: bool | None = None,
        retry_every_s: float = 5.0,
    ) -> None:
        self._module: Any = module
        self._handles: list[Any | None] = []
        self.device_errors: list[str | None] = []
        self._open = False
        self._failed_at: float | None = None
        self._failure_kind: str | None = None
        self._retry_every_s = retry_every_s
        self._memory_v2 = False
        self._temperature_v = False
        self._host_pid_namespace = host_pid_namespace
        self.process_api: ProcessApi | None = None
        self.versions: dict[str, str | None] = {}
        self.error: str | None = None

    @property
    def module(self) -> Any:
        return self._module

    @property
    def is_open(self) -> bool:
        return self._open

    @property
    def host_pid_namespace(self) -> bool | None:
        if self._host_pid_namespace is None:
            self._host_pid_namespace = host_pid_namespace()
        return self._host_pid_namespace

    def open(self) -> str | None:
        """Initialise NVML and open each GPU; returns None, or why no GPU can be read (also kept in `error`).
        After a failure it tries again once `retry_every_s` has passed; sooner it returns the same reason."""
        if self._open:
            return None
        if self._failed_at is not None and time.monotonic() - self._failed_at < self._retry_every_s:
            return self.error
        if self._module is None:
            try:
                self._module = importlib.import_module("pynvml")
            except ImportError as exc:
                return self._failed(f"nvidia-ml-py is not installed ({exc})", "ImportError")
        m = self._module
        try:
            m.nvmlInit()
        except Exception as exc:  # noqa: BLE001 - NVMLError, or anything the loader raises
            return self._failed(_open_failure(exc), type(exc).__name__)
        self._open = True
        try:
            count = int(m.nvmlDeviceGetCount())
        except Exception as exc:  # noqa: BLE001
            self.close()
            return self._failed(f"NVML could not count the GPUs: {describe(exc)}", type(exc).__name__)
        self._handles, self.device_errors = [], []
        for index in range(count):
            try:
                self._handles.append(m.nvmlDeviceGetHandleByIndex(index))
                self.device_errors.append(None)
            except Exception as exc:  # noqa: BLE001 - this GPU only: the others are still read
                self._handles.append(None)
                self.device_errors.append(_device_failure(m, exc))
        self._memory_v2 = self.has_function("nvmlDeviceGetMemoryInfo_v2") and bool(getattr(m, "nvmlMemory_v2", 0))
        self._temperature_v = self.has_function("nvmlDeviceGetTemperatureV") and hasattr(m, "nvmlDeviceGetTemperatureV")
        self.process_api = choose_process_api(self)
        self.versions = self._read_versions()
        self.error = None
        self._failed_at = self._failure_kind = None
        return None

    def _failed(self, reason: str, kind: str) -> str:
        self.error, self._failure_kind, self._failed_at = reason, kind, time.monotonic()
        return reason

    @property
    def no_driver(self) -> bool:
        """Whether the last start failed because there is no NVIDIA driver (or it is not loaded)."""
        return self._failure_kind in _NO_DRIVER

    def close(self) -> None:
        if not self._open:
            return
        self._open = False
        self._handles = []
        try:
            self._module.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down a driver that went away: nothing left to release
            pass

    def __enter__(self) -> NvmlLibrary:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def device_count(self) -> int:
        return len(self._handles)

    def handle(self, index: int) -> Any | None:
        return self._handles[index] if 0 <= index < len(self._handles) else None

    def has_function(self, name: str) -> bool:
        """Whether the loaded NVML exports the C function `name` (looked up the way pynvml itself does)."""
        getter = getattr(self._module, "_nvmlGetFunctionPointer", None)
        if getter is None:
            return hasattr(self._module, name)
        try:
            getter(name)
        except Exception:  # noqa: BLE001 - NVMLError_FunctionNotFound (or NVML not loaded)
            return False
        return True

    def call(self, function: str, *args: Any) -> Any | None:
        """`pynvml.<function>(*args)`, or None where NVML (or this version of it) cannot answer."""
        fn = getattr(self._module, function, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except Exception:  # noqa: BLE001 - NVMLError and pynvml's plain Exceptions alike
            return None

    def device_call(self, index: int, function: str, *args: Any) -> Any | None:
        handle = self.handle(index)
        fn = getattr(self._module, function, None)
        if handle is None or fn is None:
            return None
        try:
            return fn(handle, *args)
        except Exception as exc:  # noqa: BLE001
            if getattr(exc, "value", None) == getattr(self._module, "NVML_ERROR_GPU_IS_LOST", -1):
                self.device_errors[index] = _device_failure(self._module, exc)
            return None

    # Typed readers: the conversions from NVML's units live here and nowhere else.

    def _read_versions(self) -> dict[str, str | None]:
        cuda = self.call("nvmlSystemGetCudaDriverVersion_v2")
        if cuda is None:
            cuda = self.call("nvmlSystemGetCudaDriverVersion")
        return {
            "driver": _text(self.call("nvmlSystemGetDriverVersion")),
            "cuda": None if not cuda else f"{int(cuda) // 1000}.{int(cuda) % 1000 // 10}",
            "nvml": _text(self.call("nvmlSystemGetNVMLVersion")),
        }

    def name(self, index: int) -> str | None:
        return _text(self.device_call(index, "nvmlDeviceGetName"))

    def uuid(self, index: int) -> str | None:
        return _text(self.device_call(index, "nvmlDeviceGetUUID"))

    def pci_bus_id(self, index: int) -> str | None:
        info = self.device_call(index, "nvmlDeviceGetPciInfo")
        return None if info is None else _text(info.busId)

    def mig_enabled(self, index: int) -> bool:
        modes = self.device_call(index, "nvmlDeviceGetMigMode")  # [current, pending]
        return modes is not None and bool(modes) and modes[0] == getattr(self._module, "NVML_DEVICE_MIG_ENABLE", 1)

    def utilization_percent(self, index: int) -> float | None:
        rates = self.device_call(index, "nvmlDeviceGetUtilizationRates")  # nvmlUtilization_t {gpu, memory}
        return None if rates is None else float(rates.gpu)

    def memory(self, index: int) -> tuple[int, int] | None:
        """(used, total) bytes. Prefers nvmlMemory_v2_t, whose `used` leaves out the driver's reserved memory
        (what nvidia-smi shows since R510), where the driver exports it; else nvmlMemory_t."""
        if self._memory_v2:
            info = self.device_call(index, "nvmlDeviceGetMemoryInfo", self._module.nvmlMemory_v2)
            if info is not None:
                return int(info.used), int(info.total)
        info = self.device_call(index, "nvmlDeviceGetMemoryInfo")
        return None if info is None else (int(info.used), int(info.total))

    def memory_free(self, index: int) -> tuple[int, int] | None:
        """(free, total) bytes, as the estimator compares them with what a run needs."""
        info = self.device_call(index, "nvmlDeviceGetMemoryInfo")
        return None if info is None else (int(info.free), int(info.total))

    def power_w(self, index: int) -> float | None:
        milliwatts = self.device_call(index, "nvmlDeviceGetPowerUsage")
        return None if milliwatts is None else milliwatts / 1000.0

    def power_limit_w(self, index: int) -> float | None:
        milliwatts = self.device_call(index, "nvmlDeviceGetEnforcedPowerLimit")
        if milliwatts is None:
            milliwatts = self.device_call(index, "nvmlDeviceGetPowerManagementLimit")
        return None if milliwatts is None else milliwatts / 1000.0

    def temperature_c(self, index: int) -> float | None:
        # nvmlDeviceGetTemperature is deprecated (to go in CUDA 14); its successor exists from driver 555.
        function = "nvmlDeviceGetTemperatureV" if self._temperature_v else "nvmlDeviceGetTemperature"
        value = self.device_call(index, function, self._module.NVML_TEMPERATURE_GPU)
        return None if value is None else float(value)

    def sm_clock_mhz(self, index: int) -> int | None:
        value = self.device_call(index, "nvmlDeviceGetClockInfo", self._module.NVML_CLOCK_SM)
        return None if value is None else int(value)

    def pcie_bytes_per_s(self, index: int) -> tuple[float | None, float | None]:
        """(host->device, device->host) over NVML's ~20 ms window. Each read blocks: call it off the sampling thread."""
        m = self._module
        rx = self.device_call(index, "nvmlDeviceGetPcieThroughput", m.NVML_PCIE_UTIL_RX_BYTES)
        tx = self.device_call(index, "nvmlDeviceGetPcieThroughput", m.NVML_PCIE_UTIL_TX_BYTES)
        return (
            None if rx is None else float(rx) * _PCIE_UNIT_BYTES,
            None if tx is None else float(tx) * _PCIE_UNIT_BYTES,
        )

    def pcie_counters(self, index: int) -> tuple[int, int] | None:
        """Cumulative (host->device, device->host) bytes, where the GPU keeps NVML's PCIe byte counters."""
        m = self._module
        fields = (getattr(m, "NVML_FI_DEV_PCIE_COUNT_RX_BYTES", None), getattr(m, "NVML_FI_DEV_PCIE_COUNT_TX_BYTES", None))
        if None in fields or not self.has_function("nvmlDeviceGetFieldValues"):
            return None
        values = self.device_call(index, "nvmlDeviceGetFieldValues", list(fields))
        if values is None or any(v.nvmlReturn != m.NVML_SUCCESS for v in values):
            return None
        return int(values[0].value.ullVal), int(values[1].value.ullVal)

    def snapshot_processes(self, index: int) -> GpuSnapshot:
        """A GPU with only its process list (for the end-of-run check)."""
        error = self.device_errors[index] if index < len(self.device_errors) else "not open"
        listed = list_processes(self, index) if error is None else None
        return GpuSnapshot(
            t=time.time(), index=index, name=None, uuid=None, utilization_percent=None, memory_used_bytes=None,
            memory_total_bytes=None, power_w=None, power_limit_w=None, temperature_c=None, sm_clock_mhz=None,
            pcie_h2d_bytes_per_s=None, pcie_d2h_bytes_per_s=None, pcie_t=None,
            processes=() if listed is None else listed.processes,
            processes_unknown=None if listed is None else listed.unknown,
            error=self.device_errors[index] if index < len(self.device_errors) else error,
        )


def no_gpu_possible(library: NvmlLibrary) -> bool:
    return library.no_driver


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _device_failure(m: Any, exc: Exception) -> str:
    code = getattr(exc, "value", None)
    if code == getattr(m, "NVML_ERROR_NO_PERMISSION", -1):
        return "no permission to open this GPU (not one of this job's GPUs, e.g. under Slurm's GPU isolation)"
    if code == getattr(m, "NVML_ERROR_GPU_IS_LOST", -1):
        return "GPU lost: it fell off the bus (Xid 79); a GPU reset or a reboot brings it back"
    return f"NVML cannot open this GPU: {describe(exc)}"


def _open_failure(exc: Exception) -> str:
    """A sentence for the person at the screen: why there are no GPUs here."""
    kind = type(exc).__name__
    if kind == "NVMLError_LibraryNotFound":
        return "the NVML library (libnvidia-ml.so.1) is not installed"
    if kind == "NVMLError_DriverNotLoaded":
        return "the NVIDIA driver is installed but not loaded"
    if kind == "NVMLError_NoPermission":
        return "no permission to read the NVIDIA driver (NVML)"
    if kind == "NVMLError_LibRmVersionMismatch":
        return "the NVIDIA driver and its NVML library differ in version (reboot after a driver update)"
    return f"NVML could not start ({describe(exc)})"


def wait_for_gpus_to_let_go(pids: set[int], timeout_s: float = 10.0, library: NvmlLibrary | None = None) -> GpuHolders:
    """At the end of a run: the PIDs GPUs still list, polled (the driver lists a process a moment after it ends)
    over one NVML session. No NVIDIA driver at all means nothing can hold a GPU: that is "none"."""
    lib = library or NvmlLibrary()
    try:
        reason = lib.open()
        if reason is not None:
            return GpuHolders(frozenset()) if no_gpu_possible(lib) else GpuHolders(None, reason)
        deadline = time.monotonic() + timeout_s
        while True:
            gpus = tuple(lib.snapshot_processes(i) for i in range(lib.device_count))
            found = holders_in(gpus, None, pids)
            if not found.pids or time.monotonic() >= deadline:
                return found
            time.sleep(0.5)
    except Exception as exc:  # noqa: BLE001 - the end-of-run check reports, it never fails a run
        return GpuHolders(None, f"the GPU check failed: {describe(exc)}")
    finally:
        lib.close()
