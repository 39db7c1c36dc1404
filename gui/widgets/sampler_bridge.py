"""`SamplerBridge`: the backend's `LiveSampler` as a QObject whose `sampled` signal arrives on the UI thread.

Sampling (NVML, psutil, /proc) runs on the sampler's own thread; the UI thread only receives frozen snapshots.
Starting, stopping and changing the interval never wait for a sample in progress: the old loop is told to stop
and finishes on its own, and anything it still delivers is dropped by generation number. In the background (the
page hidden, the window minimised) the loop goes on at 1 Hz at most, so that the charts have every second on return.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Signal

from traindeck.backend.monitor import LiveSampler, NvmlLibrary, ResourceSample

BACKGROUND_INTERVAL_S = 1.0  # the fastest the loop samples while nobody looks


class SamplerBridge(QObject):
    sampled = Signal(object)  # ResourceSample, delivered on the UI thread

    _delivered = Signal(int, object)  # (generation, sample), emitted on the sampling thread

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._sampler: LiveSampler | None = None
        self._generation = 0
        self.interval_s = 1.0
        self.root_pid: int | None = None
        self.machine_processes = False  # samples carry the machine's processes (a process table is on screen)
        self.background = False  # nobody looks: at most one sample a second
        # None: the real NVML. Otherwise a factory of NvmlLibrary (tests hand a stand-in pynvml to it); a new
        # library per start, because each is opened and closed by one sampling loop's thread.
        self.gpu_library_factory: Callable[[], NvmlLibrary] | None = None
        self._delivered.connect(self._deliver)  # queued: the bridge lives in the UI thread

    @property
    def running(self) -> bool:
        return self._sampler is not None

    def start(self) -> None:
        if self._sampler is not None:
            return
        self._generation += 1
        generation = self._generation

        def emit(sample: ResourceSample) -> None:
            try:
                self._delivered.emit(generation, sample)
            except RuntimeError:  # the bridge was deleted while this sample was taken
                pass

        library = self.gpu_library_factory() if self.gpu_library_factory is not None else None
        self._sampler = LiveSampler(emit, self.interval_s, root_pid=self.root_pid, gpu_library=library)
        self._sampler.machine_processes = self.machine_processes
        self._pace()
        self._sampler.start()

    def stop(self, wait_s: float = 0.0) -> None:
        """Stop sampling; with `wait_s` (shutdown) wait that long for the loop to release NVML."""
        sampler, self._sampler = self._sampler, None
        self._generation += 1
        if sampler is not None:
            sampler.stop(timeout=wait_s)

    def restart(self) -> None:
        if self.running:
            self.stop()
            self.start()

    def set_interval(self, seconds: float) -> None:
        self.interval_s = float(seconds)
        self.restart()

    def set_root_pid(self, pid: int | None) -> None:
        self.root_pid = pid
        if self._sampler is not None:
            self._sampler.root_pid = pid

    def set_machine_processes(self, on: bool) -> None:
        """Whether samples carry the whole machine's processes (every 2 s: `LiveSampler.machine_every_s`)."""
        self.machine_processes = on
        if self._sampler is not None:
            self._sampler.machine_processes = on

    def set_background(self, on: bool) -> None:
        """Nobody looks (True): sample at most once a second, without restarting the loop (rates, NVML and the
        run's processes go on); False: back at `interval_s`."""
        self.background = on
        self._pace()

    def _pace(self) -> None:
        if self._sampler is not None:
            # The loop reads its interval for each next deadline: the new pace applies from the next sample.
            self._sampler.interval_s = max(self.interval_s, BACKGROUND_INTERVAL_S) if self.background \
                else self.interval_s

    def _deliver(self, generation: int, sample: Any) -> None:
        if generation == self._generation:
            self.sampled.emit(sample)
