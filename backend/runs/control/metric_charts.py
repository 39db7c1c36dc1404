"""What the Runs page's metric charts compute, without widgets: TensorBoard's smoothing (a debiased exponential
moving average), the filter and pins of the metrics grid, the x axis by step, wall time or time since the run's
start (a step clock maps steps to the times they were logged, and sample times back to steps), values a log scale
cannot show, the figures the legends and "Last metrics" share, and the CSV export. The System view's series are in
system_series.py.

Numpy only (no Qt), so the Runs page, the History page and tests use the same numbers.
"""

from __future__ import annotations

import csv
import io
import math
import re
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from traindeck.backend.core import duration_text
from traindeck.backend.core.fileio import atomic_write_bytes
from traindeck.backend.runs.record.run_store import RunStore
from traindeck.backend.runs.record.series import BoundedSeries

XMode = Literal["step", "time", "relative"]
X_MODES: tuple[XMode, ...] = ("step", "time", "relative")
MAX_SMOOTHING = 0.99
CLOCK_KNOTS = 4_000  # a step clock keeps at most this many (step, time) pairs: bounded for a run of days
CSV_HEADER = ("metric", "step", "wall_time", "value", "smoothed")
_SEPARATORS = re.compile(r"[/_.\-]+")  # the grid's filter: one separator matches another


# ---- smoothing ------------------------------------------------------------------------------------------------
def ema(values: Sequence[float] | np.ndarray, weight: float) -> np.ndarray:
    """TensorBoard's smoothing of `values`: an exponential moving average with `weight` (0 = none, up to 0.99),
    debiased so the first points are not pulled towards 0. NaN and infinite values are kept as they are and left
    out of the average (a gap does not drag the line)."""
    y = np.asarray(values, dtype=np.float64).ravel()
    w = min(MAX_SMOOTHING, max(0.0, float(weight)))
    if w == 0.0 or len(y) == 0:
        return y.copy()
    finite = np.isfinite(y)
    x = y[finite]
    out = y.copy()
    if len(x) == 0:
        return out
    if np.all(x == x[0]):
        return out  # a constant (a fixed learning rate): smoothing would only bend its start
    smoothed = np.empty_like(x)
    # Blocks short enough that w**-L stays far inside float64: within a block the recurrence
    # s_j = w s_{j-1} + (1 - w) x_j is a scaled cumulative sum, so the whole average costs a few numpy passes.
    length = int(min(8192, max(1, math.floor(150 * math.log(10) / -math.log(w)))))
    state = 0.0
    for start in range(0, len(x), length):
        block = x[start:start + length]
        j = np.arange(len(block), dtype=np.float64)
        scale = w ** -j  # w**-i for the terms, w**j brings the sum back
        partial = np.cumsum(block * scale) * (1 - w) * (w ** j)
        smoothed[start:start + len(block)] = partial + state * w ** (j + 1)
        state = float(smoothed[start + len(block) - 1])
    counts = np.arange(1, len(x) + 1, dtype=np.float64)
    smoothed /= 1 - w ** counts
    out[finite] = smoothed
    return out


# ---- the grid's names -----------------------------------------------------------------------------------------
def _separated(text: str) -> str:
    return _SEPARATORS.sub(" ", text.lower())


def filter_metrics(names: Iterable[str], query: str = "", pins: Iterable[str] = (), *, ordered: bool = False,
                   words: Mapping[str, str] | None = None) -> list[str]:
    """The metrics to chart, in order: the pinned ones first (in the order pinned), then the others sorted (in the
    order given where `ordered`); only names containing `query` (case-insensitive substring, as W&B's panel
    search), or whose `words` (a chart's title, what it shows) do. `/`, `_`, `.` and `-` match one another:
    TensorBoard's `eval/` finds the `eval_loss` a Trainer prints, and `eval_` its `eval/loss` tag."""
    wanted = _separated(query).strip()
    known = list(dict.fromkeys(names)) if ordered else sorted(set(names))
    pinned = [p for p in dict.fromkeys(pins) if p in known]
    rest = [n for n in known if n not in pinned]
    found = words or {}
    return [n for n in pinned + rest if wanted in _separated(n) or wanted in _separated(found.get(n, ""))]


def page_of(names: Sequence[str], page: int, per_page: int) -> tuple[list[str], int, int]:
    """(the names on `page`, the page shown (clamped), the number of pages (at least 1))."""
    per_page = max(1, per_page)
    pages = max(1, math.ceil(len(names) / per_page))
    page = min(max(0, page), pages - 1)
    return list(names[page * per_page:(page + 1) * per_page]), page, pages


@dataclass
class ChartChoice:
    """Which of a view's charts show, without widgets: the names its filter lets through (filter_metrics: `query`,
    `pins` first, sorted or in the order given where `ordered`, found also by `words`), `per_page` at a time (0:
    all on one page). The metrics grid and the System view each hold one."""

    names: list[str] = field(default_factory=list)
    query: str = ""
    pins: list[str] = field(default_factory=list)
    per_page: int = 0
    ordered: bool = False
    words: dict[str, str] = field(default_factory=dict)
    page: int = 0
    pages: int = 1

    def filtered(self) -> list[str]:
        """Every name the filter lets through, pinned first: what the pages show in turn."""
        return filter_metrics(self.names, self.query, self.pins, ordered=self.ordered, words=self.words)

    def shown(self) -> list[str]:
        """The names on the page shown (`page` kept within the pages there are, `pages` counted)."""
        names = self.filtered()
        if not self.per_page:
            self.page, self.pages = 0, 1
            return names
        shown, self.page, self.pages = page_of(names, self.page, self.per_page)
        return shown

    def set_query(self, query: str) -> None:
        """Another filter: back to the first page."""
        self.query, self.page = query, 0

    def set_pinned(self, name: str, pinned: bool) -> bool:
        """Pin or unpin `name` (pinned ones come first, in the order pinned); whether that changed the pins."""
        pins = [p for p in self.pins if p != name] + ([name] if pinned else [])
        changed = pins != self.pins
        self.pins = pins
        return changed


# ---- x axis ---------------------------------------------------------------------------------------------------
class StepClock:
    """When each step was logged, as (step, time) pairs of increasing step: steps of any series map to times by
    linear interpolation. At most CLOCK_KNOTS pairs: when full, every other older one is dropped."""

    def __init__(self, max_knots: int = CLOCK_KNOTS) -> None:
        self.max_knots = max(4, int(max_knots))
        self._steps: list[float] = []
        self._times: list[float] = []

    def __len__(self) -> int:
        return len(self._steps)

    def add(self, steps: Iterable[float | None], times: Iterable[float]) -> None:
        """Pairs in any order (a step already known keeps its first time); pairs without a step are skipped."""
        pairs = [(float(step), float(t)) for step, t in zip(steps, times, strict=False)
                 if step is not None and math.isfinite(step) and math.isfinite(t)]
        if not pairs:
            return
        if all(b[0] > a[0] for a, b in zip(pairs, pairs[1:], strict=False)) and (
                not self._steps or pairs[0][0] > self._steps[-1]):
            self._steps.extend(step for step, _ in pairs)  # the usual case: newer steps, in order
            self._times.extend(t for _, t in pairs)
        else:  # older history arriving after newer points (the clock's first read): merged
            merged = dict(reversed(pairs))
            merged.update(zip(self._steps, self._times, strict=True))
            ordered = sorted(merged.items())
            self._steps = [step for step, _ in ordered]
            self._times = [t for _, t in ordered]
        while len(self._steps) > self.max_knots:
            keep = len(self._steps) - self.max_knots // 2  # thin the older part, keep the newest whole
            self._steps = self._steps[:keep:2] + self._steps[keep:]
            self._times = self._times[:keep:2] + self._times[keep:]

    def times(self, steps: np.ndarray) -> np.ndarray:
        """The wall time (UNIX seconds) of each step; NaN while the clock knows no step."""
        steps = np.asarray(steps, dtype=np.float64)
        if not self._steps:
            return np.full(len(steps), np.nan)
        known = np.asarray(self._steps)
        times = np.asarray(self._times)
        if len(known) == 1:
            return np.full(len(steps), times[0])
        inside = np.interp(steps, known, times)
        # Beyond the knots: at the last known pace rather than flat (a new step is later than the last known one).
        rate = (times[-1] - times[0]) / (known[-1] - known[0]) if known[-1] > known[0] else 0.0
        after = steps > known[-1]
        inside[after] = times[-1] + (steps[after] - known[-1]) * rate
        return inside

    def steps(self, times: np.ndarray, *, ended: bool = False) -> np.ndarray:
        """The step being run at each wall time (UNIX seconds), interpolated between the logged steps and carried
        on at the last known pace after the newest (a live run is at a step it has not logged yet); NaN before the
        first logged step and while the clock knows fewer than two steps (no pace to tell). For a run that has
        `ended`, NaN after its last logged step too: it ran no step later, and its shutdown is no step."""
        times = np.asarray(times, dtype=np.float64)
        if len(self._steps) < 2:
            return np.full(len(times), np.nan)
        known = np.asarray(self._steps)
        logged = np.maximum.accumulate(np.asarray(self._times))  # a clock set back must not fold the mapping
        steps = np.interp(times, logged, known)
        steps[times < logged[0]] = np.nan
        rate = (known[-1] - known[0]) / (logged[-1] - logged[0]) if logged[-1] > logged[0] else 0.0
        after = times > logged[-1]
        steps[after] = np.nan if ended else known[-1] + (times[after] - logged[-1]) * rate
        return steps


def read_step_clock(store: RunStore, run_id: str, max_knots: int = CLOCK_KNOTS) -> list[tuple[float, float]]:
    """(step, time) pairs of the run's most often logged series (at most `max_knots`, evenly spread, the last
    included): what a StepClock starts from."""
    spans = store.metric_step_spans(run_id)
    if not spans:
        return []
    name = max(spans, key=lambda n: (spans[n][4], n))
    rows = spans[name][4]
    stride = max(1, math.ceil(rows / max(1, max_knots - 1)))
    pairs: list[tuple[float, float]] = []
    index = 0
    last: tuple[float, float] | None = None
    for chunk in store.metric_series_chunks(run_id, name):
        for step, t, _value in chunk:
            if step is not None:
                last = (float(step), t)
                if index % stride == 0:
                    pairs.append(last)
            index += 1
    if last is not None and (not pairs or pairs[-1] != last):
        pairs.append(last)
    return pairs


def x_values(x: np.ndarray, mode: XMode, *, x_is_time: bool = False, clock: StepClock | None = None,
             start: float | None = None) -> np.ndarray:
    """A series' x (steps, or times for a series logged without steps) for an axis by `mode`: "step" as held,
    "time" the wall time of each point, "relative" seconds since `start` (the run's start)."""
    x = np.asarray(x, dtype=np.float64)
    if mode == "step":
        return x
    times = x if x_is_time else (clock.times(x) if clock is not None else np.full(len(x), np.nan))
    if mode == "relative":
        origin = start if start is not None else (float(times[0]) if len(times) else 0.0)
        return times - origin
    return times


def time_x(t: np.ndarray, mode: XMode, *, clock: StepClock | None = None, start: float | None = None,
           ended: bool = False) -> np.ndarray:
    """Sample times (UNIX seconds) for an axis by `mode`: as they are ("time"), seconds since `start`
    ("relative"), or the step run at each (StepClock.steps; NaN where no step tells, also after the last step of
    a run that has `ended`)."""
    t = np.asarray(t, dtype=np.float64)
    if mode == "step":
        return clock.steps(t, ended=ended) if clock is not None else np.full(len(t), np.nan)
    return x_values(t, mode, x_is_time=True, start=start)


def moment_words(t: float, mode: XMode, *, clock: StepClock | None = None, start: float | None = None,
                 ended: bool = False) -> str:
    """A moment (UNIX seconds) in the words of an x axis by `mode`: its clock time ("12:04:05"), the time since
    `start` ("2:30"), or the step run then ("step 1,234"; its clock time where no step tells, as after the last
    step of a run that has `ended`: see StepClock.steps)."""
    if mode == "relative" and start is not None:
        return duration_text(round(t - start))
    if mode == "step" and clock is not None:
        step = float(clock.steps(np.array([t]), ended=ended)[0])
        if math.isfinite(step):
            return f"step {step:,.0f}"
    return time.strftime("%H:%M:%S", time.localtime(t))


# ---- log scale ------------------------------------------------------------------------------------------------
def positive_only(y: np.ndarray) -> tuple[np.ndarray, int]:
    """y for a log scale: values <= 0 become NaN (a gap); with how many were masked."""
    y = np.asarray(y, dtype=np.float64)
    bad = y <= 0  # NaN compares False: gaps stay gaps, not counted
    count = int(np.count_nonzero(bad))
    if not count:
        return y, 0
    masked = y.copy()
    masked[bad] = np.nan
    return masked, count


def masked_words(count: int) -> str:
    """What a log-scaled chart says about the values it cannot draw ("" for none)."""
    if count <= 0:
        return ""
    return f"{count:,} value{'s' if count != 1 else ''} ≤ 0 not shown (log scale)"


# ---- last figures ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LastFigure:
    value: float
    step: float | None  # None: the series is not charted (its step is not held)


def last_figures(metrics: Mapping[str, float], series: Mapping[str, BoundedSeries]) -> dict[str, LastFigure]:
    """The latest value of every metric, with its step where the series is held: one read, so the charts'
    legends and "Last metrics" say the same number."""
    figures = {}
    for name, value in metrics.items():
        held = series.get(name)
        step = held.last_x if held is not None and not held.x_is_time else None
        figures[name] = LastFigure(float(value), step)
    return figures


# ---- export ---------------------------------------------------------------------------------------------------
MetricTable = dict[str, list[tuple[int | None, float, float]]]


def read_metric_table(store: RunStore, run_id: str, names: Sequence[str]) -> MetricTable:
    """Every recorded (step, time, value) of each of `names` (for an export: the whole series, not the chart's
    reduced copy)."""
    table: MetricTable = {}
    for name in names:
        rows = table.setdefault(name, [])
        for chunk in store.metric_series_chunks(run_id, name):
            rows.extend(chunk)
    return table


def metrics_csv(table: Mapping[str, Sequence[tuple[int | None, float, float]]], smoothing: float,
                unsmoothed: Collection[str] = ()) -> str:
    """One row per point: metric, step (empty when not logged), wall time (UNIX seconds), value, smoothed (empty
    for the series named in `unsmoothed`: the system series, which the charts draw as recorded)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_HEADER)
    plain = set(unsmoothed)
    for name, rows in table.items():
        values = [value for _, _, value in rows]
        smoothed = [""] * len(rows) if name in plain else [repr(float(s)) for s in ema(values, smoothing)]
        for (step, t, value), s in zip(rows, smoothed, strict=True):
            writer.writerow((name, "" if step is None else step, repr(float(t)), repr(float(value)), s))
    return out.getvalue()


def write_metrics_csv(path: Path, table: Mapping[str, Sequence[tuple[int | None, float, float]]],
                      smoothing: float, unsmoothed: Collection[str] = ()) -> Path:
    """metrics_csv() written to `path` in one step (a reader sees no half-written file)."""
    atomic_write_bytes(Path(path), metrics_csv(table, smoothing, unsmoothed).encode("utf-8"), mode=0o644)
    return Path(path)


def write_export(path: Path, data: bytes) -> Path:
    """An exported file (a chart's PNG) written in one step."""
    atomic_write_bytes(Path(path), data, mode=0o644)
    return Path(path)
