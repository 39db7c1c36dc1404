"""The run a viewer is watching, as state without widgets: what has been read of it so far (record, events,
metrics, the charted series as BoundedSeries: bounded memory for a run of days), whether a read is on its way,
and the story of a stop.

The Runs page is a view of this model: it asks `begin_poll()` whether to read, reads with `read_arguments()` off
the UI thread (watch.read_view), hands the answer to `apply()` and draws what the returned `ViewChange` says.
Answers about a run that is no longer open are dropped here (`apply` returns None), so every client gets
stale-result dropping without counting generations itself.

Plain callbacks, no Qt (napari's layer models and superqt's workers are the pattern): `on(kind, callback)`
registers a listener for "opened", "record", "ended" or "stop"; tests drive the model with real RunViews and need
no widget.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from traindeck.backend.runs.control.view import STOP_EVENTS, RunView, chart_names, default_other, event_line
from traindeck.backend.runs.record.run_store import RunEvent, RunRecord
from traindeck.backend.runs.record.series import BoundedSeries
from traindeck.backend.runs.record.throughput import BatchShape

Change = Literal["opened", "record", "ended", "stop"]

# A stopped run's console ends in the launcher's KeyboardInterrupt/SIGTERM traceback (red): that is what a stop
# looks like from inside, and people take it for a crash.
STOPPED_TRACEBACK_NOTE = ("A traceback at the end of the console (KeyboardInterrupt, SIGINT or SIGTERM in the "
                          "launcher) is how a stopped run ends: expected, not a failure.")


@dataclass
class ViewChange:
    """What one read changed, for the view to draw."""

    record: RunRecord
    first: bool  # the run's record arrived for the first time (the view opens its console log)
    names_changed: bool  # the set of metric names grew: the view refills its series chooser
    other_changed: bool = False  # the model chose the series beside the losses: the view gives it a new chart
    series: set[str] = field(default_factory=set)  # shown series that changed (read whole, or new points)
    news: bool = False  # anything new at all (record, events, metrics): the view polls at its live pace
    ended_now: bool = False  # the run's end was seen in this read
    new_metrics: bool = False  # a metric value changed
    poll_again: bool = False  # read once more at once (a series to fetch whole, or the end to confirm)
    done: bool = False  # nothing more will change: stop polling


_ASKED = "asked the run to stop"


class WatchedRun:
    """One watched run at a time; `open()` another and everything read of the previous one is forgotten."""

    def __init__(self) -> None:
        self._listeners: dict[str, list[Callable[[WatchedRun], None]]] = {}
        self.generation = 0  # bumped by open(): answers carry the generation they were asked under
        self.run_id: str | None = None
        self._reset()

    def _reset(self) -> None:
        self.record: RunRecord | None = None
        self.events: list[RunEvent] = []
        self.stop_lines: list[str] = []  # what this client did about a stop, before the supervisor says it
        self.stop_pending = False  # our stop request is on its way (before the supervisor records it)
        self.after_event = 0
        self.metric_mark: int | None = None  # the store's metric rows seen so far (None: none yet)
        self.revision_mark: int | None = None  # the store's metric revisions seen so far (None: none yet)
        self.metrics: dict[str, float] = {}  # latest value of every series
        self.metric_rows: dict[str, int] = {}  # the store row each of `metrics` is in (a revision of it changes it)
        self.shape: BatchShape | None = None  # the run's global batch and sequence length (its first read's)
        self.metric_names: tuple[str, ...] = ()
        self.other: str | None = None  # the series shown beside the losses
        self.shown: tuple[str, ...] = ()  # more series charted (the metrics grid's visible charts)
        # Shown series read whole so far, bounded (recent points whole, older ones min/max folded); each read's
        # rows after the metric mark continue them. No de-duplication by time: a whole read stops at its view's
        # mark, so nothing is repeated, and points sharing a timestamp (several steps logged at once) all count.
        self.series: dict[str, BoundedSeries] = {}
        self.end_seen = False
        self.remaining: list[int] | None = None  # pids of the run still alive after it ended (None: not asked)
        self.polling = False
        self.poll_again = False
        self.missing = False  # the last read found no such run

    # ---------------------------------------------------------------------------------------------- listeners
    def on(self, change: Change, callback: Callable[[WatchedRun], None]) -> None:
        """Call `callback(self)` on every `change` ("opened", "record", "ended" or "stop")."""
        self._listeners.setdefault(change, []).append(callback)

    def _emit(self, change: Change) -> None:
        for callback in list(self._listeners.get(change, ())):
            callback(self)

    # ---------------------------------------------------------------------------------------------- opening
    def open(self, run_id: str) -> bool:
        """Watch `run_id`; False (and nothing forgotten) when it is the run already watched."""
        if run_id == self.run_id:
            return False
        self.generation += 1
        self.run_id = run_id
        self._reset()
        self._emit("opened")
        return True

    def close(self) -> None:
        """Watch nothing (the view reads another store); answers already asked for are dropped."""
        self.generation += 1
        self.run_id = None
        self._reset()

    def current(self, generation: int) -> bool:
        """Whether an answer asked under `generation` is still about the open run."""
        return generation == self.generation

    # ---------------------------------------------------------------------------------------------- reading
    def chart_series(self) -> list[str]:
        """The series charted: the losses, then the one shown beside them (if any), then the others shown."""
        losses, _others = chart_names(self.metric_names)
        names = losses + ([self.other] if self.other else [])
        return names + [name for name in self.shown if name not in names]

    def set_shown(self, names: tuple[str, ...] | list[str]) -> bool:
        """Chart `names` too (read whole, then kept up to date); series no longer charted are forgotten, so what is
        held stays what is on screen. True when one of them still has to be read."""
        self.shown = tuple(names)
        charted = set(self.chart_series())
        for name in [n for n in self.series if n not in charted]:
            del self.series[name]
        return self.wants_whole_series()

    def set_other(self, name: str | None) -> None:
        """Show `name` beside the losses; the previous one's points are forgotten (its chart is new)."""
        if self.other is not None:
            self.series.pop(self.other, None)
        self.other = name

    def begin_poll(self) -> int | None:
        """The generation to read under, or None when a read is already on its way (then one more follows it)."""
        if self.run_id is None:
            return None
        if self.polling:
            self.poll_again = True
            return None
        self.polling = True
        self.poll_again = False
        return self.generation

    def read_arguments(self) -> dict[str, Any]:
        """Keyword arguments for watch.read_view: only what is new since the last read."""
        return {"after_event": self.after_event, "metric_mark": self.metric_mark, "revision_mark": self.revision_mark,
                "whole_series": [name for name in self.chart_series() if name not in self.series],
                "check_remaining": self.record is not None and self.record.finished and self.remaining is None}

    def poll_failed(self, generation: int) -> None:
        """A read failed: the next tick may read again (unless the answer was about a run no longer open)."""
        if self.current(generation):
            self.polling = False

    def apply(self, generation: int, view: RunView | None) -> ViewChange | None:
        """Take a read's answer. None: it was about a run no longer open, or the run is unknown (`missing`)."""
        if not self.current(generation):
            return None
        self.polling = False
        if view is None:
            self.missing = True
            return None
        first = self.record is None
        news = first or bool(view.events or view.series or view.whole) or view.record != self.record
        record = self.record = view.record
        if view.shape is not None:
            self.shape = view.shape
        if view.events:
            self.events.extend(view.events)
            self.after_event = view.events[-1].id
        change = ViewChange(record, first=first, names_changed=False, news=news)
        self._take_metrics(view, change)
        if self.wants_whole_series():
            self.poll_again = True  # fetch the newly shown series now rather than at the next tick
        if record.finished and not self.end_seen:
            self.end_seen = True
            change.ended_now = True
            self.poll_again = True  # once more: whether anything of the run remains
        if view.remaining is not None:
            self.remaining = view.remaining
        change.poll_again = self.poll_again
        change.done = record.finished and self.remaining is not None and not self.poll_again
        self._emit("record")
        if change.ended_now:
            self._emit("ended")
        if view.events or view.remaining is not None:
            self._emit("stop")
        return change

    def _take_metrics(self, view: RunView, change: ViewChange) -> None:
        self.metric_mark = view.metric_mark
        self.revision_mark = view.revision_mark
        self._take_revisions(view, change)
        self.metrics.update(view.metrics)
        self.metric_rows.update(view.metric_rows)
        change.new_metrics = change.new_metrics or bool(view.metrics)
        names = tuple(sorted(self.metrics))
        if names != self.metric_names:
            self.metric_names = names
            change.names_changed = True
            if self.other is None:
                chosen = default_other(chart_names(names)[1])
                if chosen is not None:
                    self.set_other(chosen)
                    change.other_changed = True
        wanted = set(self.chart_series())
        for name, series in view.whole.items():
            if name in wanted:  # (the other series may have changed while this read was on its way)
                self.series[name] = series  # read up to this view's mark: holds its newer rows too
                change.series.add(name)
        for name, points in view.series.items():
            if name in self.series and name not in view.whole:
                self.series[name].add_rows(points)  # rows after the whole read's mark: none repeated
                change.series.add(name)
            # a series not (yet) charted: its whole history is read first, these rows are in it

    def _take_revisions(self, view: RunView, change: ViewChange) -> None:
        """Rows read before and revised since (printed values made exact): the held points and latest values that
        came from them take their new values, before the read's new rows (which hold them already) are added."""
        for row, name, step, t, old, new in view.revisions:
            if self.metric_rows.get(name) == row and self.metrics.get(name) == old:
                self.metrics[name] = new
                change.new_metrics = True
            series = self.series.get(name)
            if series is not None and name not in view.whole:
                x = t if series.x_is_time or step is None else float(step)
                if series.revise(x, old, new):
                    change.series.add(name)

    def wants_whole_series(self) -> bool:
        """A shown series has not been read whole yet: read again now rather than at the next tick."""
        return any(name not in self.series for name in self.chart_series())

    # ---------------------------------------------------------------------------------------------- stopping
    def stop_asked(self, force: bool, grace_s: float) -> None:
        """Note a stop this client asked for (force: SIGKILL at once) in the stop story and tell the listeners."""
        self.stop_lines.append(f"{time.strftime('%H:%M:%S')}  "
                               + ("force stop: SIGKILL to every process of the run" if force else
                                  f"{_ASKED} (grace {grace_s:g} s)"))
        self.stop_pending = True
        self._emit("stop")

    def stop_failed(self, generation: int, text: str) -> bool:
        """False when the failure is about a run no longer open."""
        if not self.current(generation):
            return False
        self.stop_lines.append(f"the stop request failed: {text}")
        self.stop_pending = False
        self._emit("stop")
        return True

    def stop_story(self) -> tuple[str, list[str]] | None:
        """(title, lines) of the stop as it happens: our request, the supervisor's signals, whether anything
        remains; None before any stop."""
        supervisor_heard = any(e.kind == "stop_requested" for e in self.events)
        if not self.stop_lines and not supervisor_heard:
            return None
        # Once the supervisor says "stop requested", our own "asked the run to stop" says it twice.
        lines = [line for line in self.stop_lines if not (supervisor_heard and _ASKED in line)]
        confirming = self.remaining is not None and not self.remaining  # our last line says nothing remains
        seen_stop = False
        for event in self.events:
            seen_stop = seen_stop or event.kind == "stop_requested"
            if not seen_stop or event.kind not in STOP_EVENTS or (confirming and event.kind == "confirmed"):
                continue
            line = event_line(event)
            if event.kind == "finished":  # "stopped: Stopped on request ..." reads as a stutter
                state, _, summary = event.text.partition(": ")
                if summary.lower().startswith(state.lower()):
                    line = event_line(dataclasses.replace(event, text=summary))
            lines.append(line)
        record = self.record
        if record is not None and record.finished and record.state == "stopped":
            lines.append(STOPPED_TRACEBACK_NOTE)  # before the confirmation, which stays the story's last word
        if self.remaining is not None:
            lines.append("confirmed: no process of the run remains" if not self.remaining else
                         f"{len(self.remaining)} process(es) of the run are still alive: {self.remaining}")
        done = record is not None and record.finished
        title = ("Stopped" if done and record is not None and record.state == "stopped" else
                 "Stop" if done else "Stopping…")
        return title, lines
