"""Live monitoring for a viewer (the dashboard's Monitor page): a sampling loop that hands each sample to a
callback, and the run-store reads that go with choosing a run to watch.

`LiveSampler` is the Monitor page's sampler: a `Collector` that owns a `ResourceSampler` (NVML opens on the
loop's thread, never the caller's), calls `on_sample(ResourceSample)` from that thread, and follows a run's
launcher PID that can be changed at any time. The reads below are plain functions over the run store so a GUI
can run them on a worker thread and a test can call them directly.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traindeck.backend.monitor.loop import Collector
from traindeck.backend.monitor.machine import MACHINE_EVERY_S
from traindeck.backend.monitor.nvml import NvmlLibrary
from traindeck.backend.monitor.offload import offload_view
from traindeck.backend.monitor.sampler import ResourceSampler
from traindeck.backend.monitor.snapshots import ResourceSample
from traindeck.backend.monitor.store_read import read_process_samples, read_series

SampleCallback = Callable[[ResourceSample], None]


class LiveSampler(Collector):
    """Samples host, GPUs and (when `root_pid` is set) a run's process tree every `interval_s` seconds.

    `on_sample` runs on the sampling thread. `root_pid` may be set from any thread; the next sample follows it.
    While `machine_processes` is set (from any thread: a viewer showing its process table), a sample every
    `machine_every_s` (2 s at least) also carries the whole machine's processes (`ResourceSample.machine`).
    `stop(timeout=0)` returns at once (the loop ends after the sample in progress, then releases NVML).
    """

    def __init__(self, on_sample: SampleCallback, interval_s: float = 1.0, *, root_pid: int | None = None,
                 watch_paths: Sequence[str] = (), gpu_library: NvmlLibrary | None = None) -> None:
        super().__init__(interval_s, name="live-monitor")
        self.root_pid = root_pid  # a plain attribute: assignment is atomic, read once per sample
        self.machine_processes = False  # likewise
        self.machine_every_s = MACHINE_EVERY_S
        self._machine_at = -float("inf")
        self._on_sample = on_sample
        self._sampler = ResourceSampler(lambda: self.root_pid, watch_paths=watch_paths, gpu_library=gpu_library,
                                        interval_s=self.interval_s)

    def _prime(self) -> None:
        self._sampler.start()

    def _tick(self) -> None:
        now = time.monotonic()
        # Half an interval of slack: at 1 s sampling a 2 s table comes every second tick, not every third.
        machine = self.machine_processes and now - self._machine_at >= self.machine_every_s - self.interval_s / 2
        if machine and now - self._machine_at > 2 * self.machine_every_s + self.interval_s:
            # The first snapshot since the table was shown: CPU % needs a reading to compare with. Take it now
            # and the snapshot at the next tick, one interval later (a table of "-" would wait 2 s otherwise).
            self._sampler.machine.sample()
            self._machine_at = now - self.machine_every_s
            machine = False
        elif machine:
            self._machine_at = now
        self._on_sample(self._sampler.sample(machine=machine))

    def _finish(self) -> None:
        self._sampler.stop()


# ------------------------------------------------------------------------------------------- run-store reads
@dataclass(frozen=True)
class RunChoice:
    """A run the Monitor page can watch: running ones live (by launcher PID), finished ones from the store. A run
    the store says is running whose supervisor is gone is `lost` (what the next look at the runs records)."""

    id: str
    label: str
    state: str
    launcher_pid: int | None
    started_at: float | None
    name: str = ""

    @property
    def live(self) -> bool:
        return self.state == "running" and self.launcher_pid is not None

    @property
    def short(self) -> str:
        """The name and the id's random suffix (`train_tiny ·4bd2`), or the id of an unnamed run."""
        return f"{self.name} ·{self.id[-4:]}" if self.name and self.name != self.id else self.id


def run_choices(limit: int = 30, store_path: Path | str | None = None,
                alive: Callable[[Any], bool] | None = None) -> list[RunChoice]:
    """Every running run (newest start first, whatever started it and however long ago it was queued), then the
    `limit` most recent others; [] without a run store. `alive(record)`: whether a running run's supervisor is
    there (backend.runs.supervisor_alive); a running run without one is listed as `lost`, after the live ones."""
    from traindeck.backend.core.paths import run_store_path
    from traindeck.backend.runs.record.run_store import RunStore

    path = Path(store_path) if store_path is not None else run_store_path()
    if not path.exists():
        return []
    with RunStore(path, busy_timeout_s=2.0) as store:
        running = store.list_runs(state="running")
        others = [r for r in store.list_runs(limit=limit + len(running)) if r.state != "running"][:limit]
    # Only a running run can be lost: an ended one's supervisor is gone because it finished.
    states = {r.id: ("lost" if r.state == "running" and alive is not None and not alive(r) else r.state)
              for r in running + others}
    runs = sorted(running + others, key=lambda r: (states[r.id] != "running",
                                                   -(r.started_at or r.created_at or 0.0)))
    out = []
    for run in runs:
        name = run.name or run.script or run.id
        state = states[run.id]
        # The name first, then what tells two runs of one script apart: state, start time and the id's suffix
        # (the id's first characters are only its date).
        when = time.strftime("%d %b %H:%M", time.localtime(run.started_at or run.created_at or 0.0))
        label = (f"{name} · {state} · {when} · {run.id[-4:]}" if name != run.id
                 else f"{run.id} · {state}")
        out.append(RunChoice(run.id, label, state, run.launcher_pid, run.started_at, name))
    return out


class RunWatch:
    """Which run the Monitor page watches, without the page (its run picker shows it). `to_follow(choices)` after
    each listing says the run to switch to, or None to stay:

    - a run launched from this window, once listed, unless it has ended and a run started after it is running;
    - else the newest running run when it started since the last listing (whatever started it: this window, the
      CLI, the queue), over a pick;
    - else, unless the person picked a run, the newest running run while the one watched is not running, and the
      newest run of all when none runs and none is watched.

    `note(choices)` is what the picker says beside the choice: that the watched run ended and which live run is
    watched now, or (the person watching a run that is not running) which run is running, offered.
    """

    def __init__(self) -> None:
        self.watched: RunChoice | None = None
        self.pinned = False  # the person picked a run that is not running (or none): it holds until a new run starts
        self.known_running: set[str] = set()
        self.launched: str | None = None  # a run launched from this window, to watch once it is listed
        self.ended: tuple[RunChoice, RunChoice] | None = None  # (the run that ended, the live run watched since)

    def watch(self, choice: RunChoice | None) -> None:
        self.watched = choice

    def picked(self, choice: RunChoice | None) -> None:
        """The person's pick: the running run (or nothing while one runs) is following; anything else holds."""
        self.pinned = not (choice is not None and choice.state == "running")
        self.launched = None
        self.ended = None

    def launched_here(self, run_id: str) -> None:
        self.pinned = False
        self.launched = run_id

    def to_follow(self, choices: list[RunChoice]) -> str | None:
        running = [c for c in choices if c.state == "running"]  # newest first
        by_id = {c.id: c for c in choices}
        if self.launched is not None and self.launched in by_id:
            launched, self.launched = by_id[self.launched], None
            started = launched.started_at or 0.0
            if launched.state == "running" or not any((c.started_at or 0.0) > started for c in running):
                return launched.id
        if not running:
            if self.watched is None and not self.pinned and choices:
                return choices[0].id  # nothing runs: the newest run, read back
            return None
        newest = running[0]
        if self.watched is not None and newest.id == self.watched.id:
            return None
        if newest.id not in self.known_running:  # it started since the last look
            self.pinned = False
            return newest.id
        watched_live = self.watched is not None and any(c.id == self.watched.id for c in running)
        if watched_live or self.pinned:
            return None
        return newest.id

    def listed(self, choices: list[RunChoice]) -> str | None:
        """`to_follow`, and what the listing says for the next one (the running runs; a watched run that ended)."""
        before = self.watched
        follow = self.to_follow(choices)
        by_id = {c.id: c for c in choices}
        if follow is not None and before is not None:
            now = by_id.get(before.id)
            ended = before.state == "running" and now is not None and now.state != "running"
            self.ended = (now, by_id[follow]) if ended and now is not None and by_id[follow].state == "running" \
                else None
        self.known_running = {c.id for c in choices if c.state == "running"}
        return follow

    def note(self, choices: list[RunChoice]) -> tuple[str, RunChoice | None]:
        """(what to say, the run offered to watch instead or None); ("", None): nothing to say."""
        watched = next((c for c in choices if self.watched is not None and c.id == self.watched.id), None)
        if self.ended is not None and watched is not None and watched.id == self.ended[1].id:
            gone, now = self.ended
            return f"{gone.short} ended ({gone.state}): watching {now.short}, which is running", None
        running = [c for c in choices if c.state == "running"]
        if running and (watched is None or watched.state != "running"):
            return f"{running[0].short} is running", running[0]
        return "", None


def step_times(run_id: str, store_path: Path | str | None = None) -> list[tuple[float, int]]:
    """[(t, step)] of the run's training steps as logged: the metric series with the most steps (usually loss)."""
    from traindeck.backend.core.paths import run_store_path
    from traindeck.backend.runs.record.run_store import RunStore

    path = Path(store_path) if store_path is not None else run_store_path()
    if not path.exists():
        return []
    with RunStore(path, busy_timeout_s=2.0) as store:
        spans = store.metric_step_spans(run_id)
        if not spans:
            return []
        name = max(spans, key=lambda n: (spans[n][4], n))
        rows = store.metric_series(run_id, name)
    seen: dict[int, float] = {}
    for step, t, _ in rows:
        if step is not None and step not in seen:  # several ranks log the same step: the first time counts
            seen[int(step)] = t
    return sorted((t, step) for step, t in seen.items())


HEALTH_STEPS = 20_000  # the newest steps ticked on the health strips (a day of 4 s steps)


def run_health_strip(run_id: str, store_path: Path | str | None = None) -> dict[str, Any]:
    """What the GPUs tab's health strips show of a run from its recording: {"changes": read_gpu_health's rows,
    "steps": [(end time, step)]}: the timed steps of the run's lowest rank (backend/steps), else the steps its
    metrics logged."""
    from traindeck.backend.core.paths import run_store_path
    from traindeck.backend.monitor.store_read import read_gpu_health
    from traindeck.backend.runs.record.run_store import RunStore

    path = Path(store_path) if store_path is not None else run_store_path()
    if not path.exists():
        return {"changes": [], "steps": []}
    with RunStore(path, busy_timeout_s=2.0) as store:
        newest = store.steps(run_id, last=1)
        rank = min(r.rank for r in newest) if newest else None
        timed = sorted((r.t, r.step) for r in store.steps(run_id, rank=rank, last=HEALTH_STEPS)) if newest else []
    return {"changes": read_gpu_health(path, run_id), "steps": timed or step_times(run_id, path)}


def run_history(run_id: str, max_points: int = 3000, store_path: Path | str | None = None) -> dict[str, Any]:
    """What the Monitor page shows of a run from its recording: the charted series (downsampled to
    `max_points`; host figures included), the processes of its last sample, each rank's line (`rank_lines`), and
    the rank lines of that last sample ("alive": a line missing from it is a rank that exited)."""
    from traindeck.backend.core.paths import run_store_path

    path = Path(store_path) if store_path is not None else run_store_path()
    series = read_series(path, run_id, max_points=max_points)
    last = read_process_samples(path, run_id, limit=1)
    samples = read_process_samples(path, run_id, max_points=max_points)
    return {"series": series, "last_processes": last[-1] if last else None, "ranks": rank_lines(samples),
            "alive": list(rank_lines(last))}


RANK_FIGURES = (("rss", "rss_bytes"), ("cpu", "cpu_percent"), ("locked", "locked_bytes"),
                ("gpu", "gpu_memory_bytes"))


def rank_lines(samples: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """{line name: {"t", "rss", "cpu", "locked", "gpu": float arrays, NaN where unknown}} of recorded process samples
    (`read_process_samples`), a line per rank named as a live view names it: "rank N" when the run's processes carry
    ranks, else "PID N" for each process that is not a launcher (`RunSnapshot.ranks`)."""
    import numpy as np

    from traindeck.backend.monitor.snapshots import RunProcess, RunSnapshot

    points: dict[str, list[tuple[float, ...]]] = {}
    for sample in samples:
        processes = tuple(RunProcess(
            pid=int(p["pid"]), ppid=None, name=str(p.get("name") or ""), cmdline=str(p.get("cmdline") or ""),
            role=str(p.get("role") or ""), rank=p.get("rank"), local_rank=p.get("local_rank"),
            cpu_percent=p.get("cpu_percent"), rss_bytes=p.get("rss_bytes"), locked_bytes=p.get("locked_bytes"),
            read_bytes=None, write_bytes=None, gpu_memory_bytes=p.get("gpu_memory_bytes"))
            for p in sample["processes"])
        run = RunSnapshot(t=float(sample["t"]), root_pid=sample.get("root_pid") or 0, processes=processes)
        ranked = any(p.role == "rank" for p in processes)
        for p in run.ranks:
            name = f"rank {p.rank}" if ranked and p.rank is not None else f"PID {p.pid}"
            points.setdefault(name, []).append(
                (run.t, *(np.nan if getattr(p, field) is None else float(getattr(p, field))
                          for _, field in RANK_FIGURES)))
    out: dict[str, dict[str, Any]] = {}
    for name, rows in points.items():
        table = np.array(rows, dtype=float).reshape(-1, 1 + len(RANK_FIGURES))
        out[name] = {"t": table[:, 0], **{key: table[:, 1 + i] for i, (key, _) in enumerate(RANK_FIGURES)}}
    return out


def run_offload(run_id: str, max_points: int = 2000, store_path: Path | str | None = None) -> dict[str, Any]:
    """The offload view of a run (backend `offload_view`) on its steps: those its ranks timed, with the step
    numbers of its log around them (`with_timed_steps`); the logged ones alone where the ranks timed none."""
    from traindeck.backend.core.paths import run_store_path

    path = Path(store_path) if store_path is not None else run_store_path()
    steps = step_times(run_id, path)
    phases = step_phases(run_id, path)
    if phases is not None:
        steps = with_timed_steps(steps, [(float(t), int(s)) for t, s in zip(phases["t"], phases["step"], strict=True)])
    view = offload_view(path, run_id, steps, max_points=max_points)
    view["step_times"] = steps
    view["step_phases"] = phases
    return view


def with_timed_steps(logged: list[tuple[float, int]], timed: list[tuple[float, int]]) -> list[tuple[float, int]]:
    """The [(t, step)] to line the offload view up on: over the stretch the ranks timed, their steps, each at the
    moment it ended (a log line is stamped when the supervisor reads it, several steps at a time, so the seconds
    between two logged steps are 0 or a read interval); the logged ones before and after it. Where the log numbers
    its steps otherwise than the ranks (a script's own count, a resumed run's), the logged steps alone."""
    if not timed:
        return logged
    first, last = min(s for _, s in timed), max(s for _, s in timed)
    numbers = {s for _, s in timed}
    inside = [s for _, s in logged if first <= s <= last]
    if logged and (not inside or any(s not in numbers for s in inside)):
        return logged
    before = [(t, s) for t, s in logged if s < first]
    after = [(t, s) for t, s in logged if s > last]
    return before + sorted(timed, key=lambda pair: pair[1]) + after


def step_phases(run_id: str, store_path: Path | str, last: int = 3000) -> dict[str, Any] | None:
    """The slowest rank's step phases on the offload view's time axis: {"rank", "straggler", "ranks", "t": [step end
    times], "step": [step numbers], "<phase>": [ms per step]} for its newest `last` steps, or None when no step was
    timed (backend/steps). "straggler" is the anatomy's (the rank the others wait for, None where the ranks are
    evenly matched or there is one), so a view calls "rank" the slowest only where the Step tab marks it so;
    "ranks" is how many ranks timed steps."""
    import numpy as np

    from traindeck.backend.runs.record.run_store import RunStore
    from traindeck.backend.steps import PHASES, analyse

    with RunStore(store_path, busy_timeout_s=2.0) as store:
        recent = store.steps(run_id, last=200)
        if not recent:
            return None
        anatomy = analyse(recent)
        rank = anatomy.slowest_rank
        records = store.steps(run_id, rank=rank, last=last)
    out: dict[str, Any] = {"rank": rank, "straggler": anatomy.straggler, "ranks": len(anatomy.ranks),
                           "t": np.array([r.t for r in records], dtype=float),
                           "step": np.array([r.step for r in records], dtype=int)}
    for phase in PHASES:
        out[phase] = np.array([r.phase(phase) for r in records], dtype=float)
    return out


def summarize_steps(figures: Sequence[dict[str, Any]], last: int = 20) -> dict[str, float | None]:
    """Medians over the newest `last` per-step figures of an offload view (None where no step had the figure)."""
    import statistics

    recent = list(figures)[-last:]
    keys = ("seconds_per_step", "pcie_h2d_bytes_per_step", "pcie_d2h_bytes_per_step", "nvme_read_bytes_per_step",
            "nvme_write_bytes_per_step", "disk_read_bytes_per_step", "disk_write_bytes_per_step",
            "peak_ranks_host_bytes", "mean_gpu_util_pct")
    out: dict[str, float | None] = {"steps": float(len(recent))}
    for key in keys:
        values = [f[key] for f in recent if f.get(key) is not None]
        out[key] = float(statistics.median(values)) if values else None
    return out
