"""What a run view shows, read in one go (a client calls this off its UI thread), and the view's stop actions.

`read_view` gathers one run's record, its new events, its last metrics and new chart points; `runs_for_list` the
runs to offer (running first). The texts (progress, rate, ETA, duration, stall) are worded here (a duration by
core's `duration_text`, as every clock-style duration is) so the dashboard and any other client say the same thing.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traindeck.backend.core import duration_text
from traindeck.backend.runs.control.lifecycle import stop_run
from traindeck.backend.runs.record.run_store import RunEvent, RunRecord, RunStore
from traindeck.backend.runs.record.series import BoundedSeries, load_series
from traindeck.backend.runs.record.throughput import BatchShape, batch_shape
from traindeck.backend.runs.supervisor.liveness import reconcile, run_processes

# Events that tell the story of a stop: shown as the escalation happens.
STOP_EVENTS = frozenset({"stop_requested", "stop_signal", "leftovers", "confirmed", "unconfirmed", "finished", "lost"})
# Metric names shown on the other chart by default, best first (the loss chart takes every "*loss*" series).
PREFERRED_OTHER = ("learning_rate", "lr", "grad_norm", "throughput", "samples_per_second", "epoch")


@dataclass
class RunView:
    record: RunRecord
    events: list[RunEvent] = field(default_factory=list)  # new since the `after_event` asked for
    metrics: dict[str, float] = field(default_factory=dict)  # latest values: of every series on a first read,
    #                                                          of the series with new points afterwards
    series: dict[str, list[tuple[int | None, float, float]]] = field(default_factory=dict)  # (step, t, value)
    #                                                          recorded after metric_mark
    whole: dict[str, BoundedSeries] = field(default_factory=dict)  # the `whole_series` asked for, bounded
    metric_mark: int = 0  # pass back as `metric_mark` to get only newer metric rows next time
    # Rows read before and revised since `revision_mark` (printed values made exact):
    # (row id, name, step, t, old value, new value), oldest first
    revisions: list[tuple[int, str, int | None, float, float, float]] = field(default_factory=list)
    revision_mark: int = 0  # pass back as `revision_mark` to get only newer revisions next time
    metric_rows: dict[str, int] = field(default_factory=dict)  # the row id of each value in `metrics`
    remaining: list[int] | None = None  # pids of the run still alive; only when asked (after the run ended)
    shape: BatchShape | None = None  # the run directory's global batch and sequence length; on a first read only


def read_view(store: RunStore, run_id: str, *, after_event: int = 0, metric_mark: int | None = None,
              whole_series: Iterable[str] = (), check_remaining: bool = False,
              revision_mark: int | None = None) -> RunView | None:
    """One run as a view needs it; None when the store does not know the run.

    Metrics are read incrementally: the first read (metric_mark None) gives every series' last value and a mark;
    later reads give the points recorded after the mark, grouped by series, so a poll costs what is new, not the
    run's whole history. `whole_series` are read entirely (a chart shown for the first time) into BoundedSeries
    (recent points whole, older ones min/max folded: bounded memory for a run of any length), up to the
    returned mark: a later read's new rows continue them, none repeated. Rows revised since `revision_mark` (a
    printed value made exact after a view read it) come in `revisions`; the rows read here hold their new values
    already, so the view applies the revisions first and the new rows after them.
    """
    record = store.get_run(run_id)
    if record is None:
        return None
    view = RunView(record, events=store.events(run_id, after_id=after_event))
    # Before the rows are read: a revision after this mark comes with the next read, also where the rows read below
    # hold its value already (it then finds nothing to change).
    view.revision_mark = store.revisions_mark()
    if revision_mark is not None:
        view.revisions = [entry[1:] for entry in
                          store.metric_revisions_after(run_id, revision_mark, up_to=view.revision_mark)]
    if metric_mark is None:
        view.metric_mark = store.metrics_mark()  # before the reads below: nothing can fall between them
        latest = store.last_metric_rows(run_id)
        view.metrics = {name: value for name, (_row, value) in latest.items()}
        view.metric_rows = {name: row for name, (row, _value) in latest.items()}
        view.shape = batch_shape(record.run_dir)  # written at launch, before the run: it does not change
    else:
        rows = store.metric_rows_after(run_id, metric_mark)
        view.metric_mark = rows[-1][0] if rows else metric_mark
        for rowid, name, step, t, value in rows:
            view.metrics[name] = value
            view.metric_rows[name] = rowid
            view.series.setdefault(name, []).append((step, t, value))
    for name in whole_series:
        # Up to this view's mark: the next read (rows after the mark) continues exactly where this one stops.
        view.whole[name] = load_series(functools.partial(store.metric_series_chunks, run_id, name,
                                                         up_to_mark=view.metric_mark))
    if check_remaining and record.finished:
        view.remaining = [p.pid for p in run_processes(run_id, record)]
    return view


ZOOM_RECENT = 20_000  # a zoomed range: this many points whole (more than any screen has columns) ...
ZOOM_BUCKETS = 4_000  # ... and any earlier points of the range min/max folded


def read_range(store: RunStore, run_id: str, name: str, low: float, high: float, x_is_time: bool) -> BoundedSeries:
    """One series between x = low and high (steps, or times for a series without steps) at the resolution a zoomed
    chart needs: the dashboard's own copy holds only a reduced history of the older part of a long run."""
    bounds: dict[str, Any] = {"after_t": low, "before_t": high} if x_is_time else {"steps": (low, high)}
    return load_series(functools.partial(store.metric_series_chunks, run_id, name, **bounds), ZOOM_RECENT,
                       ZOOM_BUCKETS)


def runs_for_list(store: RunStore, limit: int = 50, mark_lost: bool = True) -> list[RunRecord]:
    """Running runs (newest first), then the most recent others. With mark_lost, runs whose supervisor is gone
    are first ended and marked lost (what any look at the runs does)."""
    if mark_lost:
        reconcile(store)
    running = store.list_runs(state="running")
    recent = [r for r in store.list_runs(limit=limit) if r.state != "running"]
    return running + recent[: max(0, limit - len(running))]


def with_open_run(records: Iterable[RunRecord], record: RunRecord | None) -> list[RunRecord]:
    """The listing with the open run's row replaced by `record`, the open run as the view's own read has it: a view
    shows one read of a run everywhere (its header and its line in the list), not two reads made at different
    moments (the list's row 85% beside a header at 78%)."""
    if record is None:
        return list(records)
    return [record if r.id == record.id else r for r in records]


def newest_running(records: Iterable[RunRecord]) -> RunRecord | None:
    running = [r for r in records if r.state == "running"]
    return max(running, key=lambda r: (r.created_at, r.id)) if running else None


# ---- stop ---------------------------------------------------------------------------------------------------------
def request_stop(store: RunStore, run_id: str, grace_s: float = 10.0) -> list[str]:
    """Ask the supervisor to stop the run (SIGINT, SIGTERM after grace_s, then SIGKILL); returns at once."""
    return stop_run(store, run_id, grace_s=grace_s, wait=False).messages


def force_stop(store: RunStore, run_id: str) -> list[str]:
    """Stop now with SIGKILL: a stop request without grace. The supervisor starts it at SIGKILL, or hurries a stop
    already under way, and records the escalation like any other stop."""
    record = store.get_run(run_id)
    if record is None:
        raise KeyError(run_id)
    if record.finished:
        return [f"run {run_id} already ended ({record.state})"]
    return ["force stop: SIGKILL to every process of the run now",
            *stop_run(store, run_id, grace_s=0.0, wait=False).messages]


# ---- words --------------------------------------------------------------------------------------------------------
STALLED_ETA = "stalled"


@dataclass(frozen=True)
class ProgressText:
    fraction: float | None  # 0..1, None when the total is unknown
    count: str  # "1,240 / 2,000 steps" or "1,240 steps"
    rate: str  # "9.95 steps/s", "" when unknown
    eta: str  # "1:16", "" when unknown or done

    def line(self) -> str:
        parts = [self.count]
        if self.fraction is not None:
            parts[0] += f" ({100 * self.fraction:.0f}%)"
        if self.rate:
            parts.append(self.rate)
        if self.eta == STALLED_ETA:
            parts.append("stalled: no time left can be told")
        elif self.eta:  # "ETA 10:47" beside clock times (started 09:51) read as a time of day: say it is what is left
            parts.append(f"{self.eta} left")
        return " · ".join(parts)


def progress_text(progress: Mapping[str, Any] | None, *, stalled: bool = False) -> ProgressText | None:
    """The run record's progress {current, total, rate, eta_s, unit} in words; None when there is none. While the
    run is `stalled` the last rate and ETA are not shown as if they held: the ETA reads "stalled"."""
    if not progress or progress.get("current") is None:
        return None
    current = float(progress["current"])
    total = progress.get("total")
    unit = str(progress.get("unit") or "it")
    units = unit if unit.endswith("s") or len(unit) <= 2 else unit + "s"  # "steps", but "it", "B"
    fraction = min(1.0, max(0.0, current / float(total))) if total else None
    count = f"{_number(current)} / {_number(float(total))} {units}" if total else f"{_number(current)} {units}"
    rate = ""
    value = progress.get("rate")
    if value:
        rate = f"{value:.3g} {units}/s" if value >= 1 else f"{1 / value:.3g} s/{unit}"
    eta = ""
    if stalled:
        rate, eta = "", STALLED_ETA
    elif progress.get("eta_s") is not None and (fraction is None or fraction < 1):
        eta = duration_text(float(progress["eta_s"]))
    return ProgressText(fraction, count, rate, eta)


def _number(value: float) -> str:
    return f"{value:,.0f}" if value == int(value) else f"{value:,.2f}"


def run_duration(record: RunRecord, now: float | None = None) -> float | None:
    """Seconds the run has been (or was) running; None before it started."""
    start = record.started_at or record.created_at
    if start is None:
        return None
    end = record.ended_at if record.ended_at is not None else (time.time() if now is None else now)
    return max(0.0, end - start)


def stall_warning(record: RunRecord) -> str | None:
    """The supervisor's stall warning while it holds ("stalled: no output or progress for 12 min; ...")."""
    if record.state == "running" and record.state_detail.startswith("stalled"):
        return record.state_detail
    return None


def op_build_note(record: RunRecord) -> str | None:
    """While the supervisor sees DeepSpeed/torch ops being built: "building DeepSpeed's cpu_adam (first use, ...)"."""
    if record.state == "running" and record.state_detail.startswith("building "):
        return record.state_detail
    return None


def take_stacks(record: RunRecord) -> Any:
    """Every living rank's stack now (a StackReport, kept as the run's stacks.json), or None without ranks."""
    from traindeck.backend.runs.diagnosis.run_stacks import take_run_stacks

    return take_run_stacks(Path(record.run_dir), record.processes)


def event_line(event: RunEvent) -> str:
    return f"{time.strftime('%H:%M:%S', time.localtime(event.t))}  {event.text}"


def chart_names(metric_names: Iterable[str]) -> tuple[list[str], list[str]]:
    """(the loss series, the others) of a run's metrics, each sorted; the loss chart draws all of the first."""
    names = sorted(set(metric_names))
    losses = [n for n in names if "loss" in n.lower()]
    return losses, [n for n in names if n not in losses]


def default_other(names: list[str]) -> str | None:
    for preferred in PREFERRED_OTHER:
        if preferred in names:
            return preferred
    return names[0] if names else None
