"""`RunResourceRecorder`: samples a run's resources on a background thread and writes them into the run store.

The run supervisor owns one per run:

    recorder = RunResourceRecorder(store_path, run_id, lambda: launcher_pid_or_none, interval_s=1.0,
                                   nvme_paths=["/mnt/nvme/offload"])
    recorder.start()   # returns at once; the first row lands after one interval
    ...
    recorder.stop()    # waits for the sample in progress, closes NVML and the database connection

The root PID is asked for on every sample, so the recorder can start before the launcher exists and follows a
relaunch. Host and GPUs are recorded whether or not there is a run process yet.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from traindeck.backend.monitor.loop import Collector
from traindeck.backend.monitor.nvml import NvmlLibrary
from traindeck.backend.monitor.sample_store import ResourceWriter
from traindeck.backend.monitor.sampler import ResourceSampler
from traindeck.backend.monitor.snapshots import ResourceSample


class RunResourceRecorder(Collector):
    def __init__(
        self,
        store_path: Path,
        run_id: str,
        root_pid_getter: Callable[[], int | None],
        interval_s: float = 1.0,
        nvme_paths: Sequence[str] = (),
        *,
        gpu_library: NvmlLibrary | None = None,
    ) -> None:
        super().__init__(interval_s, name=f"resources-{run_id}")
        self.store_path = Path(store_path)
        self.run_id = run_id
        self._sampler = ResourceSampler(
            root_pid_getter, watch_paths=nvme_paths, gpu_library=gpu_library, interval_s=self.interval_s
        )
        self._writer: ResourceWriter | None = None
        self.last_sample: ResourceSample | None = None

    def start(self) -> None:
        """Open the store (errors such as an unwritable path surface here, not on the thread) and start sampling."""
        if self.running:
            return
        if self._writer is None:
            self._writer = ResourceWriter(
                self.store_path, self.run_id, interval_s=self.interval_s, started_at=time.time()
            )
        super().start()

    def stop(self, timeout: float | None = 10.0) -> bool:
        stopped = super().stop(timeout)
        if stopped and self._writer is not None:  # a thread still writing keeps its connection
            self._writer.close()
            self._writer = None
        return stopped

    def _prime(self) -> None:
        self._sampler.start()  # NVML, PCIe reader, and the first counter readings that rates are measured from

    def _tick(self) -> None:
        sample = self._sampler.sample()
        self.last_sample = sample
        if self._writer is not None:
            self._writer.write(sample)

    def _finish(self) -> None:
        self._sampler.stop()
