"""`ResourceSampler`: host, GPUs and a run's processes in one `ResourceSample`, GPU memory tied to processes."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

from traindeck.backend.monitor.host import HostSampler
from traindeck.backend.monitor.nvml import GpuSampler, NvmlLibrary, gpu_memory_by_pid
from traindeck.backend.monitor.processes import RunProcessSampler
from traindeck.backend.monitor.snapshots import ResourceSample, RunSnapshot

RootPidGetter = Callable[[], "int | None"]


class ResourceSampler:
    """Takes `ResourceSample`s on demand. `root_pid` is the run's launcher: a PID, a callable returning one (or
    None while there is none yet), or None to watch only the host and GPUs.

    `start()` opens NVML and its PCIe reader and takes the first counter readings; `stop()` releases NVML.
    """

    def __init__(
        self,
        root_pid: int | RootPidGetter | None = None,
        *,
        watch_paths: Sequence[str] = (),
        gpu_library: NvmlLibrary | None = None,
        interval_s: float = 1.0,
    ) -> None:
        if root_pid is None or isinstance(root_pid, int):
            fixed = root_pid
            self._root_pid: RootPidGetter = lambda: fixed
        else:
            self._root_pid = root_pid
        self.host = HostSampler(watch_paths)
        self.gpus = GpuSampler(gpu_library, pcie_interval_s=interval_s)
        self._run: RunProcessSampler | None = None

    def start(self) -> None:
        self.gpus.start()
        self.host.prime()
        self._sample_run()

    def stop(self) -> None:
        self.gpus.stop()

    def __enter__(self) -> ResourceSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def sample(self) -> ResourceSample:
        t = time.time()
        host = self.host.sample()
        readout = self.gpus.sample()
        run = self._sample_run()
        if run is not None and readout.gpus:
            by_pid = gpu_memory_by_pid(readout.gpus)
            run = dataclasses.replace(
                run, processes=tuple(dataclasses.replace(p, gpu_memory_bytes=by_pid.get(p.pid)) for p in run.processes)
            )
        return ResourceSample(t=t, host=host, gpus=readout.gpus, gpu_error=readout.error, run=run)

    def _sample_run(self) -> RunSnapshot | None:
        root = self._root_pid()
        if root is None:
            self._run = None
            return None
        if self._run is None or self._run.root_pid != root:
            self._run = RunProcessSampler(root)
        return self._run.sample()
