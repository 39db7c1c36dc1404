"""`ResourceSampler`: host, GPUs and a run's processes in one `ResourceSample`, GPU memory tied to processes; on
request the whole machine's processes too."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence

from traindeck.backend.monitor.gpu_processes import describe, gpu_memory_by_pid
from traindeck.backend.monitor.gpu_sampler import GpuSampler
from traindeck.backend.monitor.host import HostSampler
from traindeck.backend.monitor.machine import MachineProcessSampler
from traindeck.backend.monitor.nvml import NvmlLibrary
from traindeck.backend.monitor.processes import RunProcessSampler
from traindeck.backend.monitor.run_gpus import run_gpus
from traindeck.backend.monitor.snapshots import GpuReadout, MachineSnapshot, ResourceSample, RunSnapshot

logger = logging.getLogger(__name__)

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
        self.machine = MachineProcessSampler()
        self._run: RunProcessSampler | None = None

    def start(self) -> None:
        # Each part on its own: a GPU that fails must not cost the host's or the run's samples.
        try:
            self.gpus.start()
        except Exception:  # noqa: BLE001
            logger.warning("GPU sampler did not start", exc_info=True)
        self.host.prime()
        try:
            self._sample_run()
        except Exception:  # noqa: BLE001
            logger.warning("run sampler did not start", exc_info=True)

    def stop(self) -> None:
        self.gpus.stop()

    def __enter__(self) -> ResourceSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def sample(self, *, machine: bool = False) -> ResourceSample:
        """Host, GPUs and the run; with `machine`, every process of the machine as well (`MachineProcessSampler`:
        take it every `MACHINE_EVERY_S` at most)."""
        t = time.time()
        host = self.host.sample()
        try:
            readout = self.gpus.sample()
        except Exception as exc:  # noqa: BLE001
            logger.warning("GPU sample failed", exc_info=True)
            readout = GpuReadout(t, (), f"GPU sampling failed: {describe(exc)}")
        try:
            run = self._sample_run()
        except Exception:  # noqa: BLE001
            logger.warning("run sample failed", exc_info=True)
            run = None
        if run is not None and readout.gpus:
            by_pid = gpu_memory_by_pid(readout.gpus)
            run = dataclasses.replace(
                run, processes=tuple(dataclasses.replace(p, gpu_memory_bytes=by_pid.get(p.pid)) for p in run.processes)
            )
        machine_snapshot: MachineSnapshot | None = None
        if machine:
            try:
                # NVML's lists say which PIDs hold GPU memory; without NVML nobody can tell (None for every process).
                machine_snapshot = self.machine.sample(gpu_memory_by_pid(readout.gpus) if readout.gpus else None)
            except Exception:  # noqa: BLE001
                logger.warning("machine process snapshot failed", exc_info=True)
        return ResourceSample(t=t, host=host, gpus=readout.gpus, gpu_error=readout.error, run=run,
                              run_gpus=run_gpus(readout.gpus, run), gpu_versions=dict(readout.versions),
                              machine=machine_snapshot)

    def _sample_run(self) -> RunSnapshot | None:
        root = self._root_pid()
        if root is None:
            self._run = None
            return None
        if self._run is None or self._run.root_pid != root:
            self._run = RunProcessSampler(root)
        return self._run.sample()
