"""`ResourceSampler`: host, GPUs and a run's processes (or every live run's) in one `ResourceSample`, GPU memory
tied to processes; on request the whole machine's processes too."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence

from traindeck.backend.monitor.gpu_processes import describe, gpu_memory_by_pid, gpu_use_by_pid
from traindeck.backend.monitor.gpu_sampler import GpuSampler
from traindeck.backend.monitor.host import HostSampler
from traindeck.backend.monitor.machine import MachineProcessSampler
from traindeck.backend.monitor.nvml import NvmlLibrary
from traindeck.backend.monitor.processes import RunProcessSampler
from traindeck.backend.monitor.run_gpus import run_gpus
from traindeck.backend.monitor.snapshots import GpuReadout, MachineSnapshot, ResourceSample, RunSnapshot

logger = logging.getLogger(__name__)

RootPidGetter = Callable[[], "int | None"]
RunsGetter = Callable[[], Mapping[str, int]]  # run id -> launcher PID, of every run to follow now


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
        runs: RunsGetter | None = None,
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
        self._runs_getter = runs
        self._runs: dict[str, RunProcessSampler] = {}

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
        try:
            self._sample_runs()
        except Exception:  # noqa: BLE001
            logger.warning("live runs sampler did not start", exc_info=True)

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
        try:
            runs = self._sample_runs()
        except Exception:  # noqa: BLE001
            logger.warning("live runs sample failed", exc_info=True)
            runs = ()
        if readout.gpus:
            by_pid = gpu_memory_by_pid(readout.gpus)
            run = _with_gpu_memory(run, by_pid) if run is not None else None
            runs = tuple(_with_gpu_memory(r, by_pid) for r in runs)
        machine_snapshot: MachineSnapshot | None = None
        if machine:
            try:
                # NVML's lists say which PIDs hold GPU memory; without NVML nobody can tell (None for every process).
                machine_snapshot = self.machine.sample(gpu_memory_by_pid(readout.gpus) if readout.gpus else None,
                                                       gpu_use_by_pid(readout.gpus))
            except Exception:  # noqa: BLE001
                logger.warning("machine process snapshot failed", exc_info=True)
        return ResourceSample(t=t, host=host, gpus=readout.gpus, gpu_error=readout.error, run=run,
                              run_gpus=run_gpus(readout.gpus, run), gpu_versions=dict(readout.versions),
                              machine=machine_snapshot, runs=runs)

    def _sample_run(self) -> RunSnapshot | None:
        root = self._root_pid()
        if root is None:
            self._run = None
            return None
        if self._run is None or self._run.root_pid != root:
            self._run = RunProcessSampler(root)
        return self._run.sample()

    def _sample_runs(self) -> tuple[RunSnapshot, ...]:
        if self._runs_getter is None:
            return ()
        wanted = dict(self._runs_getter())
        for run_id in set(self._runs) - set(wanted):
            del self._runs[run_id]
        out = []
        for run_id, root in sorted(wanted.items()):
            sampler = self._runs.get(run_id)
            if sampler is None or sampler.root_pid != root:
                sampler = self._runs[run_id] = RunProcessSampler(root)
            out.append(dataclasses.replace(sampler.sample(), run_id=run_id))
        return tuple(out)


def _with_gpu_memory(run: RunSnapshot, by_pid: Mapping[int, int]) -> RunSnapshot:
    return dataclasses.replace(
        run, processes=tuple(dataclasses.replace(p, gpu_memory_bytes=by_pid.get(p.pid)) for p in run.processes))
