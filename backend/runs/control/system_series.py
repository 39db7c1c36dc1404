"""The Runs page's System view without widgets: the run's recorded resource samples as its charts draw them
(SYSTEM_CHARTS: each GPU's utilisation and memory, the host's CPU, the ranks' RSS, disk and network), with the words
for what is absent, and their export rows.

Numpy only (no Qt), so the page and tests use the same figures.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from traindeck.backend.runs.control.metric_charts import ChartChoice, MetricTable
from traindeck.backend.runs.record.run_store import RunStore

# ---- the run's system series ----------------------------------------------------------------------------------
SYSTEM_POINTS = 2_000  # a first read of a run's samples: at most this many time buckets (peaks kept) a line
_AFTER = 1e-3  # a later read asks for samples this much after the newest one held (never the same one twice)


@dataclass(frozen=True)
class SystemChart:
    key: str
    title: str
    unit: str  # chart_axis's units: "%" or bytes ("B", "B/s"), written as people read them
    words: str = ""  # what else the view's filter finds it by: its lines, W&B's names for the figure


SYSTEM_CHARTS: tuple[SystemChart, ...] = (
    SystemChart("gpu_util", "GPU utilisation", "%", "GPU 0 utilization util system/gpu"),
    SystemChart("gpu_memory", "GPU memory", "B", "GPU 0 mem allocated"),
    # As the Monitor names it: 100 % = every core busy.
    SystemChart("cpu", "Host CPU (all cores)", "%", "host cpu utilization system/cpu"),
    SystemChart("rank_rss", "Ranks' host memory (RSS)", "B", "all ranks rank 0 process memory mem ram"),
    SystemChart("disk", "Disk I/O", "B/s", "read written io"),
    SystemChart("network", "Network", "B/s", "received sent traffic"),
)


def system_choice(pins: Sequence[str] = ()) -> ChartChoice:
    """The System view's charts to choose from: SYSTEM_CHARTS in their order (pinned ones first), found by key,
    title and words."""
    return ChartChoice([spec.key for spec in SYSTEM_CHARTS], pins=list(pins), ordered=True,
                       words={spec.key: f"{spec.title} {spec.words}" for spec in SYSTEM_CHARTS})
RANKS_SUM = "all ranks"  # the line of the ranks' RSS summed: the ranks alive at each sample
# (chart, line, column of read_series) of the host's figures; each GPU's and each rank's lines are added by name.
_HOST_LINES = (("cpu", "host", "cpu_pct"), ("rank_rss", RANKS_SUM, "ranks_rss"),
               ("disk", "read", "disk_read_bps"), ("disk", "written", "disk_write_bps"),
               ("network", "received", "net_rx_bps"), ("network", "sent", "net_tx_bps"))


@dataclass
class SystemSeries:
    """A read of a run's recorded resource samples, by chart (SYSTEM_CHARTS' keys)."""

    lines: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = field(default_factory=dict)  # line: (t, value)
    references: dict[str, dict[str, float]] = field(default_factory=dict)  # e.g. each GPU's memory size
    missing: dict[str, str] = field(default_factory=dict)  # why a chart has nothing to draw, in words
    last_t: float | None = None  # the newest sample read: the next read asks for what came after it
    samples: int = 0  # samples read (before a first read's bucketing)
    # Lines the recording went on without (a rank that exited; the ranks' sum once none is left), with the time of
    # each one's last sample: said by the read whose samples show the line gone, once.
    ended: dict[str, dict[str, float]] = field(default_factory=dict)


def no_gpu_words(reason: str | None) -> str:
    """Why a run's GPU charts are empty, as the Monitor page says it: no GPU at all, or GPUs NVML cannot read."""
    reason = reason or "NVML lists none"
    if reason.startswith("GPU "):
        return f"NVML can read none of the GPUs. {reason}"
    return f"No NVIDIA GPU found: {reason.rstrip('.')}."


def read_system_series(store: RunStore, run_id: str, after: float | None = None, *, live: bool = False,
                       max_points: int = SYSTEM_POINTS) -> SystemSeries:
    """The run's recorded system figures as SYSTEM_CHARTS draw them: each GPU's utilisation and memory (the run's
    own GPUs where the recording tells them), the host's CPU, each rank's RSS with their sum, disk and network
    rates. A first read (`after` None) buckets the whole run into at most `max_points` points a line; a later
    one gives the samples recorded after `after`, whole. A line without a single figure is left out, and a chart
    left with none says why in `missing` (`live`: the run may still record it).

    A rank's line ends at its last sample, also where the buckets skip it, and breaks (a NaN) where the rank was
    absent from samples in between; a rank absent from the newest sample has exited, and `ended` says when (also a
    later read with no point of it, when it was in the sample the previous read ended with)."""
    from traindeck.backend.monitor.live import rank_lines
    from traindeck.backend.monitor.store_read import read_process_samples, read_series

    since = None if after is None else after + _AFTER
    points = max_points if after is None else None
    recorded = read_series(store.path, run_id, since=since, max_points=points)
    processes = read_process_samples(store.path, run_id, since=since, max_points=points)
    info = recorded["info"]
    out = SystemSeries(samples=int(info.get("samples") or 0))
    t = recorded["t"]
    # The newest sample itself, not its bucket's first: the next read starts after every sample this one covered.
    newest = [float(v) for v in (info.get("last_t"), processes[-1]["t"] if processes else None) if v is not None]
    out.last_t = max(newest) if newest else None

    def add(chart: str, line: str, x: np.ndarray, y: np.ndarray) -> None:
        if len(y) and np.isfinite(y).any():
            out.lines.setdefault(chart, {})[line] = (np.asarray(x, dtype=np.float64), np.asarray(y, np.float64))

    run_gpus = info.get("run_gpus")
    known = info.get("gpus") or ()
    own = {int(g["index"]) for g in known if not run_gpus or g.get("uuid") in run_gpus}
    for index, gpu in sorted(recorded["gpus"].items()):
        if index in own:
            add("gpu_util", f"GPU {index}", gpu["t"], gpu["util_pct"])
            add("gpu_memory", f"GPU {index}", gpu["t"], gpu["mem_used"])
            total = gpu["mem_total"]
            if len(total) and np.isfinite(total).any():
                sizes = out.references.setdefault("gpu_memory", {})
                sizes["GPU size"] = max(sizes.get("GPU size", 0.0), float(np.nanmax(total)))
    ranks = rank_lines(processes)
    exits = _RankExits(store, run_id, since, after, processes, ranks)
    taken = np.array([float(p["t"]) for p in processes])
    for name, line in ranks.items():
        x, y = _broken(line["t"], line["rss"], taken, exits.away_before(name, float(line["t"][0]), taken))
        add("rank_rss", name, *exits.to_end(name, x, y))
    for chart, name, column in _HOST_LINES:
        if name == RANKS_SUM:
            add(chart, name, *exits.to_end(name, t, recorded[column]))
        else:
            add(chart, name, t, recorded[column])
    if exits.ended:
        out.ended["rank_rss"] = exits.ended

    if after is not None and not out.samples and not processes:
        return out  # nothing new: what is shown stands
    yet = " yet" if live else ""
    if not out.samples and after is None:
        words = ("No resource samples recorded for this run yet: its supervisor records them every second."
                 if live else "No resource samples were recorded for this run.")
        out.missing = {chart.key: words for chart in SYSTEM_CHARTS}
        return out
    if not known:
        words = no_gpu_words(info.get("gpu_error"))
        out.missing["gpu_util"] = out.missing["gpu_memory"] = words
    else:
        out.missing["gpu_util"] = f"NVML gave no utilisation of the run's GPUs{yet}."
        out.missing["gpu_memory"] = f"NVML gave no memory figure of the run's GPUs{yet}."
    out.missing["cpu"] = f"No host CPU figure recorded{yet}."
    out.missing["rank_rss"] = f"No rank processes recorded{yet}" + (
        ": the launcher has not started them." if live else ".")
    out.missing["disk"] = f"No disk figures recorded{yet}."
    out.missing["network"] = f"No network figures recorded{yet}."
    for key in out.lines:
        out.missing.pop(key, None)
    return out


def ended_lines(last_seen: Mapping[str, float], alive: Collection[str]) -> dict[str, float]:
    """The rank lines the recording (or a live view) went on without, each with the time of its last sample: every
    line of `last_seen` (a rank's line: the time of its newest point) absent from the newest sample (`alive`: the
    lines in it), and the ranks' sum (RANKS_SUM) with the last of them once no rank is left."""
    ended = {name: t for name, t in last_seen.items() if name not in alive and name != RANKS_SUM}
    if ended and not alive:
        ended[RANKS_SUM] = max(ended.values())
    return ended


def _broken(t: np.ndarray, y: np.ndarray, taken: np.ndarray, away: float | None) -> tuple[np.ndarray, np.ndarray]:
    """A rank's line (t, y) with a NaN at the first of the samples (`taken`: every sample's time, in order) that it
    is absent from between two of its points, so it is not drawn across the time it was away; and one at `away`
    before its first point (a sample it was absent from, when an earlier read drew it: see away_before)."""
    at = np.searchsorted(taken, t)
    cuts = np.flatnonzero(np.diff(at) > 1)
    gaps_t, where = taken[at[cuts] + 1], cuts + 1
    if away is not None:
        gaps_t, where = np.concatenate(([away], gaps_t)), np.concatenate(([0], where))
    if not len(where):
        return t, y
    return np.insert(t, where, gaps_t), np.insert(np.asarray(y, np.float64), where, np.nan)


class _RankExits:
    """Which ranks of a read the recording went on without, and when each had its last sample: the newest sample
    tells who is alive; a line whose last point is a bucket's first sample is looked for in the samples of that
    bucket (so it ends where the rank exited); a later read also asks the sample the previous read ended with."""

    def __init__(self, store: RunStore, run_id: str, since: float | None, after: float | None,
                 processes: list[dict[str, Any]], ranks: dict[str, dict[str, Any]]) -> None:
        from traindeck.backend.monitor.live import rank_lines
        from traindeck.backend.monitor.store_read import read_process_samples

        self.ended: dict[str, float] = {}
        last_seen: dict[str, float] = {}  # the ranks gone from the newest sample: each one's last sample
        self.last_points: dict[str, tuple[float, float]] = {}  # line: its last sample where the read skipped it
        self._after = after
        self._before: set[str] | None = None  # the ranks in the sample the previous read ended with (None: unread)
        newest = read_process_samples(store.path, run_id, since=since, limit=1)
        if not newest:
            return  # nothing recorded in the read's span
        newest_t = float(newest[0]["t"])
        alive = set(rank_lines(newest))
        taken = [float(p["t"]) for p in processes]
        last_sample: dict[str, Any] = {}
        for name, line in ranks.items():
            if name in alive:
                continue
            last = float(line["t"][-1])
            following = next((at for at in taken if at > last), newest_t)
            between = read_process_samples(store.path, run_id, since=last + _AFTER, until=following - _AFTER)
            seen = next((one for one in reversed(between) if name in rank_lines([one])), None)
            if seen is not None:  # the rank lived on into the bucket that its last point starts
                last = float(seen["t"])
                self.last_points[name] = (last, float(rank_lines([seen])[name]["rss"][0]))
                last_sample[name] = seen
            last_seen[name] = last
        before: list[dict[str, Any]] = []
        if after is not None:  # ranks in the sample the previous read ended with, with no point in this one
            before = read_process_samples(store.path, run_id, since=after - _AFTER, until=after + _AFTER)[-1:]
            self._before = set(rank_lines(before)) if before else None
            for name in self._before or ():
                if name not in alive and name not in ranks:
                    last_seen[name] = float(before[0]["t"])
        self.ended = ended_lines(last_seen, alive)
        if RANKS_SUM in self.ended:  # no rank left: the sum's line is drawn on to the last of them
            gone = self.ended[RANKS_SUM]
            final = next((one for name, one in last_sample.items() if self.ended[name] == gone), None)
            if final is not None:
                self.last_points[RANKS_SUM] = (gone, sum(float(line["rss"][0]) if np.isfinite(line["rss"][0])
                                                         else 0.0 for line in rank_lines([final]).values()))

    def away_before(self, name: str, first: float, taken: Sequence[float] | np.ndarray) -> float | None:
        """A sample before `name`'s `first` point that it is absent from, where an earlier read may have drawn it
        (a later read): the read's first sample, or the one the previous read ended with. None: none such."""
        if self._after is None:
            return None
        if len(taken) and taken[0] < first:
            return float(taken[0])
        return self._after if self._before is not None and name not in self._before else None

    def to_end(self, name: str, t: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The line (t, y) drawn on to its last sample where the read's buckets left that out."""
        point = self.last_points.get(name)
        if point is None:
            return t, y
        known = np.flatnonzero(np.isfinite(y))
        if len(known) and t[known[-1]] >= point[0]:
            return t, y
        keep = t < point[0]  # a NaN the buckets put after it (the sum's bucket without ranks) stays after it
        return (np.concatenate((t[keep], [point[0]], t[~keep])),
                np.concatenate((np.asarray(y, np.float64)[keep], [point[1]], np.asarray(y, np.float64)[~keep])))


class SystemLines:
    """What the System view's lines say beyond their figures, over the reads of one run: which lines the recording
    went on without (a rank that exited, the ranks' sum once none is left) and since when; a line with points
    after that is back (a restarted rank)."""

    def __init__(self) -> None:
        self.ended: dict[str, dict[str, float]] = {}  # chart: {line: the time of its last sample}
        self._known: dict[str, list[str]] = {}  # chart: every line read, in the order first read
        self._seen: dict[str, dict[str, float]] = {}  # chart: {rank line: its newest point} (take_ranks)

    def clear(self) -> None:
        """Another run, or the same read again whole (another x axis)."""
        self.ended, self._known, self._seen = {}, {}, {}

    def take_ranks(self, chart: str, seen: Mapping[str, float], alive: Collection[str]) -> None:
        """Rank lines of `chart` as a live view has them, with no read of the recording's ends: the newest point of
        each line in hand (`seen`: a live sample's ranks, or a recording's lines) and the lines of the newest
        sample (`alive`). A rank line taken before and absent from that sample ended at its newest point
        (`ended_lines`, the rule `read_system_series` keeps); one in it is live, back where it had ended."""
        known = self._known.setdefault(chart, [])
        newest = self._seen.setdefault(chart, {})
        for line, t in seen.items():
            if line not in known:
                known.append(line)
            newest[line] = max(t, newest.get(line, t))
        if RANKS_SUM not in known:
            known.append(RANKS_SUM)
        self.ended[chart] = ended_lines(newest, alive)

    def take(self, read: SystemSeries) -> None:
        """A read's lines and ends, after those taken before."""
        for chart, lines in read.lines.items():
            known = self._known.setdefault(chart, [])
            gone = self.ended.get(chart, {})
            for line, (t, y) in lines.items():
                if line not in known:
                    known.append(line)
                finite = t[np.isfinite(y)]
                if line in gone and len(finite) and finite[-1] > gone[line]:
                    del gone[line]  # points after its end: it is back
        for chart, ends in read.ended.items():
            for line in ends:
                if line not in self._known.setdefault(chart, []):
                    self._known[chart].append(line)
            self.ended.setdefault(chart, {}).update(ends)

    def legend_notes(self, chart: str, moment: Callable[[float], str]) -> dict[str, tuple[str, bool] | None]:
        """For each line of `chart` read so far, what its legend says beside (True) or instead of (False) its
        figure, or None for the figure alone: a line the recording went on without says when it ended (`moment`
        writes a time in the x axis' words), in place of a last figure that is no figure of now; the ranks' sum,
        while some rank has exited, how many ranks it counts."""
        gone = self.ended.get(chart, {})
        lines = self._known.get(chart, [])
        ranks = [line for line in lines if line != RANKS_SUM]
        notes: dict[str, tuple[str, bool] | None] = {}
        for line in lines:
            if line in gone:
                notes[line] = (f"{'ended' if line == RANKS_SUM else 'exited'} at {moment(gone[line])}", False)
            elif line == RANKS_SUM and any(rank in gone for rank in ranks):
                notes[line] = (f"({sum(rank not in gone for rank in ranks)} live)", True)
            else:
                notes[line] = None
        return notes


@dataclass
class SystemSection:
    """What the System view shows of a run, without widgets: which system charts (`choice`: its filter and pins)
    and what their lines say beyond their figures (`lines`)."""

    choice: ChartChoice = field(default_factory=system_choice)
    lines: SystemLines = field(default_factory=SystemLines)


def system_export_name(chart: str, line: str) -> str:
    """A system series' name in an export: "system/<chart key>/<line>", e.g. "system/gpu_util/GPU 0"."""
    return f"system/{chart}/{line}"


def read_system_table(store: RunStore, run_id: str, charts: Sequence[str] | None = None) -> MetricTable:
    """Every recorded sample of the run's system series (those SYSTEM_CHARTS draw, or only the charts keyed in
    `charts`; whole: not bucketed) as export rows (no step, wall time, value), each series named by
    system_export_name, in the charts' order."""
    read = read_system_series(store, run_id, max_points=0)
    table: MetricTable = {}
    for chart in SYSTEM_CHARTS:
        if charts is not None and chart.key not in charts:
            continue
        for line, (t, y) in read.lines.get(chart.key, {}).items():
            known = np.isfinite(y)
            table[system_export_name(chart.key, line)] = [
                (None, float(at), float(value)) for at, value in zip(t[known].tolist(), y[known].tolist(), strict=True)]
    return table
