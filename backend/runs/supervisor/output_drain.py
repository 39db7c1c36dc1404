"""A run's output path inside the supervisor: the pipe the job writes into -> output.log (OutputPump), and
output.log -> progress and metrics in the run store (OutputFollower); OutputDrain holds the two, started and
finished together.

The job waits only when the pipe is full, so the pump does nothing but move bytes (splice(2), in the kernel) and
the parsing follows the file at its own pace. Under a flood (the follower more than PARSE_MAX_LAG behind) parsing
samples the newest FLOOD_SAMPLE bytes every FLOOD_PAUSE_S instead: on a small machine every millisecond of
parsing is taken from the job, and a flood's progress and metrics are in its newest lines. Every byte stays in
output.log, in order.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from pathlib import Path

from traindeck.backend.core.paths import free_bytes
from traindeck.backend.logparse import Line, LineAssembler, Metric, OutputParser, Progress
from traindeck.backend.logparse.op_build import OpBuildTracker
from traindeck.backend.runs.diagnosis.stall import Quiet
from traindeck.backend.runs.record.log_follow import run_hosts
from traindeck.backend.runs.supervisor.instructions import SafeStore
from traindeck.backend.runs.supervisor.loss_guard import Watchdog

PROGRESS_EVERY_S = 0.25
METRICS_EVERY_S = 0.25
PIPE_SIZE = 1 << 20
READ_SIZE = 1 << 20
# Parsing this far behind the log is a flood: from then on it samples (see the module's docstring).
PARSE_MAX_LAG = 8 << 20
# What is parsed of each look during a flood: ~450 lines of 70 bytes, about 1 ms of parsing (256 KiB every
# 0.1 s took ~10% of a core away from a flooding job on a 2-core machine).
FLOOD_SAMPLE = 32 << 10
FLOOD_PAUSE_S = 0.25
FOLLOW_INTERVAL_S = 0.1
TIMED_SOURCE = "step timing"  # the progress of a run whose output says none: the optimizer steps its ranks timed

logger = logging.getLogger("traindeck.supervisor")


def open_output_pipe() -> tuple[int, int]:
    """(read_fd, write_fd) of the pipe the job writes into, its buffer raised to PIPE_SIZE where Linux allows, so
    the job is not held while the pump is descheduled for a moment."""
    read_fd, write_fd = os.pipe()
    try:
        import fcntl

        fcntl.fcntl(read_fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_SIZE)
    except (OSError, ImportError, AttributeError):
        pass
    return read_fd, write_fd


def _from_line_start(sample: bytes) -> bytes:
    """`sample` (bytes cut from the middle of the log) from its first line start on: after its first "\\n" or
    "\\r", since a flood of progress-bar redraws holds no "\\n" at all. Empty when it holds neither (the middle of
    one huge line)."""
    cuts = [i for i in (sample.find(b"\n"), sample.find(b"\r")) if i >= 0]
    return sample[min(cuts) + 1:] if cuts else b""


class OutputPump(threading.Thread):
    """Pipe -> output.log, raw, in large reads. Does nothing else, so it is never the reason the job waits."""

    def __init__(self, read_fd: int, log_fd: int, path: Path | None = None) -> None:
        super().__init__(name="output-pump", daemon=True)
        self.read_fd, self.log_fd = read_fd, log_fd
        self.path = path  # output.log's path, named in the cut note
        self.bytes = 0
        self.last_output = time.monotonic()
        self.wake = threading.Event()
        self.cut_at: int | None = None  # where output.log ends when writing it failed (a full disk)

    def run(self) -> None:
        # splice(2) moves the bytes pipe -> file inside the kernel: no copy through Python, little GIL.
        splice = getattr(os, "splice", None)
        write_failed = False
        while True:
            if splice is not None and not write_failed:
                try:
                    count = splice(self.read_fd, self.log_fd, READ_SIZE)
                except OSError as exc:
                    if exc.errno == errno.ENOSPC:
                        write_failed = True
                        self._cut()
                        logger.warning("writing output.log failed: %s; draining the output so the job never blocks", exc)
                    else:  # a kernel or filesystem without splice into this file: plain reads and writes
                        splice = None
                    continue
                if count == 0:
                    break
            else:
                try:
                    data = os.read(self.read_fd, READ_SIZE)
                except OSError:
                    break
                if not data:
                    break
                count = len(data)
                if not write_failed:
                    write_failed = not self._write(data)
            self.bytes += count
            self.last_output = time.monotonic()
            self.wake.set()
        self.wake.set()

    def _write(self, data: bytes) -> bool:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.log_fd, view):]
            except OSError as exc:  # disk full: keep draining so the job never blocks; say so once
                self._cut()
                logger.warning("writing output.log failed: %s; draining the output so the job never blocks", exc)
                return False
        return True

    def _cut(self) -> None:
        try:
            self.cut_at = os.fstat(self.log_fd).st_size
        except OSError:
            self.cut_at = -1

    def cut_note(self) -> str:
        """After a failed write: 'the log was cut at byte N: the disk was full (PATH, free X at the run's end)',
        X read now (the supervisor asks at the run's end, before the end waits for room in the store); else ''."""
        if self.cut_at is None:
            return ""
        where = f" at byte {self.cut_at:,}" if self.cut_at >= 0 else ""
        said = [str(self.path)] if self.path is not None else []
        free = free_bytes(self.path) if self.path is not None else -1
        if free >= 0:
            said.append(f"free {_size(free)} at the run's end")
        return f"the log was cut{where}: the disk was full" + (f" ({', '.join(said)})" if said else "")


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


class OutputFollower(threading.Thread):
    """Follows output.log behind the pump: lines -> progress and metrics -> run store, at a bounded rate."""

    def __init__(self, path: Path, pump: OutputPump, store: SafeStore, run_id: str,
                 watchdog: Watchdog | None = None) -> None:
        super().__init__(name="output-follower", daemon=True)
        self.path, self.pump, self.store, self.run_id = path, pump, store, run_id
        self.watchdog = watchdog
        self.hosts = run_hosts(path.parent)  # a multi-node run's `HOST: ` prefixes are node tags
        self.assembler = LineAssembler(hosts=self.hosts)
        self.parser = OutputParser()
        self.lines = 0
        self.skipped_bytes = 0
        self.last_progress_change = time.monotonic()
        self.step_times: list[float] = []  # seconds per progress unit of the run's main bar, recent ones
        self._progress: Progress | None = None
        self._progress_dirty = False
        self._progress_written = 0.0
        self._last_step: tuple[int, float] | None = None  # (current, monotonic) of the main bar
        self._timed_step: int | None = None  # the newest step the ranks' step timing saw
        self._metrics: list[tuple[str, int | None, float, float, int | None]] = []
        self._metrics_written = 0.0
        self._reported: set[str] = set()
        self.op_builds = OpBuildTracker()
        self.pump_done = threading.Event()

    def run(self) -> None:
        try:
            self._follow()
        except Exception:  # parsing must never take the supervisor down; the log is complete regardless
            logger.exception("output follower failed:")

    def _follow(self) -> None:
        with open(self.path, "rb") as handle:
            position = 0
            woke = 0.0
            while True:
                done = self.pump_done.is_set()
                # Woken by new output, but at most 10 times a second: each wake-up costs more than a batch of lines.
                time.sleep(max(0.0, woke + FOLLOW_INTERVAL_S - time.monotonic()))
                self.pump.wake.wait(0.5)
                self.pump.wake.clear()
                woke = time.monotonic()
                while True:
                    size = os.fstat(handle.fileno()).st_size
                    if size - position > PARSE_MAX_LAG:
                        # A flood: parse the newest FLOOD_SAMPLE bytes only, then pause (see the module's docstring).
                        self.skipped_bytes += size - FLOOD_SAMPLE - position
                        handle.seek(size - FLOOD_SAMPLE)
                        sample = handle.read(FLOOD_SAMPLE)
                        position = size
                        self.assembler = LineAssembler(hosts=self.hosts)
                        for line in self.assembler.feed(_from_line_start(sample)):
                            self._line(line)
                        self._flush()
                        time.sleep(FLOOD_PAUSE_S)
                        continue
                    chunk = handle.read(min(size - position, 256 << 10))
                    if not chunk:
                        break
                    position += len(chunk)
                    for line in self.assembler.feed(chunk):
                        self._line(line)
                    self._flush()
                self._on_timed_steps()
                if done:
                    for line in self.assembler.flush():
                        self._line(line)
                    self._items(self.parser.flush())
                    self._flush(force=True)
                    return

    def _line(self, line: Line) -> None:
        self.lines += 1
        change = self.op_builds.feed(line.text, time.monotonic())
        if change is not None:
            self._op_build_event(change)
        self._items(self.parser.feed(line))

    def _op_build_event(self, change: str) -> None:
        what, _, op = change.partition(":")  # "building" is announced by the supervisor's own check (processes too)
        if what == "loaded" and self.op_builds.loaded.get(op) is not None:
            self.store.add_event(self.run_id, "op_loaded",
                                 f"{op} loaded after {self.op_builds.loaded[op]:.0f} s (built or found in the cache)")

    def _items(self, items: list[Progress | Metric]) -> None:
        progressed = False
        for item in items:
            if isinstance(item, Metric):
                # A series the script reports exactly (traindeck_report) is not also taken from parsed lines.
                if item.source == "report":
                    self._reported.add(item.name)
                elif item.name in self._reported:
                    continue
                self._metrics.append((item.name, item.step, time.time(), float(item.value), item.rank))
                if self.watchdog is not None:
                    self.watchdog.feed(item.name, item.step, float(item.value), self.parser.progress)
            else:
                progressed = True
        if progressed:
            self._on_progress()

    def steps_timed(self, step: int) -> None:
        """The newest optimizer step the ranks' step timing has seen (called from the supervisor's loop): the
        run's progress while its output says none (no bar, no step or loss lines), so a quiet script still shows
        it advancing, and the stall watch sees its steps."""
        self._timed_step = step  # read by this thread at its next wake-up

    def _on_timed_steps(self) -> None:
        step = self._timed_step
        if step is None or self.parser.progress is not None \
                or (self._progress is not None and self._progress.source != TIMED_SOURCE) \
                or (self._progress is not None and self._progress.current == step):
            return
        recent = self.step_times[-20:]
        rate = len(recent) / sum(recent) if recent and sum(recent) > 0 else None
        self._advance(Progress(current=step, total=None, rate=rate, eta_s=None, unit="step", rank=None,
                               source=TIMED_SOURCE))
        self._flush()

    def _on_progress(self) -> None:
        # The parser knows which of several bars (training, eval, download) stands for the run.
        main = self.parser.progress
        if main is None or main == self._progress:
            return
        self._advance(main)

    def _advance(self, main: Progress) -> None:
        now = time.monotonic()
        if self._last_step is not None and main.current > self._last_step[0]:
            self.step_times.append((now - self._last_step[1]) / (main.current - self._last_step[0]))
            del self.step_times[:-200]
        if self._last_step is None or main.current != self._last_step[0]:
            self._last_step = (main.current, now)
            self.last_progress_change = now
        self._progress = main
        self._progress_dirty = True

    def _flush(self, force: bool = False) -> None:
        now = time.monotonic()
        if self._progress_dirty and self._progress is not None and (
                force or now - self._progress_written >= PROGRESS_EVERY_S):
            p = self._progress
            self.store.update_run(self.run_id, progress={
                "current": p.current, "total": p.total, "rate": p.rate, "eta_s": p.eta_s, "unit": p.unit,
                "source": p.source, "updated": time.time()})
            self._progress_dirty = False
            self._progress_written = now
        if self._metrics and (force or now - self._metrics_written >= METRICS_EVERY_S or len(self._metrics) > 5000):
            batch, self._metrics = self._metrics, []
            self.store.add_metrics(self.run_id, batch)
            self._metrics_written = now


class OutputDrain:
    """One run's output path: the pump (pipe -> output.log, from `read_fd` into `log_fd`) and the follower
    (output.log at `path` -> the store), started together; `finish` waits for both once every process has ended."""

    def __init__(self, read_fd: int, log_fd: int, path: Path, store: SafeStore, run_id: str,
                 watchdog: Watchdog | None = None) -> None:
        self.store, self.run_id = store, run_id
        self.pump = OutputPump(read_fd, log_fd, path)
        self.follower = OutputFollower(path, self.pump, store, run_id, watchdog)

    def start(self) -> None:
        self.pump.start()
        self.follower.start()

    @property
    def last_progress_change(self) -> float:
        return self.follower.last_progress_change

    def quiet(self) -> Quiet:
        """What the stall watch reads of the output at one check."""
        return Quiet(self.pump.last_output, self.follower.last_progress_change, self.follower.step_times,
                     self.follower.op_builds.building_now)

    def finish(self) -> None:
        """The pump reads the pipe to its end (closed, if something outside the run still holds it), the follower
        parses the rest; a flood's skipped parsing is said in an event."""
        self.pump.join(timeout=10.0)
        if self.pump.is_alive():  # something outside our tree still holds the pipe: stop reading it
            logger.warning("output pipe still open after every process ended; closing it")
            os.close(self.pump.read_fd)
            self.pump.join(timeout=2.0)
        self.follower.pump_done.set()
        self.pump.wake.set()
        self.follower.join(timeout=30.0)
        if self.follower.skipped_bytes:
            self.store.add_event(self.run_id, "parse_skipped",
                                 f"parsing skipped {self.follower.skipped_bytes / 2**20:.0f} MiB of a flood of output"
                                 " (all of it is in output.log)")
